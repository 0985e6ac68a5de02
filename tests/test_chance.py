"""The floor of exact match on unseen lengths (probe.analysis.chance): a constant guess chosen on training
examples, on a hand-worked example and on the authors' parity against answers counted from the gold text with a
regex of its own."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from probe.analysis.chance import constant_guess, no_better
from probe.tasks import get
from probe.tasks.base import Example


class Listed:
    """A task's faces constant_guess reads: its train and test splits, which lengths it trains on, its reader."""

    def __init__(self, train: list[str], test: list[Example], reader=None) -> None:
        self.splits = {"train": [Example("q", t, 3) for t in train], "test": test}
        self.reader = reader

    def examples(self, split: str, n: int | None = None, seed: int = 0) -> list[Example]:
        assert seed == 0
        return self.splits[split][:n]

    def split_size(self, split: str) -> int:
        return len(self.splits[split])

    def is_seen(self, length: int) -> bool:
        return length <= 8

    def answer_reader(self):
        return self.reader


TEST = [Example("q", "y", 3)] * 4 + [Example("q", t, 9 + i) for i, t in enumerate(["x1", "x2", "y", "x1"])]


def test_the_commonest_training_answer_scored_on_the_unseen_lengths_alone():
    """Training answers "x1" twice, "y" once: the guess "x1" scores 2 of the 4 unseen examples (the seen ones,
    four "y", are not scored: with them "x1" would score 2 of 8). Read by a reader that drops the digit, training
    says "x" three times: 3 of 4. Trained on "y" twice, "y" scores 1 of 4, though "x1" is the test's commonest:
    the guess is chosen on training, not on the test."""
    assert constant_guess(Listed(["x1", "y", "x1"], TEST)) == 0.5
    assert constant_guess(Listed(["x1", "y", "x2"], TEST, reader=lambda t: t.rstrip("12"))) == 0.75
    assert constant_guess(Listed(["y", "y", "x1"], TEST)) == 0.25
    assert constant_guess(Listed(["x1", "x1", "y"], TEST), n_test=6) == 0.5  # the first six: "x1", "x2" unseen
    assert constant_guess(Listed(["y", "x1", "x1"], TEST), n_train=2) == 0.25  # the first two say "y", "x1": "y"
    assert constant_guess(Listed(["y"], TEST[:4])) is None  # no unseen length


def test_no_better_compares_at_the_tenth_of_a_point_the_tables_print():
    """One right in 2,500 (0.04%) prints 0.0 beside a guess of 0: no better. One in 1,000 prints 0.1: better.
    Parity's 48.04% and 47.96% both print 48.0: each is no better than the other."""
    assert no_better(1 / 2500, 0.0)
    assert not no_better(1 / 1000, 0.0)
    assert no_better(0.4804, 0.4796) and no_better(0.4796, 0.4804)
    assert not no_better(0.4816, 0.4804)  # 48.2 beside 48.0
    assert no_better(0.0, 0.1)


def test_a_task_whose_every_answer_is_its_own_has_a_floor_of_zero():
    task = get("addition", train_length=8, template="authors")
    assert constant_guess(task, 200) == 0.0


@pytest.mark.parametrize("scratchpad", [None, "C"])
def test_parity_s_floor_is_its_commoner_training_answer_counted_from_the_gold_text(scratchpad):
    options = {"train_length": 8, "template": "authors"} | ({"scratchpad": scratchpad} if scratchpad else {})
    task = get("parity", **options)

    def answer(target: str) -> str:
        return re.findall(r"The answer is (\w+)\.$", target)[0].lower()

    ((guess, _),) = Counter(answer(e.target) for e in task.examples("train", n=1000, seed=0)).most_common(1)
    unseen = [answer(e.target) for e in task.examples("test", n=300, seed=0) if e.length > 8]
    assert set(unseen) == {"yes", "no"}
    assert constant_guess(task, 300) == pytest.approx(unseen.count(guess) / len(unseen))
    assert 0.4 < constant_guess(task, 300) < 0.6


def test_probe_reproduce_s_report_says_the_floor_under_a_scenario_where_a_guess_scores_something():
    """`probe reproduce`'s report keeps each scenario's floor (the evaluations' task and test examples) and says it
    under parity's table, not under reverse's, where a guess scores nothing."""
    from probe.analysis.eval_report import EvalReport
    from probe.studies.reproduce_report import markdown, report_of

    def evaluation(task: str, pe: str) -> EvalReport:
        folder = f"{task}+train_length=4"
        options = dict(get(task, train_length=4).options)
        return EvalReport(
            f"{pe} {folder}", f"/runs/{folder}/{pe}/seed0", task, folder, pe, 0, 1.0, 0.5, [], 70, options,
            asked={"n_test": 60, "n_valid": 10},
        )  # fmt: skip

    runs = [evaluation(task, pe) for task in ("parity", "reverse") for pe in ("nope", "rotary")]
    report = report_of(runs, {}, scale="section3")
    parity = report["tasks"]["parity+train_length=4"]["guess"]
    assert parity == constant_guess(get("parity", train_length=4), 60) and 0.3 < parity < 0.7
    assert report["tasks"]["reverse+train_length=4"]["guess"] == 0.0
    text = markdown(report)
    line = f"A constant guess (the commonest training answer) scores {100 * parity:.1f}% on these unseen"
    assert text.count(line) == 1
    assert text.index("## parity") < text.index(line) < text.index("## reverse")
