"""PCFG SET (Hupkes et al., 2020), generated from its grammar and string-edit functions.

Inputs are function applications in prefix notation over string arguments (``shift prepend
K10 R1 K12 , E12 F16`` -> ``F16 K10 R1 K12 E12``). The grammar and its constants follow the
PCFG SET generator: a function is unary with probability 0.75, functions are uniform within
their arity, string arguments have 2-5 letters drawn uniformly from 520 (A1 ... Z20).

Length split: λ is the number of functions. As in PCFG SET's productivity split, train has at
most L = 8 functions and test at least 9; following Section 3, test stops at 2L = 16. The
dataset holds ``size_per_length`` distinct inputs per λ in 1..2L, each drawn from the grammar
conditioned on its number of functions (PCFG SET's own data was likewise resampled, to follow
the lengths and depths of English sentences), and keeps outputs of at most 64 letters
(nested ``repeat`` grows them exponentially).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import cache
from typing import ClassVar

from probe.tasks.base import (
    POSITIVE_INTEGER,
    Example,
    FiniteTask,
    Option,
    positive_int,
    train_length_option,
    valid_fraction_option,
)
from probe.tasks.words import vocabulary_of

Letters = list[str]
LETTERS = tuple(f"{c}{i}" for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" for i in range(1, 21))
UNARY: dict[str, Callable[[Letters], Letters]] = {
    "copy": lambda x: x,
    "reverse": lambda x: x[::-1],
    "shift": lambda x: x[1:] + x[:1],
    "echo": lambda x: x + x[-1:],
    "swap_first_last": lambda x: x[-1:] + x[1:-1] + x[:1],
    "repeat": lambda x: x + x,
}
BINARY: dict[str, Callable[[Letters, Letters], Letters]] = {
    "append": lambda x, y: x + y,
    "prepend": lambda x, y: y + x,
    "remove_first": lambda x, y: y,
    "remove_second": lambda x, y: x,
}
P_UNARY = 0.75
ARGUMENT_LENGTHS = (2, 3, 4, 5)
MAX_OUTPUT = 64


def expression(rng: random.Random, functions: int) -> tuple[Letters, Letters]:
    """A derivation with exactly ``functions`` function calls: (its words, its value)."""
    if rng.random() < P_UNARY:
        name = rng.choice(tuple(UNARY))
        words, value = expression(rng, functions - 1) if functions > 1 else argument(rng)
        return [name, *words], UNARY[name](value)
    name = rng.choice(tuple(BINARY))
    inner = rng.randint(0, functions - 1)
    (words1, value1), (words2, value2) = (
        expression(rng, count) if count else argument(rng) for count in (inner, functions - 1 - inner)
    )
    return [name, *words1, ",", *words2], BINARY[name](value1, value2)


def argument(rng: random.Random) -> tuple[Letters, Letters]:
    letters = rng.choices(LETTERS, k=rng.choice(ARGUMENT_LENGTHS))
    return letters, letters


@cache
def generate(longest: int, per_length: int) -> tuple[Example, ...]:
    """``per_length`` distinct examples for each number of functions 1..``longest`` (a fixed seed)."""
    rng = random.Random("pcfg-set")
    seen: set[str] = set()
    out = []
    for functions in range(1, longest + 1):
        kept = 0
        while kept < per_length:
            words, value = expression(rng, functions)
            source = " ".join(words)
            if len(value) <= MAX_OUTPUT and source not in seen:
                seen.add(source)
                out.append(Example(source, " ".join(value), functions))
                kept += 1
    return tuple(out)


class Pcfg(FiniteTask):
    name = "pcfg"
    authors_separator = True
    summary = "PCFG SET string-edit functions, productivity split (Hupkes et al., 2020)"
    length_unit = "functions"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(8, "train on inputs with at most this many functions"),
        "valid_fraction": valid_fraction_option(),
        "size_per_length": Option(1000, POSITIVE_INTEGER, positive_int, "distinct inputs per number of functions"),
    }

    def dataset(self) -> tuple[Example, ...]:
        return generate(2 * self.train_length, self.options["size_per_length"])

    def vocabulary(self) -> list[str]:
        return vocabulary_of(",", *UNARY, *BINARY, *LETTERS)
