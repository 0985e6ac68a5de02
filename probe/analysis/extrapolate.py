"""`probe extrapolate`: each run under each inference-time intervention, beside itself untouched.

Task runs are scored by exact match per length bucket on their task's unseen test lengths (teacher forced:
greedy decoding's exact match in one pass, :func:`probe.tasks.decoding.teacher_forced_exact_match`), and on
IID examples as a check that a change leaves the seen lengths alone. Code runs, imported runs and ``hf:``
models are scored by the perplexity of held-out files at multiples of their context (the paper's way:
:mod:`probe.analysis.perplexity`). Intervals are percentile bootstraps over examples (files).

The interventions (:mod:`probe.models.interventions`) come in two kinds, reported apart:

- **fixed rules**, nothing tuned: ``log-length`` with L the longest sequence trained on; ``cap`` at L - 1
  (bias and rotating PEs); ``rope``, YaRN stretched by the longest test length over L (Rotary, and hf:
  models with RoPE), and any intervention given with ``--intervention``;
- **tuned** on a validation slice that the test numbers leave out (:mod:`probe.analysis.tuning`): per unseen
  length, the first 20% of its test examples by SHA-256 of the example (at most ``n_valid``); for language
  models, 20% of the held-out files by SHA-256 of their name. A global ``temperature`` and a ``window`` with
  sinks by grid search, a ``head-temperature`` per head fitted by gradient descent on the validation loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from probe.analysis.extrapolate_lms import language_model
from probe.analysis.extrapolate_tasks import task_run
from probe.analysis.extrapolation_plan import FAMILIES, Progress, Settings
from probe.analysis.extrapolation_report import ExtrapolationReport
from probe.analysis.subjects import TaskRun, home, resolve_all
from probe.errors import ProbeError


def extrapolate(
    names: Sequence[str | Path], settings: Settings | None = None, root: str | Path = "checkpoints"
) -> ExtrapolationReport:
    """Every run of ``names`` untouched and under each intervention of ``settings``: the library call
    behind `probe extrapolate` (its fixed rules and tuned families in the module docstring).

    :param names: run folders, all task runs or all language models (code runs, imported runs, ``hf:``).
    :param settings: which intervention families, how many examples, the device (default: all families, CPU).
    :param root: where the report's folder is, for names that are PEs rather than folders.
    :return: :meth:`~probe.analysis.extrapolation_report.ExtrapolationReport.to_rows` gives the table,
        ``.write(folder)`` its JSON, CSV, Markdown and figures."""
    settings = Settings() if settings is None else settings
    unknown = [f for f in settings.families if f not in FAMILIES]
    if unknown:
        raise ProbeError(f"unknown intervention family {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
    subjects = resolve_all(list(names))
    kinds = {isinstance(s, TaskRun) for s in subjects}
    if len(kinds) > 1:
        raise ProbeError("extrapolate task runs and language models (code runs, hf: models) separately")
    runs = []
    for index, subject in enumerate(subjects):
        step = _stepper(settings.progress, subject.info.label, index, len(subjects))
        evaluate = task_run if isinstance(subject, TaskRun) else language_model
        runs.append(evaluate(subject, settings, step))
    measure = "exact match" if isinstance(subjects[0], TaskRun) else "perplexity"
    folder = home(subjects, root, settings.options)
    return ExtrapolationReport(runs, measure, folder, settings.seed)


def _stepper(progress: Progress | None, label: str, index: int, total: int) -> Callable[[str], None]:
    def step(what: str) -> None:
        if progress:
            progress(f"{label}: {what}", index, total)

    return step
