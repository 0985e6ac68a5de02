"""A run folder's bookkeeping: train it from nothing or from a kill to published, under its lock
(:func:`train_run`; stacked runs, those that read one batch stream, :func:`train_stacked`); skip it when it
is complete and was trained as asked (:func:`is_complete`,
:func:`probe.training.train_config.settings_differ`), one line when it was trained otherwise."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from probe.errors import ProbeError
from probe.models.checkpoint import CONFIG, read_checkpoint_config
from probe.runs.folders import LAST
from probe.runs.locks import run_lock
from probe.training.loop import METRICS, STATE, Trainer
from probe.training.sources import TrainingSource, training_source
from probe.training.stacked import stack_key, train_stack
from probe.training.steps import Engine
from probe.training.train_config import TrainConfig, settings_differ


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
    """Whether ``path`` holds a published run; a damaged config counts as not here (a plan's question),
    and training the folder stops at it (:func:`published`)."""
    try:
        return published(path)
    except ProbeError:
        return False


def published(path: Path) -> bool:
    """Whether ``path`` holds a published run; a ``config.json`` that cannot be read is a ProbeError naming it,
    never a run to train again over its weights."""
    if not (path / CONFIG).is_file():
        return False
    try:
        config = read_checkpoint_config(path)
    except ProbeError as error:
        raise ProbeError(f"{error}; pass --force to retrain the run there from scratch") from None
    return bool(config.get("training", {}).get("complete"))


TRAIN_THREADS = 1
"""Intra-op threads a run trains with on a CPU, whatever the machine or ``--jobs``: another count rounds the
same sums differently, and Adam turns that rounding into different weights within steps (about 2e-4 relative
after 30). Side-by-side runs, not threads, use the other cores (:mod:`probe.training.parallel`)."""


@contextmanager
def training_threads(device: torch.device) -> Iterator[None]:
    """Train with :data:`TRAIN_THREADS` intra-op threads on a CPU (the count restored after), so a run's
    weights are the same on any machine and at any ``--jobs``."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(TRAIN_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
    engine: Engine | None = None,
) -> RunResult:
    """Train one run to completion (resuming if it can); skip it if already complete.

    The run folder is locked meanwhile (:func:`probe.runs.locks.run_lock`): another process training
    or evaluating it raises :class:`~probe.runs.locks.RunLocked`, or with ``wait`` is waited for.
    """
    (result,) = train_stacked(
        [(config, Path(run_path))],
        device,
        force=force,
        wait=wait,
        engine=engine,
        on_wait=(lambda path, holder: on_wait(holder)) if on_wait else None,
        on_start=(lambda path, step, total: on_start(step, total)) if on_start else None,
        on_step=(lambda path, step, loss, speed: on_step(step, loss, speed)) if on_step else None,
    )
    if isinstance(result, ProbeError):
        raise result
    return result


def train_stacked(
    runs: Sequence[tuple[TrainConfig, Path]],
    device: torch.device,
    *,
    force: bool = False,
    wait: bool = False,
    engine: Engine | None = None,
    on_wait: Callable[[Path, dict], None] | None = None,
    on_start: Callable[[Path, int, int], None] | None = None,
    on_step: Callable[[Path, int, float, float], None] | None = None,
) -> list[RunResult | ProbeError]:
    """Train ``runs`` (one :func:`~probe.training.stacked.stack_key`: a study's PEs at one seed) as one
    program on ``device``, each into its run folder exactly as :func:`train_run` writes it; complete
    ones are skipped. Runs resumed from different steps train in turn, each batch of equal steps
    together. Per run its result, or the ProbeError that stopped it (the others go on); a folder
    trained with other settings, or held by another process without ``wait``, or a state or config it
    cannot be resumed or skipped from, is that run's error before any run starts."""
    if len({stack_key(config) for config, _ in runs}) > 1:
        raise ValueError("stacked runs share a batch stream: one stack_key")
    for config, _ in runs:  # a precision this device has not (tf32 on a CPU): refused before any folder is touched
        config.numerics(device.type)
    engine = engine or Engine()
    results: dict[int, RunResult | ProbeError] = {}
    with ExitStack() as stack:
        todo = []
        for i, (config, path) in enumerate(runs):
            try:
                if _held(stack, config, Path(path), force, wait, on_wait):
                    todo.append(i)
                else:
                    results[i] = _skipped(config, Path(path))
            except ProbeError as error:  # trained otherwise, or another process's: this run only
                results[i] = error
        if todo:
            stack.enter_context(training_threads(device))
            prepared = _prepare_each(runs, todo, device, force, engine, results)
            for step in sorted({trainer.step for trainer, _ in prepared.values()}):
                members = [i for i in prepared if prepared[i][0].step == step]
                for i in members:
                    if on_start:
                        on_start(Path(runs[i][1]), step, runs[i][0].steps)
                outcomes = train_stack(
                    [prepared[i][0] for i in members],
                    [_progress(on_step, Path(runs[i][1])) for i in members],
                )
                for i, outcome in zip(members, outcomes):
                    results[i] = outcome if isinstance(outcome, ProbeError) else _finished(*prepared[i], step, outcome)
    return [results[i] for i in range(len(runs))]


def _held(
    stack: ExitStack,
    config: TrainConfig,
    path: Path,
    force: bool,
    wait: bool,
    on_wait: Callable[[Path, dict], None] | None,
) -> bool:
    """Whether ``path`` is to be trained: if so its lock is taken for ``stack``'s duration; if not
    (complete, and not ``force``), :func:`_skipped` says whether it was trained as asked."""
    if not force and published(path):
        return False
    check_writable(path)
    hold = run_lock(
        path,
        wait=wait,
        command=f"probe train {config.task} {config.pe}",
        on_wait=(lambda holder: on_wait(path, holder)) if on_wait else None,
    )
    stack.enter_context(hold)
    return force or not published(path)  # the holder we waited for may have finished it


def _progress(on_step, path: Path) -> Callable[[int, float, float], None] | None:
    return (lambda step, loss, speed: on_step(path, step, loss, speed)) if on_step else None


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


def _prepare_each(
    runs: Sequence[tuple[TrainConfig, Path]],
    todo: list[int],
    device: torch.device,
    force: bool,
    engine: Engine,
    results: dict[int, RunResult | ProbeError],
) -> dict[int, tuple[Trainer, bool]]:
    """The trainer of each run of ``todo`` (:func:`_prepare`), all reading one source; a run it cannot resume
    (its state damaged, another version's or written with other settings) has that ProbeError in ``results``."""
    first, path = runs[todo[0]]  # one stack: one task, options, seed and protocol
    source = training_source(
        first.task, first.task_options, first.seed, Path(path), authors=first.protocol == "authors"
    )
    prepared = {}
    for i in todo:
        try:
            prepared[i] = _prepare(*runs[i], device, force, engine, source)
        except ProbeError as error:  # this run only: the others train
            results[i] = error
    return prepared


def _prepare(
    config: TrainConfig, run_path: Path, device: torch.device, force: bool, engine: Engine, source: TrainingSource
) -> tuple[Trainer, bool]:
    """The run's trainer, resumed from its state if it has one (``force``: its files removed first)."""
    if force:
        for name in (STATE, METRICS, CONFIG, "model.safetensors", "eval.json"):
            (run_path / name).unlink(missing_ok=True)
        shutil.rmtree(run_path / LAST, ignore_errors=True)
    trainer = Trainer(config, run_path, device, source=source, engine=engine)
    resumed = trainer.load_state()
    trainer.trim_log()
    return trainer, resumed


def _finished(trainer: Trainer, resumed: bool, start_step: int, outcome: tuple[float, float]) -> RunResult | ProbeError:
    """:func:`_finish`, a ProbeError there (a full disk) this run's result: the others are still to publish."""
    try:
        return _finish(trainer, resumed, start_step, *outcome)
    except ProbeError as error:
        return error


def _finish(trainer: Trainer, resumed: bool, start_step: int, loss: float, session: float) -> RunResult:
    """Validate and publish a run whose steps are done."""
    config, device = trainer.config, trainer.device
    seconds = trainer.earlier_seconds + session  # a resumed run counts its earlier sessions too
    held_out = trainer.source.validate(trainer.model, config.eval_examples, device, trainer.forward_precision)
    steps_per_second = (trainer.step - start_step) / session if session > 0 else None  # this session's
    metrics = trainer.publish(
        {
            "final_loss": loss,
            **held_out,
            "train_seconds": seconds,
            "steps_per_second": steps_per_second,
            "forward_precision": trainer.forward_precision,
            "step_engine": trainer.step_engine,
            "probe_versions": trainer.probe_versions(),
        }
    )
    held_out = {k: v for k, v in metrics.items() if k.startswith(("iid_", "heldout_"))}
    return RunResult(
        trainer.path,
        config,
        "resumed" if resumed else "trained",
        trainer.step,
        seconds,
        loss,
        held_out.get("iid_accuracy"),
        steps_per_second,
        held_out,
    )
