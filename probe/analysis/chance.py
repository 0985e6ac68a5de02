"""The floor of exact match on unseen lengths: what the best constant guess scores.

A task whose answer takes few values is not scored from 0: parity's answer is yes or no, LEGO's +1 or -1,
summation's and polynomial evaluation's a digit (both mod 10, the paper's Appendix "Experimental
Details", Tasks). A model that has learnt
nothing of the input and always gives the most common answer scores that answer's share, about half on parity
and LEGO and a tenth on the mod-10 tasks. An accuracy on unseen lengths reads as length generalization only
above it, and two PEs at it differ by chance, not by how they generalize.
"""

from __future__ import annotations

from collections import Counter

from probe.tasks.base import Task


def constant_guess(task: Task, n_test: int | None = None) -> float | None:
    """Exact match on unseen lengths of the best constant prediction: the share of the most common gold answer
    among the unseen-length examples an evaluation scores (the test split's first ``n_test`` at seed 0, as
    :func:`~probe.analysis.evaluation.evaluate_run` draws them), each read as scoring reads it (the task's
    :meth:`~probe.tasks.base.Task.answer_reader`; the whole target where it has none). None where the task has
    no unseen length."""
    read = task.answer_reader() or (lambda target: target)
    unseen = [e for e in task.examples("test", n=n_test, seed=0) if not task.is_seen(e.length)]
    answers = Counter(read(e.target) for e in unseen)
    if not answers:
        return None
    return answers.most_common(1)[0][1] / answers.total()
