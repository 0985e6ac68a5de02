"""Where runs live: ``<checkpoints>/<task>[+<option>=<value>...]/<pe>[+<option>=<value>...]/seed<k>/``,
and how to find them.

One place decides the layout so that ``probe train``, ``probe eval``, ``probe compare`` and the
explorer agree. A run folder is a checkpoint folder (``config.json`` + ``model.safetensors``)
plus ``metrics.jsonl``, ``eval.json`` and, while training, ``train_state.safetensors``. A run whose
published model was selected on validation keeps its last step's checkpoint in ``last/``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probe.errors import ProbeError
from probe.models.checkpoint import CONFIG, read_checkpoint_config, task_name
from probe.models.positional import format_option
from probe.presets import MAIN_JOB

if TYPE_CHECKING:
    import torch

    from probe.models.transformer import PETransformer

DEFAULT_CHECKPOINTS = Path("checkpoints")
LAST = "last"  # <run>/last: the last step's checkpoint where selection published another


def task_folder_name(task: str, options: dict[str, Any] | None = None) -> str:
    """``addition`` or, with options given on the command line, ``addition+scratchpad=full``; a code
    corpus's by :func:`probe.corpus.corpus_folder_name`."""
    from probe.corpus import CODE_TASK, corpus_folder_name

    if task == CODE_TASK:
        return corpus_folder_name(options)
    given = {k: v for k, v in sorted((options or {}).items()) if v is not None and v != "none"}
    return task + "".join(f"+{k}={v}" for k, v in given.items())


def given_options(task: str, options: dict[str, Any]) -> dict[str, Any]:
    """The fewest of a task's resolved ``options`` that resolve to all of them: what a user would
    have typed (``split=paper`` for SCAN's ``split=paper, train_length=25, valid_fraction=0.1``)."""
    from probe.corpus import CODE_TASK, CorpusSpec
    from probe.tasks import get as get_task

    if task == CODE_TASK:
        return CorpusSpec.from_options(options).given()
    given = dict(options)
    for key in list(options):
        fewer = {k: v for k, v in given.items() if k != key}
        try:
            if get_task(task, **fewer).options == options:
                given = fewer
        except ProbeError:
            continue
    return given


def run_dir(
    root: str | Path,
    task: str,
    pe: str,
    seed: int,
    options: dict[str, Any] | None = None,
    pe_options: dict[str, Any] | None = None,
) -> Path:
    """``<root>/<task folder>/<pe>[+<option>=<value>...]/seed<k>``: a PE's options given at training
    are part of its folder's name, so RoPE at two bases never share one."""
    from probe.models.registry import pe_folder_name

    return Path(root) / task_folder_name(task, options) / pe_folder_name(pe, pe_options) / f"seed{seed}"


@dataclass(frozen=True)
class Run:
    """A run folder and what its ``config.json`` says about it."""

    path: Path
    config: dict[str, Any]

    @classmethod
    def of(cls, run: str | Path | Run) -> Run:
        """``run`` itself, or the run in the folder ``run`` names, its ``config.json`` read (a folder that holds
        no run is one line)."""
        return run if isinstance(run, Run) else cls(Path(run), read_checkpoint_config(run))

    @property
    def pe(self) -> str:
        return self.config["pe"]

    @property
    def pe_options(self) -> dict[str, Any]:
        """The PE's options as given at training (``-p``); the model's resolved ones are in its config."""
        return dict(self.config.get("training", {}).get("pe_options", {}))

    @property
    def pe_name(self) -> str:
        """``rotary`` or ``rotary+base=500``: the PE and the options it was trained with."""
        from probe.models.registry import pe_folder_name

        return pe_folder_name(self.pe, self.pe_options)

    @property
    def task(self) -> str:
        return task_name(self.config) or "?"

    @property
    def seed(self) -> int:
        return int(self.config.get("model", {}).get("seed", 0))

    @property
    def complete(self) -> bool:
        return bool(self.config.get("training", {}).get("complete", False))

    @cached_property
    def in_layout(self) -> bool:
        """Whether the folder sits at ``<task folder>/<pe>/seed<k>`` as ``probe train`` puts it, in a task folder
        its ``config.json`` belongs to: a run moved or copied into another task's folder and named by its path
        is outside the layout, so labelled by its config, never as the folder it sits in."""
        if not (self.path.name == f"seed{self.seed}" and self.path.parent.name == self.pe_name):
            return False
        folder = self.path.parent.parent.name
        parsed = _folder_options(folder)
        return parsed is None or not _stranger(self.config, folder, *parsed, {})

    @property
    def task_folder(self) -> str:
        """The task folder's name: from the layout when the run is in it, else from ``config.json``."""
        if self.in_layout:
            return self.path.parent.parent.name
        task = self.config.get("task")
        options = task.get("options", {}) if isinstance(task, dict) else {}
        return task_folder_name(self.task, given_options(self.task, options))

    @property
    def label(self) -> str:
        """``scan+split=paper/nope/seed0``; a run outside the layout adds its folder's name."""
        label = f"{self.task_folder}/{self.pe_name}/seed{self.seed}"
        return label if self.in_layout else f"{label} ({self.path.name})"


def beside(runs: Iterable[Run]) -> Path:
    """Where outputs about these runs go: their task folder when they are in the layout
    (``<checkpoints>/<task folder>``), else the folder that holds them all; never the working
    directory unless the runs are there."""
    homes = [run.path.resolve().parent.parent if run.in_layout else run.path.resolve().parent for run in runs]
    return Path(os.path.commonpath(homes))


def find_runs(
    root: str | Path, task: str | None = None, options: dict[str, Any] | None = None
) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Every checkpoint under ``root`` (optionally of one task folder), and the broken ones with why: among them
    a run whose ``config.json`` is another task's (or the same task's under other options) than the task folder
    it is found in, copied or moved there, which would otherwise be read, scored and labelled as that folder's."""
    root = Path(root)
    if not root.is_dir():
        return [], []
    base = root / task_folder_name(task, options) if task else root
    runs, broken = [], []
    resolved: dict[tuple[str, str], Any] = {}
    for config_path in sorted(base.rglob(CONFIG)):
        if config_path.parent.name == LAST and (config_path.parent.parent / CONFIG).is_file():
            continue  # a run's own last-step checkpoint, not a run of its own
        try:
            config = read_checkpoint_config(config_path.parent)
        except ProbeError as error:
            broken.append((config_path.parent, str(error)))
            continue
        if not isinstance(config.get("pe"), str):
            broken.append((config_path.parent, f"{config_path} names no positional encoding: not a probe run"))
            continue
        folder = _task_folder_of(config_path.parent, root, task, options)
        stranger = folder and _stranger(config, *folder, resolved)
        if stranger:
            broken.append((config_path.parent, f"{stranger}; not read as one of {folder[0]}"))
            continue
        runs.append(Run(config_path.parent, config))
    return runs, broken


def check_belongs(run: Run, task: str, options: dict[str, Any] | None = None) -> None:
    """ProbeError where ``run``, found by a PE name under the task folder of ``task`` and ``options``
    (:func:`resolve_run`), is another task's run or the same task's under other options (moved or copied there):
    it would be read and labelled as that folder's."""
    folder = task_folder_name(task, options)
    stranger = _stranger(run.config, folder, task, dict(options or {}), {})
    if stranger:
        raise ProbeError(f"{run.path}: {stranger}; not read as one of {folder}")


def _task_folder_of(
    path: Path, root: Path, task: str | None, options: dict[str, Any] | None
) -> tuple[str, str, dict[str, Any]] | None:
    """(the task folder's name, its task, its options) that the run folder ``path`` is found under: the task
    (and options) asked for, else read from the name of the folder ``<root>/<task folder>/<pe>/seed<k>`` that
    holds it; None where ``path`` is not laid out so or its folder's name names no task (nothing to check)."""
    if task:
        return task_folder_name(task, options), task, dict(options or {})
    parts = path.relative_to(root).parts
    if len(parts) != 3 or not parts[2].startswith("seed"):
        return None
    name = parts[0]
    parsed = _folder_options(name)
    return None if parsed is None else (name, *parsed)


def _folder_options(name: str) -> tuple[str, dict[str, Any]] | None:
    """``addition+scratchpad=I+C+train_length=8`` -> (``addition``, its options as typed), values read as the
    command line reads them; None where the name is no task's (a folder of the user's own)."""
    import json

    from probe.corpus import CODE_TASK
    from probe.tasks import TASKS

    task, *terms = name.split("+")
    if task != CODE_TASK and task not in TASKS:
        return None
    pairs: list[list[str]] = []
    for term in terms:
        key, sep, value = term.partition("=")
        if sep:
            pairs.append([key, value])
        elif pairs:  # a value holding a '+' (a scratchpad format, I+C+O)
            pairs[-1][1] += "+" + term
        else:
            return None
    options: dict[str, Any] = {}
    for key, value in pairs:
        try:
            options[key] = json.loads(value.lower() if value in ("True", "False") else value)
        except json.JSONDecodeError:
            options[key] = value
    return task, options


def _stranger(
    config: dict[str, Any], folder: str, task: str, options: dict[str, Any], resolved: dict[str, Any]
) -> str | None:
    """Why the run of ``config`` does not belong in the task folder ``folder`` (of ``task`` with ``options``):
    another task's run, or the same task's under other options (copied or moved there), which would be read as
    the folder's and labelled so; None where it belongs, or where either side's options no longer resolve (the
    reader says what is wrong then). ``resolved`` caches each task's resolved options."""
    from probe.corpus import CODE_TASK

    theirs = task_name(config)
    theirs_options = config["task"].get("options", {}) if theirs is not None else {}
    if not isinstance(theirs_options, dict):
        return None
    if theirs == task == CODE_TASK:  # a corpus folder's name is its options' (a corpus folder's hashed path)
        its = _resolved(CODE_TASK, theirs_options, resolved)
        if its is None or its == folder:
            return None
    elif theirs == task:
        mine, its = _resolved(task, options, resolved), _resolved(task, theirs_options, resolved)
        if mine is None or its is None or mine == its:
            return None
    if theirs is None:
        what = "a model of no task (a construction)"
    elif theirs == CODE_TASK:
        what = f"a run of {_resolved(CODE_TASK, theirs_options, resolved) or CODE_TASK}"
    else:
        try:
            what = f"a run of {task_folder_name(theirs, given_options(theirs, theirs_options))}"
        except ProbeError:
            what = f"a run of {theirs}"
    return f"its config.json is {what}, not of {folder}, the task folder it sits in (moved or copied there?)"


def _resolved(task: str, options: dict[str, Any], resolved: dict[str, Any]) -> Any:
    """``task``'s options resolved (a code corpus's: its folder's name), cached in ``resolved``; None where they
    do not resolve."""
    import json

    from probe.corpus import CODE_TASK, corpus_folder_name

    key = (task, json.dumps(options, sort_keys=True, default=str))
    if key not in resolved:
        try:
            if task == CODE_TASK:
                resolved[key] = corpus_folder_name(options)
            else:
                from probe.tasks import get as get_task

                resolved[key] = get_task(task, **options).options
        except (ProbeError, TypeError, ValueError):
            resolved[key] = None
    return resolved[key]


def resolve_run(name: str, root: str | Path, task: str, seed: int, options: dict[str, Any] | None = None) -> Path:
    """A PE name (resolved under ``root`` for ``task`` and ``seed``) or a run folder."""
    from probe.models.registry import PE_KINDS, split_pe_name

    path = Path(name)
    if (path / CONFIG).is_file():
        return path
    if name.split("+")[0] in PE_KINDS:
        pe, pe_options = split_pe_name(name)
        candidate = run_dir(root, task, pe, seed, options, pe_options)
        if (candidate / CONFIG).is_file():
            return candidate  # its config.json is read once, by the caller: check it there (check_belongs)
        raise ProbeError(
            f"no {name} checkpoint for task {task_folder_name(task, options)} seed {seed} under {root} "
            f"(make it with: {train_command(task, options, root, pe=pe, seed=seed, pe_options=pe_options)})"
        )
    raise ProbeError(f"{name!r} is neither a positional encoding ({', '.join(PE_KINDS)}) nor a run folder")


def train_command(
    task: str,
    options: dict[str, Any] | None,
    root: str | Path,
    pe: str | None = None,
    seed: int | None = None,
    pe_options: dict[str, Any] | None = None,
) -> str:
    """The `probe train` command line that makes the runs described (the main job's with no ``--task``, as it
    trains them; `probe pretrain` for a code corpus, `probe import` for one tokenized with a released model's
    tokenizer)."""
    from probe.corpus import CODE_TASK, CorpusSpec

    if task == CODE_TASK:
        given = CorpusSpec.from_options(options).given()
        if "tokenizer" in given:  # a corpus read with a model's own tokenizer: its runs are imported
            parts = [
                "probe import MODEL_FOLDER",
                *(f"--{key} {given[key]}" for key in ("corpus", "context") if key in given),
            ]
            return " ".join(parts + ([f"--checkpoints {root}"] if Path(root) != DEFAULT_CHECKPOINTS else []))
        parts = ["probe pretrain", *(f"--{key.replace('_', '-')} {value}" for key, value in sorted(given.items()))]
    else:
        given = {key: value for key, value in (options or {}).items() if value is not None and value != "none"}
        parts = ["probe train"]
        main_job = task == MAIN_JOB["task"] and given_options(task, given) == MAIN_JOB["options"]
        if not main_job:  # --task trains the task's own recipe, not the main job's
            parts.append(f"--task {task}")
            for key, value in sorted(given.items()):
                parts.append(f"--scratchpad {value}" if key == "scratchpad" else f"-o {key}={value}")
    if pe:
        parts.append(f"--pe {pe}")
    for key, value in sorted((pe_options or {}).items()):
        parts.append(f"-p {key}={format_option(value)}")
    if seed is not None:
        parts.append(f"--seed {seed}")
    if Path(root) != DEFAULT_CHECKPOINTS:
        parts.append(f"--checkpoints {root}")
    return " ".join(parts)


def recorded_precision(stored: dict[str, Any]) -> str | None:
    """``float32``, ``bf16`` or ``tf32`` (:mod:`probe.precision`): what a published run's ``config.json``
    (``stored``) says it trained in; None for a run published before it was recorded."""
    return stored.get("metrics", {}).get("forward_precision")


def load_run(
    path: str | Path,
    device: str | torch.device = "cpu",
    pe_options: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
) -> PETransformer:
    """A run's model with its tokenizer: the one the run carries (``tokenizer.json``), or, for a run saved
    before runs carried one, its task's word-level vocabulary or its code BPE, as it was trained with.

    :param path: a run folder (``probe train``, ``probe pretrain``, ``probe import``) or a checkpoint folder.
    :param device: where the model is loaded.
    :param pe_options: PE options changed at inference (RoPE ``scaling``, ``factor``, ...).
    :param config: the folder's ``config.json`` where the caller has read it already.
    :return: a hooked :class:`~probe.models.transformer.PETransformer`, its ``config.json`` on ``.metadata``."""
    from probe.models.checkpoint import load_checkpoint

    model = load_checkpoint(path, device=device, pe_options=pe_options, config=config)
    if model.tokenizer is None:
        _attach_saved_tokenizer(model, Path(path), model.metadata)
    return model


def _attach_saved_tokenizer(model, path: Path, config: dict[str, Any]) -> None:
    from probe.corpus import CODE_TASK, CodeTokenizer
    from probe.corpus.prepared import run_tokenizer_json
    from probe.tasks.tokenizer import Tokenizer

    if "tokenizer" in config:
        Tokenizer.from_dict(config["tokenizer"]).attach_to(model)
    elif task_name(config) == CODE_TASK:
        CodeTokenizer.from_json(run_tokenizer_json(path)).attach_to(model)
