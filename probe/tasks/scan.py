"""SCAN (Lake & Baroni, 2018), generated from its grammar and interpretation function; length split.

The grammar yields 20,910 commands. λ is the number of output actions (as in the paper's code);
the length split trains on commands with at most 22 actions (16,990) and tests on the rest (3,920).
Actions are written as in Table tab:dataset-examples (``TURN_LEFT``, not ``I_TURN_LEFT``).
"""

from __future__ import annotations

from functools import cache
from typing import ClassVar

from probe.tasks.base import Example, FiniteTask, Option, train_length_option, valid_fraction_option
from probe.tasks.tokenizer import vocabulary_of

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


class Scan(FiniteTask):
    name = "scan"
    summary = "SCAN commands to actions, length split (Lake & Baroni, 2018)"
    length_unit = "output actions"
    OPTIONS: ClassVar[dict[str, Option]] = {
        "train_length": train_length_option(22, "train on commands with at most this many actions (length split: 22)"),
        "valid_fraction": valid_fraction_option(),
    }

    def dataset(self) -> tuple[Example, ...]:
        return commands()

    def vocabulary(self) -> list[str]:
        words = [*PRIMITIVES, "turn opposite around", *TURNS, *REPEATS, *CONNECTIVES]
        return vocabulary_of(*words, *PRIMITIVES.values(), *TURNS.values())
