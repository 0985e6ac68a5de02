"""`probe train`: train a set of runs (default: every PE on SCAN, plus NoPE' = NoPE seed 1)."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_checkpoints,
    add_device,
    add_json,
    add_pe_options,
    add_task_options,
    console,
    parse_options,
    print_json,
)
from probe.errors import ProbeError
from probe.presets import CPU_BF16, RECIPES, listed


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train models (default: every PE + NoPE' on SCAN, preset tiny)",
        description="Train one model per (PE, seed). With no --pe and no --seed: every PE with seed 0 "
        "plus a second NoPE seed (the paper's NoPE' baseline). Finished runs are skipped (if trained with "
        "the same settings; otherwise one line says which differ), interrupted ones resume from their last state.",
    )
    parser.add_argument("--task", default="scan", help="task name (see `probe tasks`; default scan)")
    parser.add_argument(
        "--pe", action="append", help="positional encoding (repeatable; default: the paper's five; see `probe pes`)"
    )
    parser.add_argument("--seed", action="append", type=int, help="seed (repeatable; default 0)")
    parser.add_argument("--preset", default="tiny", help=f"model size: {listed(RECIPES)} (default tiny)")
    add_task_options(parser, "(see `probe tasks`)")
    parser.add_argument(
        "--protocol",
        choices=("probe", "authors"),
        help="authors: their sequences (no <bos>), random batches, T5's dropout sites, eps 1e-6 and the "
        "best checkpoint on IID validation; probe: <bos>, length-grouped batches, the last step "
        "(default: authors with --split paper, else probe)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        metavar="N",
        help="steps between the IID validations that select the "
        "published checkpoint; 0 publishes the last step (default: 20 a run under the authors' protocol, "
        "else 0)",
    )
    parser.add_argument(
        "--pack",
        action="store_true",
        help="pack several examples into each row, attention kept within each: the same scored tokens in "
        "less padding (PEs whose logits read only relative positions, and embedded ones)",
    )
    add_training_options(parser, "examples")
    parser.set_defaults(func=run)


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
        choices=("auto", "float32", "bf16"),
        default="auto",
        help="the forward pass in float32 or under bf16 autocast (default auto: bf16 on a GPU, and on a CPU at "
        f"preset {', '.join(sorted(CPU_BF16))}, where it was measured to train as well and faster)",
    )
    add_pe_options(parser, "(every --pe given must have it; part of the run folder's name)")
    parser.add_argument(
        "--checkpoint-every", type=int, default=500, metavar="N", help="save resumable state every N steps"
    )
    parser.add_argument("--force", action="store_true", help="retrain runs that are already complete")
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
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)


def planned_runs(args: argparse.Namespace) -> list[tuple[str, int]]:
    from probe.models.registry import PAPER_PES, pe_class
    from probe.studies.plans import seed_baseline_blocks

    pes = args.pe or list(PAPER_PES)
    seeds = args.seed or [0]
    for pe in pes:
        pe_class(pe)  # an unknown PE gets its line before any run starts
    blocks = seed_baseline_blocks(seeds) if args.pe is None and args.seed is None else [{"seed": seeds}]
    return [
        (pe, seed)
        for block in blocks
        for pe in dict.fromkeys(block.get("pe", pes))
        for seed in dict.fromkeys(block["seed"])
    ]


def label(path) -> str:
    """``scan/nope/seed0``: a run folder relative to its checkpoints root."""
    return "/".join(path.parts[-3:])


def run(args: argparse.Namespace) -> int:
    from probe.device import resolve_device
    from probe.runs.folders import run_dir
    from probe.training.train_config import TrainConfig

    runs = planned_runs(args)
    device = resolve_device(args.device)
    task_options = parse_options(args.option, args.scratchpad, tasks=[args.task])  # checked before any run
    model = parse_options(args.model, None)
    pe_options = parse_options(args.pe_option, None)
    configs = [
        TrainConfig(
            task=args.task,
            pe=pe,
            seed=seed,
            preset=args.preset,
            task_options=task_options,
            pe_options=pe_options,
            steps=args.steps,
            lr=args.lr,
            batch_size=args.batch_size,
            dropout=args.dropout,
            model=model,
            checkpoint_every=args.checkpoint_every,
            protocol=args.protocol,
            pack=args.pack,
            precision=args.precision,
            eval_every=args.eval_every,
        )
        for pe, seed in runs
    ]
    for config in configs:  # a misspelt model field or PE option gets its line before any run starts
        config.model_config(vocab_size=1)
    paths = [run_dir(args.checkpoints, c.task, c.pe, c.seed, c.task_options, c.pe_options) for c in configs]
    out = console(stderr=args.json)
    results = train_with_progress(configs, paths, device, args, out)

    out.print(
        results_table(
            f"probe train: {args.task}, preset {args.preset} (runs under {args.checkpoints})",
            results,
            ("steps/s", "IID exact match"),
            lambda r: (
                "-" if r.steps_per_second is None else f"{r.steps_per_second:.1f}",
                "-" if r.iid_accuracy is None else f"{100 * r.iid_accuracy:.1f}%",
            ),
        )
    )
    examples = {c.eval_examples for c in configs}
    out.print(
        f"[dim]IID exact match: greedy, on {', '.join(map(str, sorted(examples)))} held-out examples of the "
        "training lengths (`probe eval` scores its own draw, with the test split's seen lengths: its IID "
        "differs a little)[/dim]"
    )
    return report_results(results, args, out)


def results_table(title: str, results: list, columns: tuple[str, str], cells):
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


def train_with_progress(configs: list, paths: list, device, args: argparse.Namespace, out) -> list:
    """Train ``configs`` into ``paths`` (``--jobs`` side by side), one progress bar per run; the
    :class:`~probe.training.bookkeeping.RunResult` or :class:`~probe.training.parallel.RunFailure` of each. Shared by
    `probe train` and `probe pretrain`: ``args`` holds ``jobs``, ``wait`` and ``force``."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from probe.runs.locks import check_free, say_waiting
    from probe.training.bookkeeping import RunResult, check_writable, train_run
    from probe.training.engine import Engine
    from probe.training.parallel import default_jobs, default_stack, train_parallel, train_stacked

    if args.jobs is not None and args.jobs < 1:
        raise ProbeError(f"--jobs must be at least 1, got {args.jobs}")
    stack = default_stack(device.type) if args.stack is None else args.stack
    engine = Engine.for_device(device, compile=args.compile)
    if stack and args.jobs not in (None, 1):
        raise ProbeError("--stack trains its runs in one process; leave out --jobs, or pass --no-stack")
    jobs = 1 if stack else args.jobs or default_jobs(len(configs), device.type)
    for path in paths:
        check_writable(path)
        if not args.wait:
            check_free(path)  # one line before any progress is drawn; train_run takes the lock itself
    columns = (
        TextColumn("{task.description:<26}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]:>7}"),
        TextColumn("{task.fields[speed]:>9} tok/s"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=out, transient=False) as progress:
        bars = {
            str(path): progress.add_task(label(path), total=c.steps, loss="-", speed="-", start=False)
            for c, path in zip(configs, paths)
        }

        tenths = dict.fromkeys(bars.values(), 0)  # a file or pipe gets a line per tenth of a run instead of bars

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

        if stack:
            results = train_stacked(
                list(zip(configs, paths)),
                device,
                engine=engine,
                force=args.force,
                wait=args.wait,
                on_event=on_event,
                on_wait=say_waiting,
            )
        elif jobs > 1:
            results = train_parallel(
                list(zip(configs, paths)),
                str(device),
                jobs=jobs,
                force=args.force,
                wait=args.wait,
                on_event=on_event,
                engine=engine,
            )
        else:
            results = [
                train_run(
                    c,
                    path,
                    device,
                    force=args.force,
                    wait=args.wait,
                    on_wait=lambda holder, p=path: say_waiting(p, holder),
                    on_start=lambda step, total, p=str(path): on_event(p, "start", step, None, None),
                    on_step=lambda step, loss, speed, p=str(path): on_event(p, "step", step, loss, speed),
                    engine=engine,
                )
                for c, path in zip(configs, paths)
            ]
        for result in results:
            bar = bars[str(result.path)]
            status = result.status if isinstance(result, RunResult) else "failed"
            progress.update(
                bar,
                completed=result.config.steps if status != "failed" else None,
                description=f"{progress.tasks[bar].description} ({status})",
            )
    return results


def report_results(results: list, args: argparse.Namespace, out) -> int:
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
