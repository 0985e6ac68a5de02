"""The floor of exact match on unseen lengths: what a constant guess scores.

A task whose answer takes few values is not scored from 0: parity's answer is yes or no, LEGO's +1 or -1,
summation's and polynomial evaluation's a digit (both mod 10, the paper's Appendix "Experimental Details",
Tasks). A model that has learnt nothing of the input and always gives the answer most common in training
scores that answer's share of the test, about half on parity and LEGO and a tenth on the mod-10 tasks. An
accuracy on unseen lengths reads as length generalization only above it, and two PEs at it differ by chance,
not by how they generalize.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Iterable

from probe.analysis.eval_report import EvalReport
from probe.tasks import get
from probe.tasks.base import Task

TRAIN_EXAMPLES = 1000  # enough to name the commonest training answer of a task with a handful of them
GUESS_SHOWN = 0.01  # where a guess scores this much, a page says so: parity, LEGO, the mod-10 tasks


def constant_guess(task: Task, n_test: int | None = None, n_train: int = TRAIN_EXAMPLES) -> float | None:
    """Exact match on unseen lengths of one constant prediction: the answer most common among the first
    ``n_train`` training examples (seed 0), scored on the unseen-length examples an evaluation scores (the test
    split's first ``n_test`` at seed 0, as :func:`~probe.analysis.evaluation.evaluate_run` draws them), every
    answer read as scoring reads it (the task's :meth:`~probe.tasks.base.Task.answer_reader`; the whole target
    where it has none). The guess is chosen on training examples, not on the test it is scored on: where every
    answer is its own (copy, addition), it scores 0, not one example in n. None where the task has no unseen
    length."""
    read = task.answer_reader() or (lambda target: target)
    unseen = [read(e.target) for e in task.examples("test", n=n_test, seed=0) if not task.is_seen(e.length)]
    if not unseen:
        return None
    train = task.examples("train", n=min(n_train, task.split_size("train")), seed=0)
    ((guess, _),) = Counter(read(e.target) for e in train).most_common(1)
    return sum(answer == guess for answer in unseen) / len(unseen)


def no_better(accuracy: float, guess: float) -> bool:
    """Whether an accuracy on unseen lengths is no better than a constant guess's, compared at the tenth of a
    point the reports print (about one example in a study's thousand): a PE right on one unseen-length example
    in two thousand prints as 0.0 beside a guess of 0.0, and is no better than it."""
    return round(100 * accuracy, 1) <= round(100 * guess, 1)


def guess_of(report: EvalReport) -> float | None:
    """:func:`constant_guess` on the examples an evaluation scored: its run's task and options, and the test
    examples it asked for (all of the split where it recorded none). Evaluations of one task on the same
    examples (a study's PEs and seeds) share one reckoning."""
    return _guess(report.task, json.dumps(report.task_options, sort_keys=True), report.asked.get("n_test"))


def guesses(reports: Iterable[EvalReport]) -> dict[str, float | None]:
    """Per task folder, in the order the reports first name it, :func:`guess_of` its first evaluation."""
    out: dict[str, float | None] = {}
    for report in reports:
        if report.task_folder not in out:
            out[report.task_folder] = guess_of(report)
    return out


@functools.lru_cache(maxsize=256)
def _guess(task: str, options: str, n_test: int | None) -> float | None:
    return constant_guess(get(task, **json.loads(options)), n_test)
