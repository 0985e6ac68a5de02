"""`probe train`: train a set of runs (default: every PE on SCAN, plus NoPE' = NoPE seed 1)."""

from __future__ import annotations

import argparse

from probe.commands.common import add_checkpoints, add_device, add_json, console, print_json
from probe.errors import ProbeError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train models (default: every PE + NoPE' on SCAN, preset tiny)",
        description="Train one model per (PE, seed). With no --pe and no --seed: every PE with seed 0 "
        "plus a second NoPE seed (the paper's NoPE' baseline). Finished runs are skipped, interrupted "
        "ones resume from their last state.",
    )
    parser.add_argument("--task", default="scan", help="task name (see `probe tasks`; default scan)")
    parser.add_argument("--pe", action="append", help="positional encoding (repeatable; default all)")
    parser.add_argument("--seed", action="append", type=int, help="seed (repeatable; default 0)")
    parser.add_argument("--preset", default="tiny", help="model size: tiny, small or base (default tiny)")
    parser.add_argument("--steps", type=int, help="training steps (default: the preset's recipe)")
    parser.add_argument("--lr", type=float, help="peak learning rate (default: the preset's recipe)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--scratchpad", metavar="FORMAT", help="scratchpad format (see `probe tasks`)")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                        help="task option, e.g. -o variant=count -o train_length=8 (see `probe tasks`)")
    parser.add_argument("--checkpoint-every", type=int, default=500, metavar="N", help="save resumable state every N steps")
    parser.add_argument("--force", action="store_true", help="retrain runs that are already complete")
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def planned_runs(args: argparse.Namespace) -> list[tuple[str, int]]:
    from probe.models.config import PE_KINDS

    pes = args.pe or list(PE_KINDS)
    seeds = args.seed or [0]
    unknown = [pe for pe in pes if pe not in PE_KINDS]
    if unknown:
        raise ProbeError(f"unknown positional encoding {unknown[0]!r}; choose from {', '.join(PE_KINDS)}")
    runs = [(pe, seed) for pe in dict.fromkeys(pes) for seed in dict.fromkeys(seeds)]
    if args.pe is None and args.seed is None:
        runs.append(("nope", 1))  # NoPE': the seed baseline of Figure similarity_per_layer
    return runs


def run(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
    from rich.table import Table

    import torch

    from probe.commands.tasks import parse_options
    from probe.runs import run_dir
    from probe.tasks import get as get_task
    from probe.train import TrainConfig, resolve_device, train_run

    runs = planned_runs(args)
    device = resolve_device(args.device)
    task_options = parse_options(args.option, args.scratchpad)
    get_task(args.task, **task_options)  # validate before any run
    if args.batch_size < 1:
        raise ProbeError(f"--batch-size must be positive, got {args.batch_size}")
    configs = [TrainConfig(task=args.task, pe=pe, seed=seed, preset=args.preset, task_options=task_options,
                           steps=args.steps, lr=args.lr, batch_size=args.batch_size,
                           checkpoint_every=args.checkpoint_every) for pe, seed in runs]
    if device.type == "cpu":
        torch.set_num_threads(max(1, torch.get_num_threads()))
    out = console(stderr=args.json)
    results = []
    columns = (TextColumn("{task.description:<24}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:>7}"), TextColumn("{task.fields[speed]:>9} tok/s"),
               TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns, console=out, transient=False) as progress:
        for config in configs:
            path = run_dir(args.checkpoints, config.task, config.pe, config.seed, config.task_options)
            label = f"{path.parent.parent.name}/{config.pe}/seed{config.seed}"
            bar = progress.add_task(label, total=config.steps, loss="-", speed="-")

            def on_start(step, total, bar=bar):
                progress.update(bar, completed=step)

            def on_step(step, loss, tokens_per_s, bar=bar):
                progress.update(bar, completed=step, loss=f"{loss:.4f}", speed=f"{tokens_per_s:,.0f}")

            result = train_run(config, path, device, force=args.force, on_step=on_step, on_start=on_start)
            progress.update(bar, completed=config.steps, description=f"{label} ({result.status})")
            results.append(result)

    table = Table(title=f"probe train: {args.task}, preset {args.preset}")
    for column in ("run", "status", "steps", "seconds", "steps/s", "final loss", "IID exact match"):
        table.add_column(column, justify="right" if column not in ("run", "status") else "left")
    for r in results:
        table.add_row(str(r.path), r.status, str(r.steps), f"{r.seconds:.0f}",
                      "-" if r.steps_per_second is None else f"{r.steps_per_second:.1f}",
                      "-" if r.final_loss is None else f"{r.final_loss:.4f}",
                      "-" if r.iid_accuracy is None else f"{100 * r.iid_accuracy:.1f}%")
    out.print(table)
    if args.json:
        print_json([{"path": str(r.path), "pe": r.config.pe, "seed": r.config.seed, "status": r.status,
                     "steps": r.steps, "seconds": r.seconds, "steps_per_second": r.steps_per_second,
                     "final_loss": r.final_loss, "iid_accuracy": r.iid_accuracy} for r in results])
    return 0
