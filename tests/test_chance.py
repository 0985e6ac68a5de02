"""The floor of exact match on unseen lengths (probe.analysis.chance): the best constant guess, on a hand-worked
example and on the authors' parity against the answers counted from the gold text with a regex of its own."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from probe.analysis.chance import constant_guess
from probe.tasks import get
from probe.tasks.base import Example


class Listed:
    """A task's three faces constant_guess reads: its test split, which lengths it trains on, its reader."""

    def __init__(self, examples: list[Example], reader=None) -> None:
        self.listed, self.reader = examples, reader

    def examples(self, split: str, n: int | None = None, seed: int = 0) -> list[Example]:
        assert (split, seed) == ("test", 0)  # the examples an evaluation scores
        return self.listed[:n]

    def is_seen(self, length: int) -> bool:
        return length <= 8

    def answer_reader(self):
        return self.reader


def test_the_most_common_answer_s_share_among_the_unseen_lengths_alone():
    """Seen lengths answer "a" four times (left out: else "a" would lead with 4 of 8); unseen ones "x1", "x2",
    "y", "x1": whole targets, "x1" leads with 2 of 4; read by a reader that drops the digit, "x" with 3 of 4."""
    seen = [Example("q", "a", 3)] * 4
    unseen = [Example("q", t, 9 + i) for i, t in enumerate(["x1", "x2", "y", "x1"])]
    assert constant_guess(Listed(seen + unseen)) == 0.5
    assert constant_guess(Listed(seen + unseen, reader=lambda t: t.rstrip("12"))) == 0.75
    assert constant_guess(Listed(seen + unseen), n_test=6) == 0.5  # the first six: "x1" and "x2" unseen
    assert constant_guess(Listed(seen)) is None


@pytest.mark.parametrize("scratchpad", [None, "C"])
def test_parity_s_floor_is_its_commoner_answer_counted_from_the_gold_text(scratchpad):
    options = {"train_length": 8, "template": "authors"} | ({"scratchpad": scratchpad} if scratchpad else {})
    task = get("parity", **options)
    unseen = [e for e in task.examples("test", n=300, seed=0) if e.length > 8]
    answers = Counter(re.findall(r"The answer is (\w+)\.$", e.target)[0].lower() for e in unseen)
    assert set(answers) == {"yes", "no"}
    assert constant_guess(task, 300) == pytest.approx(max(answers.values()) / len(unseen))
