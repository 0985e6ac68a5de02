"""A run folder's bookkeeping: train it from nothing or from a kill to published, under its lock
(:func:`train_run`; stacked runs, those that read one batch stream, :func:`train_stacked`); skip it when it
is complete and was trained as asked (:func:`is_complete`,
:func:`probe.training.train_config.settings_differ`), one line when it was trained otherwise or is damaged
(:func:`published`). ``force`` trains a new run beside a finished one (:data:`REPLACEMENT`) and replaces it
only once the new one publishes."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from probe.errors import ProbeError
from probe.models.checkpoint import (
    CONFIG,
    TOKENIZER,
    WEIGHTS,
    check_destinations,
    read_checkpoint_config,
    task_name,
    weights_match,
)
from probe.models.model_config import ModelConfig
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
    """Whether ``path`` holds a published run: a ``config.json`` that says its training completed, describes a
    model probe builds (a known PE, sizes that make one) and a known task, beside a weights file. What holds a
    run but not a whole one is a ProbeError naming what is wrong, never a run to train again over what is there
    nor one to report done: a ``config.json`` that cannot be read, weights with no ``config.json`` beside them
    (and no state a publish killed between the two left), a published config with no weights. The weights'
    hash is checked where a run is skipped as done (:func:`_skipped`), not at every look."""
    path = Path(path)
    config_path, weights = path / CONFIG, path / WEIGHTS
    if not os.path.lexists(config_path):
        if os.path.lexists(weights) and not (path / STATE).is_file():
            raise _damaged(path, f"it has {WEIGHTS} but no {CONFIG}")
        return False
    if not config_path.is_file():
        raise _not_a_file(config_path)
    try:
        config = read_checkpoint_config(path)
    except ProbeError as error:
        raise ProbeError(f"{error}; pass --force to retrain the run there from scratch") from None
    if not config.get("training", {}).get("complete"):
        return False
    try:
        model = ModelConfig.from_dict(config["model"], where=config_path)
    except ProbeError as error:
        raise _damaged(path, str(error)) from None
    if config.get("pe", model.pe) != model.pe:
        raise _damaged(path, f"{config_path} names pe {config['pe']!r} and a model of pe {model.pe!r}")
    task = task_name(config)
    if task is not None and not _known_task(task):
        raise _damaged(path, f"{config_path} names the unknown task {task!r}")
    if os.path.lexists(weights) and not weights.is_file():
        raise _not_a_file(weights)
    if not weights.is_file():
        raise _damaged(path, f"its {CONFIG} is published but it has no {WEIGHTS}")
    return True


def _known_task(name: object) -> bool:
    from probe.corpus import CODE_TASK
    from probe.tasks import TASKS

    return isinstance(name, str) and (name == CODE_TASK or name in TASKS)


def _damaged(path: Path, why: str) -> ProbeError:
    """The line for a run folder that holds part of a run, or a run that does not read."""
    return ProbeError(f"{path} holds a damaged run ({why}); pass --force to replace it with a new one")


def _not_a_file(path: Path) -> ProbeError:
    """The line for a run's file that is there as a folder (or another thing that is not a file): --force
    would not replace it either."""
    what = "a folder" if path.is_dir() else "not a regular file"
    return ProbeError(f"{path} is {what}, not the run's file; move it away, then run the same command again")


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
                    trainer = prepared[i][0]
                    results[i] = (
                        _failed(_run_path(trainer), trainer.path, outcome)
                        if isinstance(outcome, ProbeError)
                        else _finished(*prepared[i], step, outcome)
                    )
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
    (complete, and not ``force``), :func:`_skipped` says whether it was trained as asked. An interrupted
    ``--force`` run of these settings (:data:`REPLACEMENT`) is trained on, to replace the run there; one a kill
    stopped while it replaced the run is finished first."""
    if not _replaced_midway(path) and not force and not _resumes_replacement(config, path) and published(path):
        return False
    check_writable(path)
    hold = run_lock(
        path,
        wait=wait,
        command=f"probe train {config.task} {config.pe}",
        on_wait=(lambda holder: on_wait(path, holder)) if on_wait else None,
    )
    stack.enter_context(hold)
    if _replaced_midway(path):
        _replace(path, path / REPLACEMENT)
    # the holder we waited for may have finished it
    return force or _resumes_replacement(config, path) or not published(path)


def _progress(on_step, path: Path) -> Callable[[int, float, float], None] | None:
    return (lambda step, loss, speed: on_step(path, step, loss, speed)) if on_step else None


def _skipped(config: TrainConfig, run_path: Path) -> RunResult:
    """A finished run is skipped only if it was trained as asked; another recipe in the same folder
    (other steps, another rotary scaling) is one line, never silently someone else's model."""
    stored = read_checkpoint_config(run_path)
    if not weights_match(run_path, stored):  # a run is reported done only with the weights it published
        raise _damaged(run_path, f"its {WEIGHTS} does not match its {CONFIG}: corrupt, or replaced")
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
    """The run's trainer, resumed from its state if it has one. With ``force`` it starts from nothing in
    :data:`REPLACEMENT`: what the folder holds stays as it is until the new run publishes (:func:`_replace`),
    so a flag that does not fit, a first batch longer than the model reads, a loss gone NaN, a Ctrl-C or a
    kill keeps the finished run. Without, an interrupted ``--force`` run of these settings resumes there."""
    check_destinations(run_path, (WEIGHTS, CONFIG, TOKENIZER, STATE, METRICS))  # before a step, not at publish
    staging = run_path / REPLACEMENT
    if force:
        _remove(staging)  # an earlier --force run's, interrupted: --force starts from nothing, as it always has
    where = staging if force or _resumes_replacement(config, run_path) else run_path
    try:
        if where == staging:
            check_writable(staging)
        trainer = Trainer(config, where, device, source=source, engine=engine)
        resumed = trainer.load_state()
        trainer.trim_log()
    except ProbeError as error:
        raise _failed(run_path, where, error) from None
    return trainer, resumed


REPLACEMENT = ".replacement"
"""``<run>/.replacement``: where a ``--force`` run trains (its state, its log) until it publishes over the run
in the folder, which stays whole until then."""

DERIVED = ("eval.json", "eval.csv", "eval+*.json", "eval+*.csv", "attended.json")
"""What commands wrote into a run folder from its model (``probe eval``'s, ``probe distances``'): a run
replaced with ``--force`` takes them with it, never to be read beside the new weights."""


def _resumes_replacement(config: TrainConfig, path: Path) -> bool:
    """Whether ``path`` holds an interrupted ``--force`` run of ``config``'s settings (:data:`REPLACEMENT`'s
    state), to be trained on; a state there that does not read, or of other settings, is passed over."""
    from safetensors import safe_open

    state = Path(path) / REPLACEMENT / STATE
    if not state.is_file():
        return False
    try:
        with safe_open(str(state), "pt") as handle:
            stored = json.loads(handle.metadata()["probe"])["train_config"]
        return not settings_differ(stored, config.to_dict())
    except Exception:  # a damaged state: --force starts over
        return False


def _replaced_midway(path: Path) -> bool:
    """Whether a kill stopped :func:`_replace` part way: :data:`REPLACEMENT` holds a published run (its
    ``config.json``, moved last, still there; its state gone) while the folder holds part of the old one."""
    staging = Path(path) / REPLACEMENT
    if (staging / STATE).is_file() or not (staging / CONFIG).is_file():
        return False
    try:
        return bool(read_checkpoint_config(staging).get("training", {}).get("complete"))
    except ProbeError:
        return False


def _remove(path: Path) -> None:
    """Remove a file or a folder (and what is in it) if there; an OS error is a ProbeError naming it."""
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
    except OSError as error:
        raise ProbeError(f"cannot remove {path}: {error.strerror or error}") from None


def _failed(run_path: Path, where: Path, error: ProbeError) -> ProbeError:
    """A run's error; a ``--force`` run's says that the run it was to replace is kept (and leaves nothing
    behind where it kept no state to resume from)."""
    if where == run_path:
        return error
    if not (where / STATE).is_file():
        try:
            _remove(where)
        except ProbeError:
            pass
    if not (run_path / CONFIG).is_file():
        return error
    return ProbeError(f"{error}; the run already in {run_path} is kept (--force replaces it once a new one publishes)")


def _replace(run_path: Path, staging: Path) -> None:
    """Put the run published in ``staging`` in place of ``run_path``'s: the old run's state, log, last step and
    what was derived from it (:data:`DERIVED`) removed, the new run's files moved in, its ``config.json`` last,
    so the folder reads as a published run only once it holds the new one whole."""
    stale = [run_path / STATE, run_path / LAST]
    stale += [found for pattern in DERIVED for found in sorted(run_path.glob(pattern))]
    for path in stale:
        _remove(path)
    try:
        for entry in sorted(staging.iterdir(), key=lambda entry: entry.name == CONFIG):  # config.json last
            target = run_path / entry.name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(entry, target)
        staging.rmdir()
    except OSError as error:
        raise ProbeError(
            f"cannot move the new run from {staging} into {run_path}: {error.strerror or error}; pass --force to "
            "train it again"
        ) from None


def _finished(trainer: Trainer, resumed: bool, start_step: int, outcome: tuple[float, float]) -> RunResult | ProbeError:
    """:func:`_finish`, a ProbeError there (a full disk) this run's result: the others are still to publish."""
    try:
        return _finish(trainer, resumed, start_step, *outcome)
    except ProbeError as error:
        return _failed(_run_path(trainer), trainer.path, error)


def _run_path(trainer: Trainer) -> Path:
    """The run folder of ``trainer``: its path, or the folder its :data:`REPLACEMENT` is in."""
    return trainer.path.parent if trainer.path.name == REPLACEMENT else trainer.path


def _finish(trainer: Trainer, resumed: bool, start_step: int, loss: float, session: float) -> RunResult:
    """Validate and publish a run whose steps are done (a ``--force`` run: over the run there, :func:`_replace`)."""
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
    run_path = _run_path(trainer)
    if trainer.path != run_path:
        _replace(run_path, trainer.path)
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
