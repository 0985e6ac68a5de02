"""`probe sweep`: a grid of `probe train` + `probe eval` runs on Ray (local by default, or a cluster)."""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from probe.commands.common import add_checkpoints, add_json, check_at_least, check_seeds, console, print_json
from probe.commands.shared_training import add_capture
from probe.errors import ProbeError
from probe.presets import PRESETS, listed

if TYPE_CHECKING:
    from probe.studies.sweep import Launch


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="train and evaluate a grid of runs on Ray (resumable; --grid paper for the paper's study)",
        description="Train and evaluate every run of a grid, each as a Ray task calling what `probe train` and "
        "`probe eval` call, into the same run folders. The grid comes from flags (repeatable --task, --pe, --seed, "
        "--scratchpad, -o KEY=VALUE) or --grid FILE.toml / a shipped name (default, smoke, paper); with --grid, "
        "--task/--pe/--seed/--scratchpad pick runs out of the grid and --preset/--steps/... override it. "
        "A rerun skips finished runs and resumes interrupted ones. Without --address a local Ray instance "
        "uses this machine's cores and GPUs.",
    )
    _add_grid_flags(parser.add_argument_group("the grid"))
    _add_ray_flags(parser.add_argument_group("Ray"))
    _add_output_flags(parser.add_argument_group("output"))
    add_checkpoints(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def _add_grid_flags(grid) -> None:
    grid.add_argument("--grid", metavar="NAME|FILE", help="a TOML grid file or a shipped grid name")
    grid.add_argument(
        "--task",
        action="append",
        help="task (repeatable; default: the main job's, its options and recipe under the flags)",
    )
    grid.add_argument("--pe", action="append", help="positional encoding (repeatable; default all)")
    grid.add_argument("--seed", action="append", type=int, help="seed (repeatable; default 0, plus NoPE seed 1)")
    grid.add_argument(
        "--scratchpad", action="append", metavar="FORMAT", help="scratchpad format (repeatable; none for without)"
    )
    grid.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="task option; repeating a key sweeps its values (-o variant=count -o variant=random)",
    )
    grid.add_argument(
        "-m",
        "--model",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model override, e.g. -m n_layers=1 -m d_model=32",
    )
    grid.add_argument("--preset", help=f"model size: {listed(PRESETS)} (default tiny)")
    grid.add_argument("--steps", type=int, help="training steps (default: the preset's recipe)")
    grid.add_argument("--lr", type=float, help="peak learning rate (default: the preset's recipe)")
    grid.add_argument("--batch-size", type=int)
    grid.add_argument("--checkpoint-every", type=int, metavar="N", help="save resumable state every N steps")
    grid.add_argument("--eval-n", type=int, metavar="N", help="test examples per run (default: the whole test split)")
    grid.add_argument("--eval-valid", type=int, metavar="N", help="IID held-out examples per run (default 500)")
    grid.add_argument("--no-eval", action="store_true", help="train only")


def _add_ray_flags(ray_group) -> None:
    ray_group.add_argument(
        "--address", help="join a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: start a local one)"
    )
    ray_group.add_argument(
        "--cpus-per-run",
        type=float,
        default=1.0,
        metavar="N",
        help="CPUs each run asks Ray for (default 1; 0 only with --gpus-per-run)",
    )
    ray_group.add_argument(
        "--gpus-per-run",
        type=float,
        default=0.0,
        metavar="N",
        help="GPUs each run asks for; a fraction shares one GPU (0.25: four runs per GPU). >0 trains on CUDA",
    )
    add_capture(ray_group)
    ray_group.add_argument("--num-cpus", type=int, metavar="N", help="CPUs of the local Ray instance (default: all)")
    ray_group.add_argument(
        "--max-retries", type=int, default=3, help="times Ray restarts a run whose worker died (default 3)"
    )


def _add_output_flags(out) -> None:
    out.add_argument(
        "--dry-run", action="store_true", help="print the runs, how many, and their estimated cost; start nothing"
    )
    out.add_argument("--list", action="store_true", help="with --dry-run: list every run, not one row per task")
    out.add_argument(
        "--tokens-per-second",
        type=float,
        metavar="N",
        help="with --dry-run: price the grid at this training throughput instead of measuring it here",
    )
    out.add_argument(  # default None, so a flag given without --dry-run is seen: MEASURE_STEPS at the dry run
        "--measure-steps", type=int, default=None, metavar="N", help="steps timed per model shape for the estimate"
    )
    out.add_argument(
        "--cluster-size",
        type=int,
        default=None,
        metavar="N",
        help="with --dry-run: also estimate wall time on N such slots",
    )
    out.add_argument(
        "--report", action="store_true", help="print the aggregate of the grid's evaluated runs; start nothing"
    )
    out.add_argument("--out", metavar="DIR", help="where report figures go (default: CHECKPOINTS/sweep-NAME-report)")
    out.add_argument(
        "--name", help="sweep name for the manifest CHECKPOINTS/sweep-NAME.json (default: the grid's name)"
    )


MEASURE_STEPS, CLUSTER_SIZE = 5, 8  # --measure-steps, --cluster-size when not given
DRY_RUN_FLAGS = (
    ("--list", "list"),
    ("--tokens-per-second", "tokens_per_second"),
    ("--measure-steps", "measure_steps"),
    ("--cluster-size", "cluster_size"),
)


def _check_dry_run_flags(args: argparse.Namespace) -> None:
    """The flags that shape a dry run's plan, refused without --dry-run (a sweep would ignore them and start the
    whole grid for real), and their values checked (a zero throughput divided by, a zero step count indexed),
    before anything is read or started."""
    if not args.dry_run:
        for flag, name in DRY_RUN_FLAGS:
            if getattr(args, name) not in (None, False):
                raise ProbeError(
                    f"{flag} shapes a dry run's plan; give --dry-run with it (nothing was started: without "
                    "--dry-run the sweep trains the grid)"
                )
    tokens = args.tokens_per_second
    if tokens is not None and not (tokens > 0 and math.isfinite(tokens)):
        raise ProbeError(f"--tokens-per-second must be a positive number, got {tokens:g}")
    check_at_least(("--measure-steps", args.measure_steps, 1), ("--cluster-size", args.cluster_size, 1))


def _pairs(pairs: list[str], what: str) -> dict[str, list[Any]]:
    import json

    values: dict[str, list[Any]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ProbeError(f"{what} {pair!r} is not KEY=VALUE")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        values.setdefault(key, []).append(parsed)
    return values


def build_grid(args: argparse.Namespace) -> dict[str, Any]:
    from probe.studies.sweep import grid_from_flags, load_grid, with_overrides

    model = {k: v[-1] for k, v in _pairs(args.model, "model override").items()}
    train = {
        "preset": args.preset,
        "steps": args.steps,
        "lr": args.lr,
        "batch_size": args.batch_size,
        "checkpoint_every": args.checkpoint_every,
        "eval_n": args.eval_n,
        "eval_valid": args.eval_valid,
    }
    check_at_least(
        ("--steps", args.steps, 1),
        ("--batch-size", args.batch_size, 1),
        ("--eval-n", args.eval_n, 1),
        ("--eval-valid", args.eval_valid, 0),
    )
    check_seeds(args.seed)  # --lr, --checkpoint-every ...: each run's TrainConfig, as the grid expands
    if not args.grid:
        return grid_from_flags(
            tasks=args.task,
            pes=args.pe,
            seeds=args.seed,
            scratchpads=args.scratchpad,
            options=_pairs(args.option, "option"),
            model=model,
            **train,
        )
    if args.option:
        raise ProbeError("-o/--option cannot be combined with --grid; put task options in the grid file")
    return with_overrides(load_grid(args.grid), train, model)


def run(args: argparse.Namespace) -> int:
    from probe.studies.sweep import (
        dry_run,
        expand_grid,
        pick_runs,
        run_with_progress,
        show_outcome,
        show_report,
    )

    _check_dry_run_flags(args)
    grid = build_grid(args)
    runs = expand_grid(grid, args.checkpoints)
    if args.grid:
        runs = pick_runs(runs, args.grid, tasks=args.task, pes=args.pe, seeds=args.seed, scratchpads=args.scratchpad)
    name = args.name or str(grid.get("name", "sweep"))
    out = console(stderr=args.json)
    launch = _launch(args)
    if args.report:
        summary = show_report(runs, name, launch, out)
        if args.json:
            print_json(summary)
        return 0
    if args.dry_run:
        plan = dry_run(
            runs,
            name,
            launch,
            out,
            tokens_per_second=args.tokens_per_second,
            measure_steps=MEASURE_STEPS if args.measure_steps is None else args.measure_steps,
            cluster_size=CLUSTER_SIZE if args.cluster_size is None else args.cluster_size,
            list_runs=args.list,
        )
        if args.json:
            print_json(plan)
        return 0
    manifest = run_with_progress(runs, name, launch, out)
    outcome = show_outcome(runs, manifest, name, launch, out)
    if args.json:
        print_json(outcome)
    return 1 if any(manifest.entries[r.label]["state"] == "failed" for r in runs) else 0


def _launch(args: argparse.Namespace) -> Launch:
    """How the runs are launched, from the flags, each checked before anything is read or started."""
    from probe.studies.sweep import Launch

    for value, flag in (
        (args.max_retries, "--max-retries"),
        (args.num_cpus, "--num-cpus"),
        (args.cpus_per_run, "--cpus-per-run"),
        (args.gpus_per_run, "--gpus-per-run"),
    ):
        if value is not None and not value >= 0:  # NaN too
            raise ProbeError(f"{flag} must not be negative, got {value:g}")
    if args.capture and not args.gpus_per_run:
        raise ProbeError(
            "CUDA graphs need a GPU: --capture needs --gpus-per-run above 0; pass --no-capture or leave it out"
        )
    if args.num_cpus is not None and args.address not in (None, "", "local"):
        raise ProbeError("--num-cpus sizes a local Ray instance; a cluster joined with --address has its own CPUs")
    if args.num_cpus is not None and args.num_cpus < args.cpus_per_run:
        raise ProbeError(
            f"--num-cpus {args.num_cpus} gives Ray fewer CPUs than one run asks for (--cpus-per-run "
            f"{args.cpus_per_run:g}): no run would ever start"
        )
    if not args.cpus_per_run and not args.gpus_per_run:  # Ray bounds a run by what it asks for: nothing here
        raise ProbeError("--cpus-per-run 0 with no GPU would start every run at once; give each run a CPU share")
    return Launch(
        args.checkpoints,
        evaluate=not args.no_eval,
        cpus_per_run=args.cpus_per_run,
        gpus_per_run=args.gpus_per_run,
        max_retries=args.max_retries,
        address=args.address,
        num_cpus=args.num_cpus,
        report_out=args.out,
        capture=args.capture,
    )
