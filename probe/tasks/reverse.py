"""Reverse (Table tab:dataset-examples, Appendix D.1): output the input words in reverse order.

Variants (D.1): ``random`` (random words, the default), ``twice`` (reverse, then reverse once
more, which recreates the input: the output is the reversed words followed by the words; the
authors' ``mcrv``, reverse-then-copy) and ``random-2x`` (the reversed words twice; ``mc2x``).

``split=paper`` builds the authors' data (``make_reverse_dataset.py`` and the ``s2s_reverse``
processor): train and valid on 2-20 words, test on 21-40 only, sources ``Reverse: ...``, the two
halves of a two-part output joined by ``[NEXT]``.
"""

from __future__ import annotations

import random
from typing import ClassVar

from probe.tasks.base import Example, GeneratedTask, Option, one_of, split_option, train_length_option
from probe.tasks.copy import NEXT, WORDS
from probe.tasks.words import vocabulary_of

VARIANTS = ("random", "twice", "random-2x")
PROMPTS = {
    "random": "Reverse the following words:",
    "twice": "Reverse the following words twice:",
    "random-2x": "Reverse the following words, twice over:",
}
PAPER_PROMPT = "Reverse:"


class Reverse(GeneratedTask):
    name = "reverse"
    authors_separator = True
    summary = "reverse the input words (variants: random, twice)"
    length_unit = "input words"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(20, "threshold L on the number of input words"),
        "variant": Option("random", ", ".join(VARIANTS), one_of(*VARIANTS), "which reverse task (Appendix D.1)"),
        "split": split_option("length: λ ~ U(1, L), test U(1, 2L); paper: the authors' data (test L+1..2L only)"),
    }

    def sample(self, rng: random.Random, length: int) -> Example:
        return self.example_for(rng.choices(WORDS, k=length))

    def example_for(self, words: list[str]) -> Example:
        variant, paper = self.options["variant"], self.options["split"] == "paper"
        second = {"twice": words, "random-2x": words[::-1]}.get(variant, [])
        output = words[::-1] + ([NEXT] if paper and second else []) + second
        if paper:
            return Example(f"{PAPER_PROMPT} {' '.join(words)}", " ".join(output), len(words))
        return Example(f"{PROMPTS[variant]} {' '.join(words)} .", " ".join(output), len(words))

    def vocabulary(self) -> list[str]:
        if self.options["split"] == "paper":
            return vocabulary_of(PAPER_PROMPT, NEXT, *WORDS)
        return vocabulary_of(PROMPTS[self.options["variant"]], ".", *WORDS)
