"""Where runs live: ``<checkpoints>/<task>[+<option>=<value>...]/<pe>/seed<k>/``, and how to find them.

One place decides the layout so that ``probe train``, ``probe eval``, ``probe compare`` and the
explorer agree. A run folder is a checkpoint folder (``config.json`` + ``model.safetensors``)
plus ``metrics.jsonl``, ``eval.json`` and, while training, ``train_state.safetensors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from probe.errors import ProbeError
from probe.models.checkpoint import CONFIG, read_checkpoint_config

DEFAULT_CHECKPOINTS = Path("checkpoints")


def task_folder_name(task: str, options: dict[str, Any] | None = None) -> str:
    """``addition`` or, with options given on the command line, ``addition+scratchpad=full``."""
    given = {k: v for k, v in sorted((options or {}).items()) if v is not None and v != "none"}
    return task + "".join(f"+{k}={v}" for k, v in given.items())


def run_dir(root: str | Path, task: str, pe: str, seed: int, options: dict[str, Any] | None = None) -> Path:
    return Path(root) / task_folder_name(task, options) / pe / f"seed{seed}"


@dataclass(frozen=True)
class Run:
    """A run folder and what its ``config.json`` says about it."""

    path: Path
    config: dict[str, Any]

    @property
    def pe(self) -> str:
        return self.config["pe"]

    @property
    def task(self) -> str:
        return self.config.get("task", {}).get("name", "?")

    @property
    def seed(self) -> int:
        return int(self.config.get("model", {}).get("seed", 0))

    @property
    def complete(self) -> bool:
        return bool(self.config.get("training", {}).get("complete", False))

    @property
    def label(self) -> str:
        return f"{self.path.parent.parent.name}/{self.pe}/seed{self.seed}"


def find_runs(root: str | Path, task: str | None = None, options: dict[str, Any] | None = None) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Every checkpoint under ``root`` (optionally of one task folder), and the broken ones with why."""
    root = Path(root)
    if not root.is_dir():
        return [], []
    base = root / task_folder_name(task, options) if task else root
    runs, broken = [], []
    for config_path in sorted(base.rglob(CONFIG)):
        try:
            runs.append(Run(config_path.parent, read_checkpoint_config(config_path.parent)))
        except ProbeError as error:
            broken.append((config_path.parent, str(error)))
    return runs, broken


def resolve_run(name: str, root: str | Path, task: str, seed: int, options: dict[str, Any] | None = None) -> Path:
    """A PE name (resolved under ``root`` for ``task`` and ``seed``) or a run folder."""
    from probe.models.config import PE_KINDS

    path = Path(name)
    if (path / CONFIG).is_file():
        return path
    if name in PE_KINDS:
        candidate = run_dir(root, task, name, seed, options)
        if (candidate / CONFIG).is_file():
            return candidate
        raise ProbeError(
            f"no {name} checkpoint for task {task_folder_name(task, options)} seed {seed} under {root} "
            f"(make it with: {train_command(task, options, root, pe=name, seed=seed)})"
        )
    raise ProbeError(f"{name!r} is neither a positional encoding ({', '.join(PE_KINDS)}) nor a run folder")


def train_command(task: str, options: dict[str, Any] | None, root: str | Path, pe: str | None = None, seed: int | None = None) -> str:
    """The `probe train` command line that makes the runs described."""
    parts = ["probe train", f"--task {task}"]
    for key, value in sorted((options or {}).items()):
        if value is None or value == "none":
            continue
        parts.append(f"--scratchpad {value}" if key == "scratchpad" else f"-o {key}={value}")
    if pe:
        parts.append(f"--pe {pe}")
    if seed is not None:
        parts.append(f"--seed {seed}")
    if Path(root) != DEFAULT_CHECKPOINTS:
        parts.append(f"--checkpoints {root}")
    return " ".join(parts)
