"""Addition (Table tab:dataset-examples, Appendix D.1; Nye et al., 2021): add two numbers digit by digit.

D.1 buckets instances by the digit counts of both numbers ("6-by-3"); training uses buckets
where both have at most L digits. λ is therefore the digit count of the longer number: λ ~ U(1, L)
(U(1, 2L) for test), the other number's digit count ~ U(1, λ), and a coin picks which comes first.
"""

from __future__ import annotations

import random

from probe.tasks.base import Example, ScratchpadTask
from probe.tasks.scratchpad import Step


def spaced(number: int) -> str:
    """A number written digit by digit: 5372 -> "5 3 7 2"."""
    return " ".join(str(number))


def with_digits(rng: random.Random, digits: int) -> int:
    """A uniform number with exactly ``digits`` digits (0-9 for one digit)."""
    return rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)


class Addition(ScratchpadTask):
    name = "addition"
    summary = "add two numbers written digit by digit"
    length_unit = "digits of the longer number"

    def sample(self, rng: random.Random, length: int) -> Example:
        longer, shorter = with_digits(rng, length), with_digits(rng, rng.randint(1, length))
        return self.example_for(*((longer, shorter) if rng.random() < 0.5 else (shorter, longer)))

    def example_for(self, a: int, b: int) -> Example:
        source = f"Compute: {spaced(a)} + {spaced(b)} ?"
        answer = f"The answer is {spaced(a + b)}."
        return Example(source, self.target(lambda: steps(a, b), answer), max(len(str(a)), len(str(b))))

    def alphabet(self) -> list[str]:
        return ["Compute: + ? The answer is 0.", *map(str, range(10))]

    def scratchpad_alphabet(self) -> list[str]:
        template = "For digits and , We have ( + carry ) % 10 = Which is equal to . We update carry to // 10 = 0."
        return [template, "So, the remaining input is +", *map(str, range(20))]


def steps(a: int, b: int) -> list[Step]:
    """Column addition from the last digits, as in Figure fig:unified_scratchpad_format."""
    left, right = str(a), str(b)
    columns = max(len(left), len(right))
    left, right = left.zfill(columns), right.zfill(columns)
    written_a, written_b = str(a), str(b)
    carry, out = 0, []
    for column in range(columns + 1):
        if column == columns and not carry:
            break
        x = int(left[-1 - column]) if column < columns else 0
        y = int(right[-1 - column]) if column < columns else 0
        total = x + y + carry
        written_a, written_b = written_a[:-1], written_b[:-1]
        remaining = " ".join(part for part in (" ".join(written_a), "+", " ".join(written_b)) if part)
        out.append(
            Step(
                f"For digits {x} and {y},",
                f"We have ( {x} + {y} + carry ) % 10 = {total} % 10 = {total} % 10",
                f"Which is equal to {total % 10} .",
                f"We update carry to {total} // 10 = {total // 10}.",
                f"So, the remaining input is {remaining}",
            )
        )
        carry = total // 10
    return out
