"""Sorting (Table tab:dataset-examples, Appendix D.1; Saxton et al., 2019), in two variants.

``single-token``: an alphabet of 50 tokens with a fixed canonical order (digits, then A-Z, then
a-n: their ASCII order, so the table's ``3 1 4 1 5`` sorts as numbers do). ``multi-digit``:
numbers ~ U(0, 10000) (0 to 9999) written digit by digit and separated by commas. λ is the
number of items. The scratchpad runs selection sort: each step swaps the minimum of the
unsorted portion to its front. ``template=authors`` writes the authors' ``s2s_sort_*`` text
(``Sort the following list [ 3, 1 ].``, ``The sorted list is [ 1, 3 ].``), whose steps have no
variable updates (their processors refuse V), so there ``full`` is I+C+O+R.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import ClassVar

from probe.tasks.answers import read_listed, read_sorted_list, spaced
from probe.tasks.base import Example, Option, ScratchpadTask, one_of
from probe.tasks.scratchpad import Step

TOKENS = tuple("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmn")
RANK = {token: i for i, token in enumerate(TOKENS)}
VARIANTS = ("single-token", "multi-digit")
Item = str | int


def bracketed(text: str) -> str:
    return f"[ {text} ]" if text else "[ ]"


class Sorting(ScratchpadTask):
    name = "sorting"
    AUTHORS_UPDATES = False
    summary = "sort single tokens (canonical order) or multi-digit numbers"
    length_unit = "items"
    OPTIONS: ClassVar[dict[str, Option]] = {
        **ScratchpadTask.OPTIONS,
        "variant": Option("single-token", ", ".join(VARIANTS), one_of(*VARIANTS), "which sorting task (Appendix D.1)"),
    }

    @property
    def multi_digit(self) -> bool:
        return self.options["variant"] == "multi-digit"

    def sample(self, rng: random.Random, length: int) -> Example:
        if self.multi_digit:
            return self.example_for([rng.randrange(10_000) for _ in range(length)])
        return self.example_for(rng.choices(TOKENS, k=length))

    def example_for(self, items: list[Item]) -> Example:
        ordered = sorted(items, key=self.rank)
        if self.authors_text:
            source = f"Sort the following list {self.authors_listed(items)}."
            answer = f"The sorted list is {self.authors_listed(ordered)}."
            return Example(source, self.target(lambda: self.authors_steps(items), answer), len(items))
        source = f"Sort the following numbers: {self.listed(items)} ?"
        answer = f"The answer is {self.listed(ordered)}."
        return Example(source, self.target(lambda: self.steps(items), answer), len(items))

    def read_answer(self, final: str) -> Hashable | None:
        if self.authors_text:
            return read_sorted_list(final, self.multi_digit)
        return read_listed(final, self.multi_digit)

    def rank(self, item: Item) -> int:
        return item if isinstance(item, int) else RANK[item]

    def listed(self, items: list[Item]) -> str:
        if self.multi_digit:
            return ", ".join(" ".join(str(item)) for item in items)
        return " ".join(map(str, items))

    def authors_listed(self, items: list[Item]) -> str:
        """``[ 3, 1 ]``, a multi-digit number digit by digit (``[ 3 1, 4 1 ]``); ``[ ]`` when empty."""
        return bracketed(", ".join(spaced(item) if self.multi_digit else str(item) for item in items))

    def selection(self, items: list[Item]) -> list[tuple[Item, list[Item], Item, list[Item]]]:
        """Per step of selection sort: the front of the unsorted portion, that portion, its minimum (the
        first of equals), and what stays unsorted (the minimum's place taken by the front)."""
        unsorted, out = list(items), []
        for _ in items:
            front = unsorted[0]
            low = min(range(len(unsorted)), key=lambda j: self.rank(unsorted[j]))
            rest = unsorted[1:]
            if low:
                rest[low - 1] = front
            out.append((front, unsorted, unsorted[low], rest))
            unsorted = rest
        return out

    def steps(self, items: list[Item]) -> list[Step]:
        done, out = [], []
        for front, unsorted, smallest, rest in self.selection(items):
            done.append(smallest)
            out.append(
                Step(
                    f"For {self.listed([front])},",
                    f"We take the minimum of {bracketed(self.listed(unsorted))}",
                    f"Which is equal to {self.listed([smallest])} .",
                    f"We update the sorted list to {bracketed(self.listed(done))}.",
                    f"So, the remaining input is {bracketed(self.listed(rest))}",
                )
            )
        return out

    def authors_steps(self, items: list[Item]) -> list[Step]:
        """The authors' steps: the front, a fixed computation text, the minimum, no V, the rest's list."""
        return [
            Step(
                self.listed([front]),
                "The minimum of the unsorted portion",
                self.listed([smallest]),
                None,
                self.authors_listed(rest),
            )
            for front, _, smallest, rest in self.selection(items)
        ]

    def alphabet(self) -> list[str]:
        symbols = map(str, range(10)) if self.multi_digit else TOKENS
        if self.authors_text:
            return ["Sort the following list [ 0, ]. The sorted list is", *symbols]
        return ["Sort the following numbers: 0, ? The answer is 0.", *symbols]

    def scratchpad_alphabet(self) -> list[str]:
        if self.authors_text:
            return ["The minimum of the unsorted portion [ 0, ]"]
        return [
            "For 0, We take the minimum of [ ] Which is equal to . We update the sorted list to [ ].",
            "So, the remaining input is",
        ]
