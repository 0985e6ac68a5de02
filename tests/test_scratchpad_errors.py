"""bench/scratchpad_errors.py sorts a wrong scratchpad prediction by where it went wrong, on hand-written ones."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import bench_script

from probe.tasks import get
from probe.tasks.scratchpad import written_steps

GOLD = (
    "Thinking step by step: comp 1 * 2 ** 1 = 1 * 2 # comp 3 * 2 ** 3 = 3 * 8 # comp - 2 * 2 ** 0 = - 2 * 1"
    " . Thus, The answer is 6."
)


@pytest.mark.parametrize(
    ("prediction", "where"),
    [
        (GOLD.replace("is 6", "is 0"), "steps right"),  # every step as the gold's, the conclusion missed
        (GOLD.replace("3 * 8", "3 * 6").replace("is 6", "is 0"), "a step wrong"),
        (GOLD.replace(" # ", "  #  ").replace("is 6.", "is 4 ."), "steps right"),  # spaced otherwise
        (GOLD.split(" . Thus,")[0] + " # comp 1 * 2 ** 1 = 1 * 2", "no end"),
        (GOLD.replace(" # comp - 2 * 2 ** 0 = - 2 * 1", ""), "a step wrong"),  # a step left out
    ],
)
def test_a_wrong_prediction_is_sorted_by_where_it_went_wrong(prediction, where):
    errors = bench_script("scratchpad_errors")
    assert errors.where_wrong(prediction, GOLD, "authors") == where


def _depart_at(gold: str, step: int, first_word: bool) -> str:
    """``gold`` with its ``step``-th step (1-based) written otherwise: a word after its first (``in``: in I) or
    after its last (in R)."""
    text = written_steps(gold, "authors")[step - 1]
    words = text.split()
    other = " ".join([words[0], "7", *words[1:]] if first_word else [*words, "7"])
    return gold.replace(text, other, 1)


def test_a_runs_wrong_predictions_are_counted_by_where_they_first_depart(monkeypatch):
    """Addition with the full scratchpad at L = 3, predictions written by hand for its unseen-length examples:
    each wrong one is counted once, at the step it departs, within or past the most steps a training length's
    gold has; and that most is the most digits a sum of two numbers of up to three digits has among the
    examples read (a step per digit of the sum, counted off the sources, not off the scratchpads)."""
    task = get("addition", scratchpad="full", train_length=3)
    unseen = [e for e in task.examples("test", n=40, seed=0) if not task.is_seen(e.length)]
    golds = [e.target for e in unseen]
    steps = [len(written_steps(gold, "authors")) for gold in golds]
    long = steps.index(max(steps))  # 5 steps or more: past the training lengths' 4
    said = list(golds)
    said[long] = _depart_at(golds[long], steps[long], first_word=False)
    first, fourth, right, no_end, opening = [i for i in range(len(golds)) if i != long][:5]
    said[first] = _depart_at(golds[first], 1, first_word=True)
    said[fourth] = _depart_at(golds[fourth], 4, first_word=True)  # at the most steps training has, not past it
    said[right] = golds[right].replace("The answer is", "The answer is 1")  # every step right, the answer missed
    said[no_end] = golds[no_end].split(" . Thus,")[0]  # every step right and no end: no departure
    said[opening] = "The answer is 3."  # no scratchpad, so no end either: at the opening
    errors = bench_script("scratchpad_errors")
    scorer = SimpleNamespace(
        task=task,
        decode=lambda examples: SimpleNamespace(predictions=said, correct=[p == g for p, g in zip(said, golds)]),
    )
    monkeypatch.setattr(errors, "scratchpad_scorer", lambda path, why: scorer)
    row = errors.measure(Path("run"), n_valid=50, n_test=40, unseen=True)
    seen = [e for e in task.examples("test", n=40, seed=0) if task.is_seen(e.length)] + task.held_out(50)
    sums = [
        sum(int(n.replace(" ", "")) for n in e.source.removeprefix("Compute").strip(" ?").split(" + ")) for e in seen
    ]
    assert row["training_steps"] == max(len(str(total)) for total in sums) == 4
    assert (row["unseen"], row["right"]) == (len(unseen), len(unseen) - 6)
    assert (row["wrong_steps_right"], row["wrong_a_step_wrong"], row["wrong_no_end"]) == (1, 3, 2)
    assert steps[long] > 4 and row["wrong_first_step_off"] == dict(sorted({0: 1, 1: 1, 4: 1, steps[long]: 1}.items()))
    assert row["wrong_first_step_off_within_training_steps"] == 3  # the opening, step 1 and step 4
    assert row["wrong_first_step_off_past_training_steps"] == 1
    assert row["wrong_first_component_off"] == {"I": 2, "R": 1, "opening": 1}
