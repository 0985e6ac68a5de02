"""PCFG SET (Hupkes et al., 2020), generated from its grammar and string-edit functions.

Inputs are function applications in prefix notation over string arguments (``shift prepend
K10 R1 K12 , E12 F16`` -> ``F16 K10 R1 K12 E12``). The grammar and its constants follow the
PCFG SET generator: a function is unary with probability 0.75, functions are uniform within
their arity, string arguments have 2-5 letters drawn uniformly from 520 (A1 ... Z20).

Length split: λ is the number of functions. As in PCFG SET's productivity split, train has at
most L = 8 functions and test at least 9; following Section 3, test stops at 2L = 16. The training
side (train and valid) holds as many distinct inputs as PCFG SET's productivity training file,
81,010 (``train_size``), spread evenly over λ in 1..L; the test side ``size_per_length`` per λ in
L+1..2L. Each input is drawn from the grammar conditioned on its number of functions (PCFG SET's
own data was likewise resampled, to follow the lengths and depths of English sentences), and
outputs keep at most 64 letters (nested ``repeat`` grows them exponentially).

The training side's size is what lets a model learn the functions rather than its examples: with
1,000 inputs per λ (as before this size was set), a ``tiny`` NoPE trained on λ = 1 alone fits its 893
(loss 0.007 after 1,500 steps) and answers none of the 107 held out.
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
# The inputs PCFG SET's productivity split trains on (data/pcfgset/productivity/train.tgt in
# i-machine-think/am-i-compositional: 81,010 lines), the data the authors' md_productivity reads.
PCFG_SET_TRAIN = 81_010


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
def generate(train_length: int, train_size: int, per_test_length: int) -> tuple[Example, ...]:
    """Distinct examples (a fixed seed): ``train_size`` over 1..``train_length`` functions, evenly (the
    shortest take the remainder), then ``per_test_length`` for each of ``train_length`` + 1 .. twice it."""
    share, extra = divmod(train_size, train_length)
    counts = [share + (functions <= extra) for functions in range(1, train_length + 1)]
    counts += [per_test_length] * train_length
    rng = random.Random("pcfg-set")
    seen: set[str] = set()
    out = []
    for functions, count in enumerate(counts, start=1):
        kept = 0
        while kept < count:
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
        "train_size": Option(
            PCFG_SET_TRAIN, POSITIVE_INTEGER, positive_int, "distinct inputs of at most train_length functions"
        ),
        "size_per_length": Option(1000, POSITIVE_INTEGER, positive_int, "distinct inputs per unseen length"),
    }

    def dataset(self) -> tuple[Example, ...]:
        options = self.options
        return generate(self.train_length, options["train_size"], options["size_per_length"])

    def vocabulary(self) -> list[str]:
        return vocabulary_of(",", *UNARY, *BINARY, *LETTERS)
