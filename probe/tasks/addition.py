"""Addition (Table tab:dataset-examples, Appendix D.1; Nye et al., 2021): add two numbers digit by digit.

D.1 buckets instances by the digit counts of both numbers ("6-by-3"); training uses buckets
where both have at most L digits. λ is therefore the digit count of the longer number: λ ~ U(1, L)
(U(1, 2L) for test), the other number's digit count ~ U(1, λ), and a coin picks which comes first.
``template=authors`` writes the authors' ``s2s_addition`` text (``Compute 5 7 + 6 8 ?``).
"""

from __future__ import annotations

import random
from collections.abc import Hashable

from probe.tasks.answers import read_number, spaced
from probe.tasks.base import Example, ScratchpadTask
from probe.tasks.scratchpad import Step


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
        source = f"Compute{'' if self.authors_text else ':'} {spaced(a)} + {spaced(b)} ?"
        answer = f"The answer is {spaced(a + b)}."
        build = authors_steps if self.authors_text else steps
        return Example(source, self.target(lambda: build(a, b), answer), max(len(str(a)), len(str(b))))

    def read_answer(self, final: str) -> Hashable | None:
        return read_number(final)

    def alphabet(self) -> list[str]:
        if self.authors_text:
            return ["Compute + ? The answer is 0.", *map(str, range(10))]
        return ["Compute: + ? The answer is 0.", *map(str, range(10))]

    def scratchpad_alphabet(self) -> list[str]:
        if self.authors_text:
            return ["0, carry: = +", *map(str, range(20))]
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


def authors_steps(a: int, b: int) -> list[Step]:
    """The authors' stripped column addition: the shorter number padded with zeros, the rest of each
    number read back as an int (so a padded "0 0" remains as "0"), a last step for a final carry."""
    width = max(len(str(a)), len(str(b)))
    left, right = str(a).zfill(width), str(b).zfill(width)

    def rest(digits: str) -> str:
        return spaced(int(digits)) if digits else ""

    carry, out = 0, []
    for column in range(width - 1, -1, -1):
        x, y = int(left[column]), int(right[column])
        total = x + y + carry
        computation = f"{x} + {y} + carry = {x + y} + {carry} = {total}"
        carry = total // 10
        remaining = f"{rest(left[:column])} + {rest(right[:column])}"
        out.append(Step(f"{x}, {y}", computation, str(total % 10), f"carry: {carry}", remaining))
    if carry:
        out.append(Step("0, 0", f"0 + 0 + carry = 0 + {carry} = {carry}", str(carry), "carry: 0", "+"))
    return out
