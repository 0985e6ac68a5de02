"""What a trained run writes, beside the gold (``probe eval --show``): a number that is off (an OOD under a
constant guess, a scratchpad scored wrong) is read in the predictions behind it, decoded greedily as
``probe eval`` decodes them and scored as it scores them (Section 3's exact match; a scratchpad's answer read
as the authors read it, Section 6)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from probe.analysis.evaluation import RunScorer, run_scorer
from probe.errors import ProbeError
from probe.runs.folders import Run
from probe.subjects.settings import ReadSettings
from probe.tasks import Example
from probe.tasks.scratchpad import first_wrong_component, first_wrong_step, written_steps

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True)
class Shown:
    """One test example and the run's greedy prediction for it (up to its ``<eos>``)."""

    length: int
    seen: bool  # a training length
    source: str
    target: str
    prediction: str
    answer: str | None  # the answer read from the prediction where the task scores it alone (None: not read)
    gold_answer: str | None  # the gold target's, read alike (None where the whole target is matched)
    correct: bool
    gold_steps: int | None = None  # the gold scratchpad's steps (None without a scratchpad)
    wrong_step: int | None = None  # the first step its scratchpad departs from the gold's at (1-based; 0: its opening)
    wrong_component: str | None = None  # the component it departs in (I, C, O, V, R, or opening), the authors' words

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def show_predictions(
    run: str | Path | Run,
    settings: ReadSettings | None = None,
    *,
    per_length: int,
    wrong: bool = False,
    n_test: int | None = None,
    n_valid: int = 500,
) -> list[Shown]:
    """The first ``per_length`` examples of each length (with ``wrong``, the first ``per_length`` scored wrong) of
    those ``probe eval`` scores, with the predictions of ``run`` (a run folder or its
    :class:`~probe.runs.folders.Run`), shortest length first: its test split (``n_test`` examples at seed 0), and
    where that holds no training length (the paper's splits) its ``n_valid`` IID examples before it, so the seen
    lengths are shown too. ``settings`` as :func:`~probe.analysis.evaluation.evaluate_run` reads them."""
    check_per_length(per_length)
    scorer = run_scorer(Run.of(run), settings or ReadSettings())
    task = scorer.task
    examples = task.examples("test", n=n_test, seed=0)
    if not any(task.is_seen(e.length) for e in examples):
        examples = task.held_out(n_valid) + examples
    if wrong:
        verdicts = scorer.score(scorer.model, examples).correct
        examples = [e for e, right in zip(examples, verdicts) if not right]
    chosen = _first_of_each_length(examples, per_length)
    return _decoded(scorer, chosen)


def check_per_length(per_length: int) -> None:
    """ProbeError, in ``probe eval``'s words, where fewer than one prediction per length is asked for."""
    if per_length < 1:
        raise ProbeError(f"--show must be at least 1 prediction per length, got {per_length}")


def _first_of_each_length(examples: list[Example], per_length: int) -> list[Example]:
    """The first ``per_length`` of ``examples`` of each length, shortest length first, in their order within one."""
    by_length: dict[int, list[Example]] = defaultdict(list)
    for e in examples:
        if len(by_length[e.length]) < per_length:
            by_length[e.length].append(e)
    return [e for length in sorted(by_length) for e in by_length[length]]


def _decoded(scorer: RunScorer, examples: list[Example]) -> list[Shown]:
    """``examples`` decoded greedily and scored as ``probe eval`` scores them."""
    result = scorer.decode(examples)
    read = scorer.how["answer_of"] or (lambda text: None)
    return [
        Shown(
            e.length,
            scorer.task.is_seen(e.length),
            e.source,
            e.target,
            said,
            _text(read(said)),
            _text(read(e.target)),
            right,
            *_steps(scorer.task, said, e.target),
        )
        for e, said, right in zip(examples, result.predictions, result.correct)
    ]


def _steps(task, prediction: str, gold: str) -> tuple[int | None, int | None, str | None]:
    """The gold scratchpad's step count, and the first step ``prediction`` departs from it at and in which
    component (Section 6's formats; :func:`~probe.tasks.scratchpad.first_wrong_step`,
    :func:`~probe.tasks.scratchpad.first_wrong_component`, which reads the authors' words only); None where the
    task writes no scratchpad."""
    if not getattr(task, "scratchpad", None):
        return None, None, None
    authors = task.template == "authors"
    component = first_wrong_component(prediction, gold, task.scratchpad) if authors else None
    return len(written_steps(gold, task.template)), first_wrong_step(prediction, gold, task.template), component


def _text(answer: Hashable | None) -> str | None:
    """An answer as a reader returns it (a word, a number, a tuple of them) as one line of text."""
    if answer is None:
        return None
    return " ".join(map(str, answer)) if isinstance(answer, (tuple, list)) else str(answer)
