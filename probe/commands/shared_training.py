"""What `probe train` and `probe pretrain` share: their training flags, a progress bar per run while the runs
train, and the table and ``--json`` of the results."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from probe.commands.common import add_checkpoints, add_device, add_json, add_pe_options, bar_columns, print_json
from probe.precision import NAMES as PRECISION_NAMES
from probe.presets import CPU_BF16

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    import torch
    from rich.console import Console
    from rich.table import Table

    from probe.training.bookkeeping import RunResult
    from probe.training.parallel import RunFailure
    from probe.training.train_config import TrainConfig


def add_training_options(parser: argparse.ArgumentParser, unit: str) -> None:
    """The recipe overrides, model and PE options, and how runs are executed: the same flags for
    `probe train` and `probe pretrain` (``unit``: what a batch holds)."""
    parser.add_argument("--steps", type=int, help="training steps (default: the preset's recipe)")
    parser.add_argument("--lr", type=float, help="peak learning rate (default: the preset's recipe)")
    parser.add_argument("--batch-size", type=int, help=f"{unit} per step (default: the preset's recipe)")
    parser.add_argument("--dropout", type=float, help="dropout while training (default: the preset's recipe)")
    parser.add_argument(
        "-m",
        "--model",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model config override, e.g. -m n_layers=4 (fields of probe.ModelConfig)",
    )
    parser.add_argument(
        "--precision",
        choices=("auto", *PRECISION_NAMES),
        default="auto",
        help="the forward pass in float32 or under bf16 autocast, or float32 with a GPU's matrix products in TF32 "
        f"(default auto: bf16 on a GPU, and at preset {', '.join(sorted(CPU_BF16))} on a CPU with bf16 arithmetic "
        "of its own, where it was measured to train as well and faster)",
    )
    add_pe_options(parser, "(every --pe given must have it; part of the run folder's name)")
    parser.add_argument(
        "--checkpoint-every", type=int, default=500, metavar="N", help="save resumable state every N steps"
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="retrain runs that are already complete (each kept until its new run publishes)",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="when another process is training or evaluating a run folder, wait for it (default: stop)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="runs trained side by side, one process each (default: one per CPU core; 1 on a GPU)",
    )
    parser.add_argument(
        "--stack",
        action=argparse.BooleanOptionalAction,
        help="train runs that read the same batches (the PEs of one seed) as one program, each still written "
        "to its own run folder (default: on a GPU, not on a CPU)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="run the forward pass through torch.compile, on one fixed batch shape for the whole run",
    )
    add_capture(parser)
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)


def add_capture(parser: argparse.ArgumentParser) -> None:
    """``--capture/--no-capture``: each training step replayed as a CUDA graph, or eager."""
    parser.add_argument(
        "--capture",
        action=argparse.BooleanOptionalAction,
        help="replay each training step as a CUDA graph (default: on a GPU; a run whose PE or options read "
        "the host every step trains eagerly, saying so); --no-capture trains every step eagerly. The run's "
        "config.json records what ran (metrics.step_engine)",
    )


def label(path: Path) -> str:
    """``scan/nope/seed0``: a run folder relative to its checkpoints root."""
    return "/".join(path.parts[-3:])


def results_table(
    title: str,
    results: Sequence[RunResult | RunFailure],
    columns: tuple[str, str],
    cells: Callable[[RunResult], tuple[str, str]],
) -> Table:
    """One row per run: its folder, status, steps, seconds and final loss, and ``columns`` from
    ``cells(result)`` (a rate and how it validated); failed runs in red."""
    from rich.table import Table

    from probe.training.parallel import RunFailure

    table = Table(title=title)
    names = ("run", "status", "steps", "seconds", columns[0], "final loss", columns[1])
    for column in names:
        table.add_column(
            column, justify="right" if column not in ("run", "status") else "left", no_wrap=column == "run"
        )
    for r in results:
        if isinstance(r, RunFailure):
            table.add_row(label(r.path), "[red]failed[/red]", *["-"] * (len(names) - 2))
            continue
        rate, validation = cells(r)
        table.add_row(
            label(r.path),
            r.status,
            str(r.steps),
            f"{r.seconds:.0f}",
            rate,
            "-" if r.final_loss is None else f"{r.final_loss:.4f}",
            validation,
        )
    return table


def train_with_progress(
    configs: Sequence[TrainConfig], paths: Sequence[Path], device: torch.device, args: argparse.Namespace, out: Console
) -> list[RunResult | RunFailure]:
    """Train ``configs`` into ``paths`` as the device trains best (:func:`probe.training.parallel.train_runs`:
    ``--stack``, ``--jobs``), one progress bar per run (a line per tenth of a run where output is not a
    terminal); the :class:`~probe.training.bookkeeping.RunResult` or
    :class:`~probe.training.parallel.RunFailure` of each."""
    from rich.progress import Progress, TextColumn

    from probe.runs.locks import say_waiting
    from probe.training.bookkeeping import RunResult
    from probe.training.parallel import train_runs

    planned = list(paths)
    done = _finished_read_only(configs, paths, args.force)  # reported as done, not handed to the trainer
    configs, paths = [c for c, p in zip(configs, paths) if p not in done], [p for p in paths if p not in done]
    speeds = (TextColumn("loss {task.fields[loss]:>7}"), TextColumn("{task.fields[speed]:>9} tok/s"))
    columns = bar_columns(26, *speeds)
    with Progress(*columns, console=out, transient=False) as progress:
        bars = {
            str(path): progress.add_task(label(path), total=c.steps, loss="-", speed="-", start=False)
            for c, path in zip(configs, paths)
        }
        on_event = _bar_events(progress, bars, out)
        results = (
            []
            if not configs
            else train_runs(
                list(zip(configs, paths)),
                device,
                stack=args.stack,
                jobs=args.jobs,
                compile=args.compile,
                capture=args.capture,
                force=args.force,
                wait=args.wait,
                on_event=on_event,
                on_wait=say_waiting,
            )
        )
        for result in results:
            bar = bars[str(result.path)]
            status = result.status if isinstance(result, RunResult) else "failed"
            progress.update(
                bar,
                completed=result.config.steps if status != "failed" else None,
                description=f"{progress.tasks[bar].description} ({status})",
            )
    trained = iter(results)  # train_runs answers in the order it was given
    return [done[path] if path in done else next(trained) for path in planned]


def _finished_read_only(configs: list, paths: list, force: bool) -> dict:
    """The finished runs in folders this process cannot write (a colleague's, shared read-only), each as what
    skipping it gives (done, or trained with other settings): reading them takes no lock, and a run there
    is reported like any finished one. ``--force`` wants them retrained: they go to the trainer's error."""
    from probe.atomic import writable
    from probe.errors import ProbeError
    from probe.training.bookkeeping import _skipped, is_complete
    from probe.training.parallel import RunFailure

    done = {}
    for config, path in zip(configs, paths):
        if not force and is_complete(path) and not writable(path):
            try:
                done[path] = _skipped(config, path)
            except ProbeError as error:
                done[path] = RunFailure(path, config, str(error))
    return done


def _bar_events(progress, bars: dict, out):
    """The ``on_event`` of :func:`~probe.training.parallel.train_runs` moving each run's bar."""
    tenths = dict.fromkeys(bars.values(), 0)

    def on_event(path, kind, step, loss, speed):
        bar = bars[path]
        if kind == "start":
            progress.start_task(bar)
            progress.update(bar, completed=step)
            return
        progress.update(bar, completed=step, loss=f"{loss:.4f}", speed=f"{speed:,.0f}")
        task = progress.tasks[bar]
        if not out.is_terminal and 10 * step // task.total > tenths[bar]:
            tenths[bar] = 10 * step // task.total
            left = "" if task.time_remaining is None else f", {task.time_remaining:.0f} s left"
            out.print(
                f"{task.description}: step {step}/{task.total:.0f}, loss {loss:.4f}, {speed:,.0f} tok/s{left}",
                highlight=False,
            )

    return on_event


def report_results(results: Sequence[RunResult | RunFailure], args: argparse.Namespace, out: Console) -> int:
    """Failures in red, ``--json`` on stdout; the exit status (1 if a run failed)."""
    from probe.training.parallel import RunFailure

    failures = [r for r in results if isinstance(r, RunFailure)]
    for failure in failures:
        out.print(f"[red]{failure.path}: {failure.error}[/red]")
    if args.json:
        print_json(
            [
                {"path": str(r.path), "pe": r.config.pe, "seed": r.config.seed, "status": "failed", "error": r.error}
                if isinstance(r, RunFailure)
                else {
                    "path": str(r.path),
                    "pe": r.config.pe,
                    "seed": r.config.seed,
                    "status": r.status,
                    "steps": r.steps,
                    "seconds": r.seconds,
                    "steps_per_second": r.steps_per_second,
                    "final_loss": r.final_loss,
                    "iid_accuracy": r.iid_accuracy,
                    **r.held_out,
                }
                for r in results
            ]
        )
    return 1 if failures else 0
