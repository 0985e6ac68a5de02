"""Summation (Table tab:dataset-examples, Appendix D.1; Saxton et al., 2019): a sum of digits modulo 10.

Each number ~ U(1, 9); λ is the number of numbers. ``template=authors`` writes the authors' ``s2s_sum``
text (``Compute: 1 + 2 + 3 .``, ``The answer is 6 .``).
"""

from __future__ import annotations

import random
from collections.abc import Hashable

from probe.tasks.answers import read_number, spaced
from probe.tasks.base import Example, ScratchpadTask
from probe.tasks.scratchpad import Step


class Summation(ScratchpadTask):
    name = "summation"
    authors_separator = True
    summary = "sum of single digits modulo 10"
    length_unit = "numbers"

    def sample(self, rng: random.Random, length: int) -> Example:
        return self.example_for([rng.randint(1, 9) for _ in range(length)])

    def example_for(self, numbers: list[int]) -> Example:
        if self.authors_text:
            source = f"Compute: {' + '.join(map(str, numbers))} ."
            answer = f"The answer is {spaced(sum(numbers) % 10)} ."
            return Example(source, self.target(lambda: authors_steps(numbers), answer), len(numbers))
        source = f"Compute: ( {' + '.join(map(str, numbers))} ) % 10 ?"
        answer = f"The answer is {sum(numbers) % 10}."
        return Example(source, self.target(lambda: steps(numbers), answer), len(numbers))

    def read_answer(self, final: str) -> Hashable | None:
        return read_number(final)

    def alphabet(self) -> list[str]:
        if self.authors_text:
            return ["Compute: + . The answer is", *map(str, range(10))]
        return ["Compute: ( + ) % 10 ? The answer is 0.", *map(str, range(10))]

    def scratchpad_alphabet(self) -> list[str]:
        if self.authors_text:
            return ["sum sum: = +", *map(str, range(10))]
        template = "For number 0, We have ( + sum ) % 10 = Which is equal to . We update sum to 0."
        return [template, "So, the remaining input is +", *map(str, range(19))]


def steps(numbers: list[int]) -> list[Step]:
    """Adds one number per step to a running sum kept modulo 10."""
    total, out = 0, []
    for i, x in enumerate(numbers):
        new = (x + total) % 10
        out.append(
            Step(
                f"For number {x},",
                f"We have ( {x} + sum ) % 10 = ( {x} + {total} ) % 10 = {x + total} % 10",
                f"Which is equal to {new} .",
                f"We update sum to {new}.",
                f"So, the remaining input is {' + '.join(map(str, numbers[i + 1 :]))}".rstrip(),
            )
        )
        total = new
    return out


def authors_steps(numbers: list[int]) -> list[Step]:
    """The authors' stripped running sum: the step's sum written digit by digit, then kept modulo 10."""
    total, out = 0, []
    for i, x in enumerate(numbers):
        new = x + total
        out.append(
            Step(
                str(x),
                f"{x} + sum = {x} + {spaced(total)} =",
                spaced(new),
                f"sum: {spaced(new)} = {new % 10}",
                " + ".join(map(str, numbers[i + 1 :])),
            )
        )
        total = new % 10
    return out
