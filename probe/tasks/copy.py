"""Copy (Table tab:dataset-examples, Appendix D.1): output the input words again.

Variants (D.1): ``count`` (one word repeated: the model has to count), ``replace`` (one word
repeated, output as another word), ``random`` (random words, the default), and the 2x versions
of the first and third, ``count-2x`` and ``random-2x`` (output the words twice).
"""

from __future__ import annotations

import random
from typing import ClassVar

from probe.tasks.base import Example, GeneratedTask, Option, one_of, train_length_option
from probe.tasks.tokenizer import vocabulary_of

WORDS = tuple(f"w{i}" for i in range(100))
"""The alphabet the words are drawn from (the paper's ``<w1> <w2> ...``; 100 words as in its code)."""

VARIANTS = ("count", "replace", "random", "count-2x", "random-2x")
PROMPTS = {
    "count": "Copy the following words:",
    "random": "Copy the following words:",
    "count-2x": "Copy the following words twice:",
    "random-2x": "Copy the following words twice:",
    "replace": "Replace {old} with {new} in the following words:",
}


class Copy(GeneratedTask):
    name = "copy"
    summary = "repeat the input words (variants: count, replace, random, 2x)"
    length_unit = "input words"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(20, "threshold L on the number of input words"),
        "variant": Option("random", ", ".join(VARIANTS), one_of(*VARIANTS), "which copy task (Appendix D.1)"),
    }

    def sample(self, rng: random.Random, length: int) -> Example:
        variant = self.options["variant"]
        if variant == "replace":
            old, new = rng.sample(WORDS, 2)
            return self.example_for([old] * length, new)
        if variant.startswith("count"):
            return self.example_for([rng.choice(WORDS)] * length)
        return self.example_for(rng.choices(WORDS, k=length))

    def example_for(self, words: list[str], new: str | None = None) -> Example:
        """The example that copies ``words`` (for ``replace``: writing each as ``new``)."""
        variant = self.options["variant"]
        prompt = PROMPTS[variant].format(old=words[0], new=new)
        output = {"replace": [new] * len(words), "count-2x": words * 2, "random-2x": words * 2}.get(variant, words)
        return Example(f"{prompt} {' '.join(words)} .", " ".join(output), len(words))

    def vocabulary(self) -> list[str]:
        prompt = PROMPTS[self.options["variant"]].format(old="", new="")
        return vocabulary_of(prompt, ".", *WORDS)
