"""Reverse (Table tab:dataset-examples, Appendix D.1): output the input words in reverse order.

Variants (D.1): ``random`` (random words, the default) and ``twice`` (reverse, then reverse once
more, which recreates the input: the output is the reversed words followed by the words).
"""

from __future__ import annotations

import random
from typing import ClassVar

from probe.tasks.base import Example, GeneratedTask, Option, one_of, train_length_option
from probe.tasks.copy import WORDS
from probe.tasks.tokenizer import vocabulary_of

VARIANTS = ("random", "twice")
PROMPTS = {"random": "Reverse the following words:", "twice": "Reverse the following words twice:"}


class Reverse(GeneratedTask):
    name = "reverse"
    summary = "reverse the input words (variants: random, twice)"
    length_unit = "input words"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(20, "threshold L on the number of input words"),
        "variant": Option("random", ", ".join(VARIANTS), one_of(*VARIANTS), "which reverse task (Appendix D.1)"),
    }

    def sample(self, rng: random.Random, length: int) -> Example:
        return self.example_for(rng.choices(WORDS, k=length))

    def example_for(self, words: list[str]) -> Example:
        output = words[::-1] + (words if self.options["variant"] == "twice" else [])
        prompt = PROMPTS[self.options["variant"]]
        return Example(f"{prompt} {' '.join(words)} .", " ".join(output), len(words))

    def vocabulary(self) -> list[str]:
        return vocabulary_of(PROMPTS[self.options["variant"]], ".", *WORDS)
