"""LEGO (Table tab:dataset-examples, Appendix D.1; Zhang et al., 2023): resolve a chain of +/- links.

Sampling (D.1): λ distinct variables form a chain; each variable's value is uniform over -1 and
+1, so every variable appears with both values; the first clause states the first value and
each later clause links a variable to the previous one by the sign that makes the values agree.
The query is a variable from the middle of the chain to its end (index ⌈λ/2⌉ to λ-1, as in the
paper's code; index 0 when λ = 1). Clauses follow the chain order, as in the table's example;
``shuffle=true`` presents them in random order. Variables are a-z then A-Z, so λ <= 52 and L <= 26.
``template=authors`` writes the authors' ``s2s_lego`` text (``If a = -1, b = - a. Then, what is the
value of b?``), whose steps have no variable updates (their processor refuses V), so there ``full``
is I+C+O+R.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from typing import Any, ClassVar

from probe.errors import ProbeError
from probe.tasks.answers import read_word
from probe.tasks.base import Example, Option, ScratchpadTask, boolean
from probe.tasks.scratchpad import Step

VARIABLES = tuple("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def signed(value: int) -> str:
    return "+1" if value > 0 else "-1"


class Lego(ScratchpadTask):
    name = "lego"
    AUTHORS_UPDATES = False
    summary = "resolve the value of a variable in a chain of +/- clauses"
    length_unit = "variables"
    OPTIONS: ClassVar[dict[str, Option]] = {
        **ScratchpadTask.OPTIONS,
        "shuffle": Option(False, "true or false", boolean, "present the clauses in random order"),
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if 2 * self.train_length > len(VARIABLES):
            most = len(VARIABLES) // 2
            raise ProbeError(f"lego has {len(VARIABLES)} variables, so train_length can be at most {most}")

    def sample(self, rng: random.Random, length: int) -> Example:
        names = rng.sample(VARIABLES, length)
        values = [rng.choice((-1, 1)) for _ in range(length)]
        query = rng.randint(min((length + 1) // 2, length - 1), length - 1)
        order = list(range(length))
        if self.options["shuffle"]:
            rng.shuffle(order)
        return self.example_for(names, values, query, order)

    def example_for(self, names: list[str], values: list[int], query: int, order: list[int]) -> Example:
        """The chain ``names`` with ``values``, asking for ``names[query]``, clauses in ``order``."""
        chain = Chain(names, values, authors=self.authors_text)
        answer = f"The answer is {signed(values[query])}."
        if self.authors_text:
            source = f"If {', '.join(chain.clause(i) for i in order)}. Then, what is the value of {names[query]}?"
            return Example(source, self.target(lambda: chain.authors_steps(query, order), answer), len(names))
        source = f"If {'; '.join(chain.clause(i) for i in order)}. Then what is {names[query]}?"
        return Example(source, self.target(lambda: chain.steps(query, order), answer), len(names))

    def read_answer(self, final: str) -> Hashable | None:
        return read_word(final)

    def alphabet(self) -> list[str]:
        if self.authors_text:
            return ["If = -1, + - +1. Then, what is the value of a? The answer is", *VARIABLES]
        signs = [f"{v} +{v} -{v}" for v in VARIABLES]
        return ["If a = -1; b = +a. Then what is b? The answer is +1.", *signs]

    def scratchpad_alphabet(self) -> list[str]:
        if self.authors_text:
            return ["= + - +1 -1 a,"]
        return ["For a, We have and Which is equal to . We update to +1. So, the remaining input is"]


class Chain:
    """A LEGO chain: variable i equals the sign-linked variable i-1; variable 0 is a literal. With
    ``authors`` a link is written ``b = + a`` (the authors' clauses), else ``b = +a``."""

    def __init__(self, names: list[str], values: list[int], authors: bool = False) -> None:
        self.names, self.values, self.authors = names, values, authors

    def sign(self, i: int) -> str:
        return "+" if self.values[i] == self.values[i - 1] else "-"

    def clause(self, i: int) -> str:
        if i == 0:
            return f"{self.names[0]} = {signed(self.values[0])}"
        return f"{self.names[i]} = {self.sign(i)}{' ' if self.authors else ''}{self.names[i - 1]}"

    def authors_steps(self, query: int, order: list[int]) -> list[Step]:
        """The authors' steps up to the queried variable: the variable, its link with the linked value
        put in (``+ a = + -1``; nothing for the literal), its value, no V, the clauses left in prompt order."""
        out = []
        for i in range(query + 1):
            link = f"{self.sign(i)} {self.names[i - 1]} = {self.sign(i)} {signed(self.values[i - 1])}" if i else ""
            remaining = ", ".join(self.clause(j) for j in order if j > i)
            out.append(Step(self.names[i], link, signed(self.values[i]), None, remaining))
        return out

    def steps(self, query: int, order: list[int]) -> list[Step]:
        """Resolves the chain from its literal up to the queried variable, one clause per step."""
        out = []
        for i in range(query + 1):
            known = f" and {self.names[i - 1]} = {signed(self.values[i - 1])}" if i else ""
            remaining = "; ".join(self.clause(j) for j in order if j > i)
            out.append(
                Step(
                    f"For {self.names[i]},",
                    f"We have {self.clause(i)}{known}",
                    f"Which is equal to {signed(self.values[i])} .",
                    f"We update {self.names[i]} to {signed(self.values[i])}.",
                    f"So, the remaining input is {remaining}".rstrip(),
                )
            )
        return out
