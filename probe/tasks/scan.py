"""SCAN (Lake & Baroni, 2018), generated from its grammar and interpretation function; length split.

The grammar yields 20,910 commands. λ is the number of output actions (as in the paper's code).
Two splits, chosen with ``split``:

- ``length`` (Lake & Baroni's): train on commands with at most 22 actions (16,990), test on the
  rest (3,920);
- ``paper`` (the authors' ``mdlen_tr25_ts48``, built by their ``make_scan_dataset.py`` and read
  through their ``scan_bos`` processor): train/valid on at most 25 actions (17,774), test on 26-48
  (3,136), every command prefixed with ``Solve:``.

Actions are written as in Table tab:dataset-examples (``TURN_LEFT``, not ``I_TURN_LEFT``; the
authors' processor writes ``Left``: one word either way, so one token of our word-level vocabulary).
"""

from __future__ import annotations

from functools import cache
from typing import Any, ClassVar

from probe.tasks.base import Example, FiniteTask, Option, split_option, train_length_option, valid_fraction_option
from probe.tasks.words import vocabulary_of

PRIMITIVES = {"walk": "WALK", "look": "LOOK", "run": "RUN", "jump": "JUMP"}
TURNS = {"left": "TURN_LEFT", "right": "TURN_RIGHT"}
CONNECTIVES = ("and", "after")
REPEATS = {"twice": 2, "thrice": 3}
Phrase = tuple[str, tuple[str, ...]]


def verb_phrases() -> list[Phrase]:
    """V -> X opposite Y | X around Y | X Y | U, for X in U or ``turn`` and Y in left, right."""
    phrases: list[Phrase] = []
    for verb in (*PRIMITIVES, "turn"):
        act = (PRIMITIVES[verb],) if verb in PRIMITIVES else ()
        for direction, turn in TURNS.items():
            phrases.append((f"{verb} opposite {direction}", (turn, turn, *act)))
            phrases.append((f"{verb} around {direction}", (turn, *act) * 4))
            phrases.append((f"{verb} {direction}", (turn, *act)))
    return phrases + [(verb, (action,)) for verb, action in PRIMITIVES.items()]


def sentences() -> list[Phrase]:
    """S -> V twice | V thrice | V."""
    return [
        (f"{verb} {word}".strip(), actions * times)
        for verb, actions in verb_phrases()
        for word, times in (*REPEATS.items(), ("", 1))
    ]


@cache
def commands() -> tuple[Example, ...]:
    """C -> S and S | S after S | S: every SCAN command with its actions, λ = number of actions."""
    simple = sentences()
    pairs = [
        (f"{first} {connective} {second}", acts1 + acts2 if connective == "and" else acts2 + acts1)
        for connective in CONNECTIVES
        for first, acts1 in simple
        for second, acts2 in simple
    ]
    return tuple(Example(command, " ".join(actions), len(actions)) for command, actions in simple + pairs)


SPLIT_LENGTHS = {"length": 22, "paper": 25}
"""Each split's threshold L on the number of output actions."""
PAPER_PREFIX = "Solve:"


class Scan(FiniteTask):
    name = "scan"
    authors_separator = True
    summary = "SCAN commands to actions, length split (Lake & Baroni, 2018) or the paper's"
    length_unit = "output actions"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "split": split_option(
            "length: Lake & Baroni's (L = 22); paper: the authors' (L = 25, sources start with Solve:)"
        ),
        "train_length": train_length_option(
            None, "train on commands with at most this many actions", "22, or 25 with split=paper"
        ),
        "valid_fraction": valid_fraction_option(),
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        if self.train_length is None:
            self.train_length = self.options["train_length"] = SPLIT_LENGTHS[self.options["split"]]

    def dataset(self) -> tuple[Example, ...]:
        if self.options["split"] == "paper":
            return tuple(Example(f"{PAPER_PREFIX} {e.source}", e.target, e.length) for e in commands())
        return commands()

    def vocabulary(self) -> list[str]:
        words = [*PRIMITIVES, "turn opposite around", *TURNS, *REPEATS, *CONNECTIVES]
        prefix = [PAPER_PREFIX] if self.options["split"] == "paper" else []
        return vocabulary_of(*prefix, *words, *PRIMITIVES.values(), *TURNS.values())
