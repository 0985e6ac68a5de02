"""Where a prediction's scratchpad first departs from the gold's, step by step (``probe eval --show``'s step
column, bench/scratchpad_errors.py's reading of unseen lengths), on scratchpads written out by hand."""

from __future__ import annotations

import pytest

from probe.tasks import get
from probe.tasks.scratchpad import OPENING, first_wrong_component, first_wrong_step, written_steps

# Parity of 1 0 1 in the authors' full format, worked by hand: one step per bit, ``#`` between steps.
STEPS = [
    "in 1 comp 1 ** par = 1 ** 0 out 1 [ par: 1 ] re [ 0, 1 ]",
    "in 0 comp 0 ** par = 0 ** 1 out 1 [ par: 1 ] re [ 1 ]",
    "in 1 comp 1 ** par = 1 ** 1 out 0 [ par: 0 ] re [ ]",
]
GOLD = "Thinking step by step: " + " # ".join(STEPS) + " . Thus, The answer is No."


def _authors(steps: list[str], answer: str = "No") -> str:
    return "Thinking step by step: " + " # ".join(steps) + f" . Thus, The answer is {answer}."


def test_the_steps_are_those_written_between_the_opening_and_the_first_end():
    assert written_steps(GOLD, "authors") == STEPS
    assert written_steps(GOLD + " . Thus, The answer is Yes.", "authors") == STEPS
    spaced = GOLD.replace(" # ", "  #   ").replace("Thinking step by step: ", "Thinking  step by step:  ")
    assert written_steps(spaced, "authors") == STEPS
    assert written_steps("<scratch> a b ; c ; </scratch> 7", "figure") == ["a b", "c"]
    assert written_steps("<scratch> a b ; ; c", "figure") == ["a b", "", "c"]  # an empty step counts; no end


@pytest.mark.parametrize(
    ("prediction", "first"),
    [
        (GOLD, None),
        (GOLD.replace("is No", "is Yes"), None),  # every step right, the conclusion missed
        (_authors([STEPS[0], STEPS[1].replace("out 1", "out 0"), STEPS[2]]), 2),
        (_authors([STEPS[0].replace("in 1", "in 0"), *STEPS[1:]]), 1),
        (_authors(STEPS[:2]), 3),  # the last step left out
        (_authors([*STEPS, STEPS[2]]), 4),  # one step too many
        (" # ".join(["Thinking step by step: " + STEPS[0], STEPS[1], STEPS[1], STEPS[1]]), 3),  # a loop, no end
        ("The answer is No.", 0),  # no scratchpad at all: before its first step
        (GOLD.replace("step by step:", "step by step"), 0),  # its opening miswritten
    ],
)
def test_the_first_wrong_step_is_where_the_prediction_departs_from_the_gold(prediction, first):
    assert first_wrong_step(prediction, GOLD, "authors") == first


def test_a_figure_scratchpad_is_read_at_its_own_separator():
    gold = "<scratch> For 1 , x ; For 2 , y ; </scratch> The answer is 3."
    assert first_wrong_step(gold.replace("For 2 , y", "For 2 , z"), gold, "figure") == 2
    assert first_wrong_step(gold.replace("The answer is 3", "The answer is 4"), gold, "figure") is None


@pytest.mark.parametrize("template", ["authors", "figure"])
def test_addition_writes_a_step_per_digit_of_its_sum(template):
    """The task's own scratchpads: one step per digit of the sum (a last carry is a step of its own), counted off
    the answer the source's two numbers make, not off the scratchpad."""
    task = get("addition", scratchpad="full", train_length=3, template=template)
    for e in task.examples("test", n=40, seed=0):
        left, right = e.source.removeprefix("Compute").strip(": ?").split(" + ")
        digits = len(str(int(left.replace(" ", "")) + int(right.replace(" ", ""))))
        assert len(written_steps(e.target, template)) == digits, e
        assert first_wrong_step(e.target, e.target, template) is None


def _step_one(old: str, new: str) -> str:
    return _authors([STEPS[0].replace(old, new), *STEPS[1:]])


@pytest.mark.parametrize(
    ("prediction", "component"),
    [
        (GOLD, None),
        (_step_one("in 1", "in 0"), "I"),
        (_step_one("1 ** 0 out", "1 ** 1 out"), "C"),
        (_step_one("out 1", "out 0"), "O"),
        (_step_one("[ par: 1 ]", "[ par: 0 ]"), "V"),
        (_step_one("[ par: 1 ] ", ""), "V"),  # V left out: the gold's ``[`` stands where the prediction's ``re`` does
        (_step_one("re [ 0, 1 ]", "re [ 0, 1, 1 ]"), "R"),  # R's list opens with ``[``, V's marker only before R
        (_step_one("re [ 0, 1 ]", "re [ 0, 1 ] [ par: 1 ]"), "R"),  # more after R's end: still R
        (_authors(STEPS[:2]), "I"),  # the last step left out
        (_authors([*STEPS, STEPS[2]]), "I"),  # a step too many
        ("Thinking step by step 1 ] # in 0 ] . Thus, The answer is No.", OPENING),
    ],
)
def test_the_first_wrong_component_is_where_in_the_step_they_part(prediction, component):
    assert first_wrong_component(prediction, GOLD, "full") == component


def test_a_component_is_read_by_the_markers_of_the_format_written():
    """Sorting's I+C+O+R (no V) from the task itself: its placeholder C, its number after ``out``, and its
    remaining list after ``re``, each changed on the first step."""
    task = get("sorting", scratchpad="I+C+O+R")
    gold = next(e.target for e in task.examples("test", n=40, seed=0) if e.length == 3)
    first = written_steps(gold, "authors")[0]
    out, rest = first.split(" out ")[1].split(" re ")
    assert first_wrong_component(gold.replace(first, first.replace("portion", "list")), gold, "I+C+O+R") == "C"
    assert first_wrong_component(gold.replace(f"out {out}", f"out {out}0"), gold, "I+C+O+R") == "O"
    assert first_wrong_component(gold.replace(f"re {rest}", "re [ ]", 1), gold, "I+C+O+R") == "R"


def test_the_template_is_named_never_assumed():
    """A task's default template depends on its scratchpad (the authors' with one): read a scratchpad in the
    other's words, the steps are not found, so no default is taken and an unknown name is refused."""
    with pytest.raises(TypeError):
        first_wrong_step(GOLD, GOLD)
    with pytest.raises(TypeError):
        written_steps(GOLD)
    with pytest.raises(ValueError, match="authors, figure"):
        first_wrong_step(GOLD, GOLD, "author")
