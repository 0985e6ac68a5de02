"""Polynomial evaluation (Table tab:dataset-examples, Appendix D.1; Nye et al., 2021), modulo 10.

x ~ U(-2, 2); each term has coefficient ~ U(-3, 3) and degree ~ U(0, 3); λ is the number of
terms. (The table's example uses x = 3, outside that range; it is formatted the same way.)
``template=authors`` writes the authors' ``s2s_poly`` text, every number digit by digit
(``Evaluate at x = - 2 in - 3 * x ** 3 + 1 * x ** 0 ?``).
"""

from __future__ import annotations

import random
from collections.abc import Hashable

from probe.tasks.answers import read_number, spaced
from probe.tasks.base import Example, ScratchpadTask
from probe.tasks.scratchpad import Step

X_VALUES = range(-2, 3)
COEFFICIENTS = range(-3, 4)
DEGREES = range(0, 4)
Term = tuple[int, int]


def written(terms: list[Term]) -> str:
    return " + ".join(f"{c} x ** {d}" for c, d in terms)


def authors_written(terms: list[Term]) -> str:
    return " + ".join(f"{spaced(c)} * x ** {spaced(d)}" for c, d in terms)


class Polynomial(ScratchpadTask):
    name = "polynomial"
    summary = "evaluate a polynomial at x, modulo 10"
    length_unit = "terms"

    def sample(self, rng: random.Random, length: int) -> Example:
        x = rng.choice(X_VALUES)
        return self.example_for(x, [(rng.choice(COEFFICIENTS), rng.choice(DEGREES)) for _ in range(length)])

    def example_for(self, x: int, terms: list[Term]) -> Example:
        value = sum(c * x**d for c, d in terms) % 10
        if self.authors_text:
            source = f"Evaluate at x = {spaced(x)} in {authors_written(terms)} ?"
            answer = f"The answer is {spaced(value)}."
            return Example(source, self.target(lambda: authors_steps(x, terms), answer), len(terms))
        source = f"Evaluate x = {x} in ( {written(terms)} ) % 10 ?"
        answer = f"The answer is {value}."
        return Example(source, self.target(lambda: steps(x, terms), answer), len(terms))

    def read_answer(self, final: str) -> Hashable | None:
        return read_number(final)

    def alphabet(self) -> list[str]:
        if self.authors_text:
            return ["Evaluate at x = in * ** + - ? The answer is 0.", *map(str, range(10))]
        numbers = {*X_VALUES, *COEFFICIENTS, *DEGREES, *range(10)}
        return ["Evaluate x = in ( ** + ) % 10 ? The answer is 0.", *map(str, numbers)]

    def scratchpad_alphabet(self) -> list[str]:
        if self.authors_text:
            return ["sum: = + - * ** x", *map(str, range(10))]
        template = "For term x ** 0, We have * = Which is equal to . We update sum to ( + ) % 10 = 0."
        powers = {x**d for x in X_VALUES for d in DEGREES}
        values = {c * p for c in COEFFICIENTS for p in powers}
        return [template, "So, the remaining input is", *map(str, powers | values | set(range(10)))]


def steps(x: int, terms: list[Term]) -> list[Step]:
    """Evaluates one term per step and adds it to a running sum kept modulo 10."""
    total, out = 0, []
    for i, (c, d) in enumerate(terms):
        value = c * x**d
        new = (total + value) % 10
        out.append(
            Step(
                f"For term {c} x ** {d},",
                f"We have {c} * {x} ** {d} = {c} * {x**d}",
                f"Which is equal to {value} .",
                f"We update sum to ( {total} + {value} ) % 10 = {new}.",
                f"So, the remaining input is {written(terms[i + 1 :])}".rstrip(),
            )
        )
        total = new
    return out


def authors_steps(x: int, terms: list[Term]) -> list[Step]:
    """The authors' stripped evaluation, every number digit by digit: the term's value, then the running
    sum modulo 10 (``sum: 4 + - 2 4 = 0``)."""
    total, out = 0, []
    for i, (c, d) in enumerate(terms):
        value = c * x**d
        new = (total + value) % 10
        out.append(
            Step(
                f"{spaced(c)} * x ** {spaced(d)}",
                f"{spaced(c)} * {spaced(x)} ** {spaced(d)} = {spaced(c)} * {spaced(x**d)}",
                spaced(value),
                f"sum: {spaced(total)} + {spaced(value)} = {spaced(new)}",
                authors_written(terms[i + 1 :]),
            )
        )
        total = new
    return out
