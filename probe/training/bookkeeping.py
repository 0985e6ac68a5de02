"""A run folder's bookkeeping: train it from nothing or from a kill to published, under its lock
(:func:`train_run`); skip it when it is complete and was trained as asked (:func:`is_complete`,
:func:`probe.training.config.settings_differ`), one line when it was trained otherwise."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from probe.errors import ProbeError
from probe.locks import run_lock
from probe.models.checkpoint import CONFIG, read_checkpoint_config
from probe.runs import LAST
from probe.training.config import TrainConfig, settings_differ
from probe.training.loop import METRICS, STATE, Trainer


@dataclass
class RunResult:
    """What became of one run: ``status`` says whether it was trained, resumed or skipped as complete."""

    path: Path
    config: TrainConfig
    status: str  # "trained", "resumed", "skipped"
    steps: int
    seconds: float
    final_loss: float | None
    iid_accuracy: float | None
    steps_per_second: float | None = None
    held_out: dict[str, float] = field(default_factory=dict)  # the source's validation metrics


def check_writable(folder: Path) -> None:
    """Create ``folder`` if needed and make sure files can be written in it (or raise ProbeError)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe_file = folder / ".write-test"
        probe_file.write_text("")
        probe_file.unlink()
    except OSError as error:
        raise ProbeError(
            f"cannot write to {folder}: {error.strerror}; choose another folder with --checkpoints"
        ) from None


def is_complete(path: Path) -> bool:
    """Whether ``path`` holds a published run (a damaged config counts as not: it is trained again)."""
    if not (path / CONFIG).is_file():
        return False
    try:
        return bool(read_checkpoint_config(path).get("training", {}).get("complete"))
    except ProbeError:
        return False


def train_run(
    config: TrainConfig,
    run_path: Path,
    device: torch.device,
    *,
    force: bool = False,
    on_step: Callable[[int, float, float], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    wait: bool = False,
    on_wait: Callable[[dict], None] | None = None,
) -> RunResult:
    """Train one run to completion (resuming if it can); skip it if already complete.

    The run folder is locked meanwhile (:func:`probe.locks.run_lock`): another process training
    or evaluating it raises :class:`~probe.locks.RunLocked`, or with ``wait`` is waited for.
    """
    run_path = Path(run_path)
    if is_complete(run_path) and not force:
        return _skipped(config, run_path)
    check_writable(run_path)
    with run_lock(run_path, wait=wait, command=f"probe train {config.task} {config.pe}", on_wait=on_wait):
        if is_complete(run_path) and not force:  # the holder we waited for finished it
            return _skipped(config, run_path)
        return _train_locked(config, run_path, device, force, on_step, on_start)


def _skipped(config: TrainConfig, run_path: Path) -> RunResult:
    """A finished run is skipped only if it was trained as asked; another recipe in the same folder
    (other steps, another rotary scaling) is one line, never silently someone else's model."""
    stored = read_checkpoint_config(run_path)
    differences = settings_differ(stored.get("training", {}), config.to_dict())
    if differences:
        raise ProbeError(
            f"{run_path} is already trained with other settings ({'; '.join(differences)}); pass --force "
            "to retrain it there, or choose another --checkpoints"
        )
    metrics = stored.get("metrics", {})
    held_out = {k: v for k, v in metrics.items() if k.startswith(("iid_", "heldout_"))}
    return RunResult(
        run_path,
        config,
        "skipped",
        config.steps,
        0.0,
        metrics.get("final_loss"),
        metrics.get("iid_accuracy"),
        None,
        held_out,
    )


def _train_locked(
    config: TrainConfig,
    run_path: Path,
    device: torch.device,
    force: bool,
    on_step: Callable[[int, float, float], None] | None,
    on_start: Callable[[int, int], None] | None,
) -> RunResult:
    if force:
        for name in (STATE, METRICS, CONFIG, "model.safetensors", "eval.json"):
            (run_path / name).unlink(missing_ok=True)
        shutil.rmtree(run_path / LAST, ignore_errors=True)
    trainer = Trainer(config, run_path, device)
    resumed = trainer.load_state()
    trainer.trim_log()
    if on_start:
        on_start(trainer.step, config.steps)
    start_step = trainer.step
    loss, session = trainer.train(on_step)
    seconds = trainer.earlier_seconds + session  # a resumed run counts its earlier sessions too
    held_out = trainer.source.validate(trainer.model, config.eval_examples, device)
    steps_per_second = (trainer.step - start_step) / session if session > 0 else None  # this session's
    metrics = trainer.publish(
        {
            "final_loss": loss,
            **held_out,
            "train_seconds": seconds,
            "steps_per_second": steps_per_second,
            "forward_precision": trainer.forward_precision,
        }
    )
    held_out = {k: v for k, v in metrics.items() if k.startswith(("iid_", "heldout_"))}
    return RunResult(
        run_path,
        config,
        "resumed" if resumed else "trained",
        trainer.step,
        seconds,
        loss,
        held_out.get("iid_accuracy"),
        steps_per_second,
        held_out,
    )
