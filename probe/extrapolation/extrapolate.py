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
- **tuned** on a validation slice that the test numbers leave out (:mod:`probe.extrapolation.tuning`): per unseen
  length, the first 20% of its test examples by SHA-256 of the example (at most ``n_valid``); for language
  models, 20% of the held-out files by SHA-256 of their name. A global ``temperature`` and a ``window`` with
  sinks by grid search, a ``head-temperature`` per head fitted by gradient descent on the validation loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from probe.errors import ProbeError
from probe.extrapolation.language_models import LanguageModelScorer
from probe.extrapolation.plan import (
    FAMILIES,
    RunPlan,
    Settings,
    fixed_candidates,
    run_plan,
    tuned_candidates,
)
from probe.extrapolation.report import ExtrapolationReport, RunExtrapolation
from probe.extrapolation.tasks import TaskScorer, check_task_lengths_fit
from probe.models.interventions import Intervention
from probe.subjects.resolve import home, reading_of, resolve_all
from probe.subjects.run_info import Progress
from probe.subjects.subject import EXACT_MATCH, PERPLEXITY, Subject

SCORERS = {EXACT_MATCH: TaskScorer, PERPLEXITY: LanguageModelScorer}  # a subject's measure -> how it is scored


def plan(names: Sequence[str | Path], settings: Settings) -> list[RunPlan]:
    """What :func:`extrapolate` will do to each model of ``names``, checked, before any model is loaded:
    `probe extrapolate` prints it first, and alone under ``--dry-run``."""
    subjects = _subjects(names, settings)
    _check_lengths(subjects, settings)
    return [run_plan(subject, settings) for subject in subjects]


def estimate(names: Sequence[str | Path], settings: Settings, plans: Sequence[RunPlan]) -> float | None:
    """Seconds :func:`extrapolate` should take here: every task run's reads (counted from its data) at the
    rate one pass over the first run's test examples is timed at, now; None for language models."""
    subjects = _subjects(names, settings)
    return SCORERS[subjects[0].measure].estimate(subjects, settings, plans)


def extrapolate(
    names: Sequence[str | Path], settings: Settings | None = None, *, root: str | Path = "checkpoints"
) -> ExtrapolationReport:
    """Every run of ``names`` untouched and under each intervention of ``settings``: the library call
    behind `probe extrapolate` (its fixed rules and tuned families in the module docstring).

    :param names: run folders, all task runs or all language models (code runs, imported runs, ``hf:``).
    :param settings: which intervention families, how many examples, the device (default: all families, CPU);
        its ``progress`` hears (step, steps done, steps planned, over every model: :func:`plan`) as each begins.
    :param root: where the report's folder is, for names that are PEs rather than folders.
    :return: :meth:`~probe.extrapolation.report.ExtrapolationReport.to_rows` gives the table,
        ``.write(folder)`` its JSON, CSV, Markdown and figures."""
    settings = Settings() if settings is None else settings
    subjects = _subjects(names, settings)
    _check_lengths(subjects, settings)
    total = sum(len(run_plan(subject, settings).steps) for subject in subjects)
    done = [0]
    runs = []
    for subject in subjects:
        step = _stepper(settings.progress, subject.info.label, done, total)
        runs.append(extrapolate_one(subject, settings, step))
    folder = home(subjects, root, settings.options)
    return ExtrapolationReport(runs, subjects[0].measure, folder, settings.seed)


def extrapolate_one(subject: Subject, settings: Settings, step: Callable[[str], None]) -> RunExtrapolation:
    """One model untouched and under each candidate (module docstring), scored the way its measure says:
    exact match for a task run, held-out perplexity for a language model."""
    loaded = subject.load(settings.device)
    reading = reading_of([subject], {**settings.options, "context": settings.options.get("context") or loaded.context})
    scorer = SCORERS[subject.measure](subject, loaded, reading, settings)
    step("untouched")
    outcomes = [scorer.outcome("none", "none", Intervention(), loaded.model)]
    rotary = subject.rotates(loaded)
    fixed, skipped = fixed_candidates(subject.has_distance(loaded), rotary, scorer.trained, scorer.longest, settings)
    for family, intervention in fixed:
        step(intervention.name)
        try:
            subject.check_cap_fits(loaded.model, intervention, scorer.longest, loaded.info.label)
            outcomes.append(scorer.outcome(family, "fixed", intervention, loaded.model))
        except ProbeError as error:  # a rule this model cannot take is said, the others kept
            skipped[intervention.name if family == "given" else family] = str(error)
    found, untuned = tuned_candidates(loaded.model, settings, scorer.trained, scorer.on_valid, scorer.losses, step)
    skipped |= untuned  # a family validation cannot tune is said, never a value chosen on no score
    for tuned in found:
        outcomes.append(scorer.outcome(tuned.family, "tuned", tuned.intervention, loaded.model, tuned))
    for outcome in outcomes:  # what best is chosen on, as the tuned families are: never the test
        outcome.valid = _valid_key(scorer, outcome.intervention)
    skipped |= scorer.skipped  # what the scorer left out (a language model's contexts it cannot read)
    info = loaded.info
    return RunExtrapolation(
        info.label, info.pe, info.path, info.seed, scorer.trained, scorer.validation, outcomes, skipped,
        f"{subject.trained_from}, in tokens", context=scorer.context,
    )  # fmt: skip


def _valid_key(scorer, intervention: Intervention) -> tuple[float, float] | None:
    """``intervention``'s score on the validation slice (what best reads), or None where it has none (nothing
    there is read, or NaN): an outcome without one is never best."""
    try:
        score = scorer.on_valid(intervention)
    except ProbeError:
        return None
    return score.key() if score.known else None


def _subjects(names: Sequence[str | Path], settings: Settings) -> list:
    unknown = [f for f in settings.families if f not in FAMILIES]
    if unknown:
        raise ProbeError(f"unknown intervention family {unknown[0]!r}; choose from {', '.join(FAMILIES)}")
    subjects = resolve_all(list(names))
    if len({s.measure for s in subjects}) > 1:
        raise ProbeError("extrapolate task runs and language models (code runs, hf: models) separately")
    return subjects


def _check_lengths(subjects: Sequence[Subject], settings: Settings) -> None:
    """ProbeError, before anything is read, where a task run's examples are longer than it reads."""
    for subject in subjects:
        if subject.measure == EXACT_MATCH:
            check_task_lengths_fit(subject, settings)


def _stepper(progress: Progress | None, label: str, done: list[int], total: int) -> Callable[[str], None]:
    """The ``step(what)`` a model's evaluation calls as each step begins: the steps finished so far (over
    every model) and the planned total go to ``progress``, so its count and time left hold from the first."""

    def step(what: str) -> None:
        if progress:
            progress(f"{label}: {what}", done[0], max(total, done[0] + 1))
        done[0] += 1

    return step
