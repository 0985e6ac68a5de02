"""What is analysed: a name resolved once, here, into a subject, and which reading a set of subjects has.

A name is a PE (a run of the given task and seed under the checkpoints folder), a run folder (``probe train``,
``probe pretrain`` or ``probe import``), or ``hf:ID`` / ``hf:FOLDER`` (any model TransformerLens loads from
Hugging Face files: :mod:`probe.models.hf`). :func:`resolve` is the one place that asks which, and
:func:`reading_of` the one place that asks which :class:`~probe.subjects.readings.Reading` a set of subjects
has; every analysis (compare, distances, positions, perplexity) takes subjects
(:mod:`probe.subjects.subject`), loads each when it needs it and reads the
:class:`~probe.subjects.inputs.Inputs` its reading gives (:mod:`probe.subjects.readings`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from probe.corpus import CODE_TASK
from probe.errors import ProbeError
from probe.models.checkpoint import read_checkpoint_config
from probe.models.hf import file_name, is_external, model_folder
from probe.models.interventions import Intervention
from probe.presets import main_task
from probe.runs.folders import Run, beside, resolve_run, task_folder_name, train_command
from probe.subjects.readings import CorpusReading, Reading, TaskReading, TextReading
from probe.subjects.run_info import OnBroken, RunInfo, check_comparable, is_code_run, pe_label, task_runs
from probe.subjects.subject import CodeRun, HfModel, Subject, TaskRun


def resolve(
    name: str | Path | Run,
    *,
    root: str | Path | None = None,
    task: str | None = None,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
) -> Subject:
    """The subject ``name`` names: ``hf:`` (found on this machine), a run folder, or with ``root`` a PE name
    resolved for ``task``, ``seed`` and the task ``options`` (no ``task``: the main job's, its options under
    ``options``, as the commands read it: :func:`probe.presets.main_task`). Nothing is loaded."""
    if isinstance(name, Run):
        return _run_subject(name.path, name.config)
    name = str(name)
    if is_external(name):
        model_folder(name)
        return HfModel(name, None)
    if root is None:
        path = Path(name)
    else:
        task, options = main_task(task, dict(options or {}))
        path = resolve_run(name, root, task, seed, options)
    return _run_subject(path, read_checkpoint_config(path))


def subjects_task(names: Sequence[str], task: str | None) -> str | None:
    """The task whose runs PE names among ``names`` are: code where an ``hf:`` model is among them (they are
    read on held-out code), else ``task`` (None: the main job's, :func:`probe.presets.main_task`); a task that
    is not code beside hf: is one line."""
    if any(is_external(str(n)) for n in names):
        if task not in (None, CODE_TASK):
            raise ProbeError(f"hf: models are read on held-out code (--task {CODE_TASK}), not on task {task}")
        return CODE_TASK
    return task


def reads_code(names: Sequence[str], task: str | None) -> bool:
    """Whether the models ``names`` (with ``--task``) are read on code, where options name a corpus rather than
    a task's (:func:`subjects_task`)."""
    return subjects_task(names, task) == CODE_TASK


def is_language_model(config: Mapping[str, Any]) -> bool:
    """Whether a run folder's ``config.json`` is a language model's (a code run of `probe pretrain` or
    `probe import`: read on held-out text, scored by perplexity) rather than a task run's: the one test of a
    run's kind, which :func:`resolve` and the explorer's run lists ask."""
    return is_code_run(config)


def split_hf(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the ``hf:`` spellings among ``names``, the rest): what a text field of model names holds."""
    return [n for n in names if is_external(n)], [n for n in names if not is_external(n)]


def _run_subject(path: Path, config: dict[str, Any]) -> Subject:
    kind = CodeRun if is_language_model(config) else TaskRun
    return kind(str(path), Run(path, config))


def resolve_all(
    names: Sequence[str | Path | Run],
    *,
    root: str | Path | None = None,
    task: str | None = None,
    seed: int = 0,
    options: Mapping[str, Any] | None = None,
    intervention: Intervention | None = None,
) -> list[Subject]:
    """:func:`resolve` of every name before anything is read, each to be read under ``intervention``. Where an
    ``hf:`` model is among them, PE names are code runs (``task`` code) and every run must be one: hf: models
    are read on held-out code."""
    if any(is_external(str(n)) for n in names if not isinstance(n, Run)):
        subjects = [resolve(n, root=root, task=CODE_TASK, seed=seed, options=options) for n in names]
        for s in subjects:
            if isinstance(s, TaskRun):
                raise ProbeError(
                    f"{s.path} is a run of task {s.config.get('task', {}).get('name', '?')}, not a code model: "
                    "hf: models are read on held-out code, beside the runs of `probe pretrain`"
                )
    else:
        subjects = [resolve(n, root=root, task=task, seed=seed, options=options) for n in names]
    for s in subjects:
        s.intervention = intervention or Intervention()
    return subjects


def task_subjects(
    root: str | Path,
    task: str,
    options: Mapping[str, Any] | None = None,
    seed: int | None = 0,
    pes: Sequence[str] | None = None,
    on_broken: OnBroken | None = None,
) -> list[Subject]:
    """The complete runs of a task folder (:func:`probe.subjects.run_info.task_runs`) as subjects."""
    return [resolve(run) for run in task_runs(root, task, options, seed, pes, on_broken)]


def others_than(
    a: Subject,
    root: str | Path,
    task: str,
    options: Mapping[str, Any],
    seed: int,
    on_broken: OnBroken | None = None,
) -> list[Subject]:
    """Every other PE's run beside ``a`` (`probe compare A` with no B); ``on_broken`` hears the runs left out."""
    if isinstance(a, HfModel):
        raise ProbeError(f"name the models to compare {a.name} with (probe compare {a.name} hf:OTHER)")
    others = [s for s in task_subjects(root, task, options, seed=seed, on_broken=on_broken) if s.info.pe != a.info.pe]
    if not others:
        raise ProbeError(
            f"no other PE's run of {task_folder_name(task, dict(options))} seed {seed} under {root} to "
            f"compare {a.info.pe} with (make them with: {train_command(task, dict(options), root)})"
        )
    return others


def home(subjects: Sequence[Subject], root: str | Path, options: Mapping[str, Any] | None = None) -> Path:
    """Where outputs about these subjects go: beside the runs among them, else the code folder of the
    corpus ``options`` under ``root`` (``checkpoints/code``)."""
    runs = [s.run for s in subjects if s.path is not None]
    if runs:
        return beside(runs)
    return Path(root) / task_folder_name(CODE_TASK, dict(options or {}))


def task_folder(subjects: Sequence[Subject], root: str | Path, options: Mapping[str, Any] | None = None) -> str:
    """The task folder the outputs name: the first run's, else that of the corpus ``options``."""
    runs = [s.run for s in subjects if s.path is not None]
    if runs and not any(isinstance(s, HfModel) for s in subjects):
        return runs[0].task_folder
    return home(subjects, root, options).name


def file_stem(subjects: Sequence[Subject]) -> str:
    """``hf-gpt2+hf-EleutherAI--pythia-70m``: the ``hf:`` models among ``subjects``, for output names."""
    return "+".join(file_name(s.name) for s in subjects if isinstance(s, HfModel))


def reading_of(subjects: Sequence[Subject], options: Mapping[str, Any] | None = None) -> Reading:
    """What the first of ``subjects`` reads, and those compared with it or scored beside it: held-out texts
    where an hf: model is among them, else its task's examples or its corpus's windows."""
    if any(isinstance(s, HfModel) for s in subjects):
        return TextReading(subjects, options)
    return CorpusReading(subjects[0]) if isinstance(subjects[0], CodeRun) else TaskReading(subjects[0])


def readings(subjects: Sequence[Subject], options: Mapping[str, Any] | None = None) -> list[Reading]:
    """What each subject reads: its task's examples, its corpus's windows, or, where an hf: model is among
    them, one set of held-out texts for all."""
    if any(isinstance(s, HfModel) for s in subjects):
        shared = TextReading(subjects, options)
        return [shared for _ in subjects]
    return [reading_of([s]) for s in subjects]


def check_together(a: Subject, others: Sequence[Subject]) -> None:
    """Runs compared with ``a`` read what ``a`` reads (same task and vocabulary, or the same corpus); an
    hf: model's tokenizer is checked once it is loaded (:meth:`Reading.check_pair`)."""
    for b in others:
        if a.path is not None and b.path is not None:
            check_comparable(a.info, a.config, b.info, b.config)


def baseline_label(a: Subject) -> str:
    return f"{pe_label(a.info.pe)}'"


def relabelled(info: RunInfo, suffix: str | None) -> RunInfo:
    return info if suffix is None else replace(info, label=f"{info.label} @{suffix}")
