"""Copy (Table tab:dataset-examples, Appendix D.1): output the input words again.

Variants (D.1): ``count`` (one word repeated: the model has to count), ``replace`` (one word
repeated, output as another word), ``random`` (random words, the default), and the 2x versions
of the first and third, ``count-2x`` and ``random-2x`` (output the words twice).

``split=paper`` builds the authors' data (``make_copy_dataset.py`` and the ``s2s_copy``
processor): train and valid on 2-20 words, test on 21-40 only, sources ``Copy: ...`` or
``Replace X with Y in ...``, the two halves of a random-2x output joined by ``[NEXT]`` (count-2x
writes the word 2n times, as theirs does). The authors'
names for the variants: count = ``rsc``, replace = ``rdc``, count-2x = ``rsc2x``,
random = ``cmc``, random-2x = ``cmc2x``.
"""

from __future__ import annotations

import random
from typing import ClassVar

from probe.tasks.base import Example, GeneratedTask, Option, one_of, split_option, train_length_option
from probe.tasks.words import vocabulary_of

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
PAPER_PROMPTS = {"replace": "Replace {old} with {new} in"}
PAPER_COPY = "Copy:"
NEXT = "[NEXT]"
"""What the authors' data writes between the two halves of a 2x output."""


class Copy(GeneratedTask):
    name = "copy"
    authors_separator = True
    summary = "repeat the input words (variants: count, replace, random, 2x)"
    length_unit = "input words"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(20, "threshold L on the number of input words"),
        "variant": Option("random", ", ".join(VARIANTS), one_of(*VARIANTS), "which copy task (Appendix D.1)"),
        "split": split_option("length: λ ~ U(1, L), test U(1, 2L); paper: the authors' data (test L+1..2L only)"),
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
        paper = self.options["split"] == "paper"
        twice = variant.endswith("-2x")
        separator = [NEXT] if paper and variant == "random-2x" else []  # the authors' count-2x has none
        output = [new] * len(words) if variant == "replace" else words + separator * twice + words * twice
        if paper:
            prompt = PAPER_PROMPTS.get(variant, PAPER_COPY).format(old=words[0], new=new)
            return Example(f"{prompt} {' '.join(words)}", " ".join(output), len(words))
        prompt = PROMPTS[variant].format(old=words[0], new=new)
        return Example(f"{prompt} {' '.join(words)} .", " ".join(output), len(words))

    def vocabulary(self) -> list[str]:
        if self.options["split"] == "paper":
            return vocabulary_of(
                PAPER_PROMPTS.get(self.options["variant"], PAPER_COPY).format(old="", new=""), NEXT, *WORDS
            )
        prompt = PROMPTS[self.options["variant"]].format(old="", new="")
        return vocabulary_of(prompt, ".", *WORDS)
