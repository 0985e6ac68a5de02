"""`probe positions`: how each model represents position: linear position probes per layer, the
relative-vs-absolute decomposition of every head's logits, attention sinks, and the variance of
attention outputs against position (Section 5's claims, measured as Haviv et al. 2022, Xiao et al.
2023 and Chi et al. 2023 do)."""

from __future__ import annotations

import argparse

from probe.atomic import write_json_and_csv
from probe.commands.common import (
    add_checkpoints,
    add_device,
    add_json,
    add_task_options,
    console,
    parse_options,
    print_json,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "positions",
        help="position probes per layer, relative-vs-absolute heads, attention sinks",
        description="Per model: a ridge read-out of absolute position (and of the distance to <sep>) from the "
        "embedding and from the residual stream after every layer, fitted on half the seen length buckets and "
        "scored on the other half and on unseen lengths (R², mean absolute error, exact accuracy, bootstrap "
        "intervals); for every head, the share of its causal logits' variance explained by the distance i − j, "
        "by the key position j, by both, and the rest (content); per layer, the attention share of the first "
        "token(s) at seen and unseen lengths, and the variance of the attention output against position. "
        "Default: the runs of --task, --seed. Code runs and hf:ID / hf:FOLDER models are read on held-out "
        "code windows at 1x (seen) and 2x (unseen) their context (-o corpus=..., -o context=T as `probe "
        "distances`).",
    )
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR",
        help="run folders or hf:ID, hf:FOLDER (default: the runs of --task, --seed)",
    )
    parser.add_argument("--task", help="task of the runs (default scan)")
    add_task_options(parser)
    parser.add_argument("--pe", action="append", help="only these PEs (repeatable; default every PE found)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the runs, and of the examples (default 0)")
    parser.add_argument(
        "--n-per-bucket",
        type=int,
        default=10,
        metavar="N",
        help="examples per length bucket; windows per context size for code (default 10)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=1e-3,
        help="ridge penalty, a fraction of the mean feature variance (default 1e-3)",
    )
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000)")
    parser.add_argument(
        "--max-positions",
        type=int,
        default=256,
        metavar="N",
        help="positions per sequence the probes read, evenly spaced (default 256)",
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default: positions/ in the runs' task folder, or beside the run folders given)",
    )
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    from probe.errors import ProbeError

    for flag, value, least in (
        ("--batch-size", args.batch_size, 1),
        ("--n-per-bucket", args.n_per_bucket, 1),
        ("--resamples", args.resamples, 1),
        ("--max-positions", args.max_positions, 2),
    ):
        if value < least:
            raise ProbeError(f"{flag} must be at least {least}, got {value}")
    if not args.alpha > 0:
        raise ProbeError(f"--alpha must be positive, got {args.alpha}")


def _write_csv(path, rows: list[dict]) -> object:
    """``rows`` as a CSV file at ``path``, written atomically; the path."""
    import csv
    import io

    from probe.atomic import atomic_write_text

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())
    return path


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from probe.analysis import task_runs
    from probe.analysis.positions import positions_report, positions_rows
    from probe.analysis.subjects import models_home, models_stem
    from probe.corpus import CODE_TASK
    from probe.device import resolve_device
    from probe.errors import ProbeError
    from probe.figures import write_figure
    from probe.figures.positions import head_share_figure, probe_figure, sink_figure, variance_figure
    from probe.models.checkpoint import read_checkpoint_config
    from probe.models.hf import is_external
    from probe.runs.folders import Run, beside

    _check(args)
    device = resolve_device(args.device)
    external = any(is_external(name) for name in args.runs)
    options = None
    if external:
        if args.task not in (None, CODE_TASK):
            raise ProbeError(f"hf: models are read on held-out code (--task {CODE_TASK}), not on task {args.task}")
        options = parse_options(args.option, None)
        names = list(args.runs)
        home = models_home(names, args.checkpoints, options)
    elif args.runs:
        for name in args.runs:
            if not Path(name, "config.json").is_file():
                raise ProbeError(
                    f"{name} is not a run folder (it has no config.json); give run folders, hf:ID or hf:FOLDER"
                )
        runs = [Run(Path(p), read_checkpoint_config(p)) for p in args.runs]
        names, home = [str(r.path) for r in runs], beside(runs)
    else:
        task = args.task or "scan"
        options = parse_options(args.option, args.scratchpad, tasks=[] if task == CODE_TASK else [task])
        runs = task_runs(args.checkpoints, task, options, seed=args.seed, pes=args.pe)
        names, home = [str(r.path) for r in runs], beside(runs)

    out = console(stderr=args.json)
    progress = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out,
        transient=True,
    )
    bar = progress.add_task("positions", total=len(names))

    def on_progress(what: str, done: int, total: int) -> None:
        progress.start()
        progress.update(bar, description=what, completed=done)

    try:
        results = positions_report(
            names,
            n_per_bucket=args.n_per_bucket,
            seed=args.seed,
            alpha=args.alpha,
            n_resamples=args.resamples,
            batch_size=args.batch_size,
            max_probe_positions=args.max_positions,
            device=device,
            options=options if external else None,
            progress=on_progress,
        )
    finally:
        progress.stop()

    table = Table(
        title="How each model represents position (probes: R² / exact accuracy of the best stream; heads "
        "on seen lengths; sink: first-token share of the last layer, seen → unseen)"
    )
    for column in (
        "model",
        "probe held-out",
        "probe unseen",
        "beyond",
        "rel",
        "abs",
        "content",
        "heads r/a/c",
        "sink",
        "uniform",
        "var slope",
    ):
        table.add_column(column, justify="left" if column == "model" else "right")
    data = []
    for r in results:
        summary = r.summary()
        best = summary["best_probe"]
        stream = best.get("heldout", {}).get("stream")
        beyond = next(
            (p for p in r.probes if p["target"] == "position" and p["set"] == "beyond" and p["stream"] == stream), None
        )
        sinks = {s["lengths"]: s for s in r.sinks if s["first"] == 1 and s["layer"] == r.n_layers - 1}
        shares, kinds = summary["shares"], summary["kinds"]
        cell = lambda b: f"{b['r2']:.3f} / {100 * b['accuracy']:.0f}% @{b['stream']}" if b else "–"  # noqa: E731
        table.add_row(
            r.info.label,
            cell(best.get("heldout")),
            cell(best.get("unseen")),
            f"{100 * beyond['accuracy']:.0f}%" if beyond else "–",
            f"{shares['relative']:.2f}",
            f"{shares['absolute']:.2f}",
            f"{shares['content']:.2f}",
            f"{kinds['relative']}/{kinds['absolute']}/{kinds['content']}",
            " → ".join(f"{sinks[k]['share']:.3f}" for k in ("seen", "unseen") if k in sinks),
            " → ".join(f"{sinks[k]['uniform']:.3f}" for k in ("seen", "unseen") if k in sinks),
            f"{r.variance['slope'][-1]:.2f}",
        )
        data.append(r.to_json())
    out.print(table)
    out.print(
        "[dim]stream 0 = embedding, l = after layer l; beyond: exact accuracy on unseen positions past the "
        "largest fitted one; rel/abs/content: mean over heads of the variance shares of f(i − j), g(j) and "
        "1 − R² of f(i − j) + g(j); heads r/a/c: heads whose logits are mostly relative / absolute / content; "
        "var slope: d log Var / d log t of the last layer's attention output[/dim]"
    )

    out_dir = Path(args.out) if args.out else home / "positions"
    stem = "positions" + (f"_{models_stem(names)}" if external else "")
    report = {
        "settings": {
            "n_per_bucket": args.n_per_bucket,
            "seed": args.seed,
            "alpha": args.alpha,
            "resamples": args.resamples,
            "max_positions": args.max_positions,
        },
        "models": data,
    }
    files = [str(p) for p in write_json_and_csv(out_dir, stem, report, positions_rows(results))]
    files.append(str(_write_csv(out_dir / f"{stem}_probes.csv", [row for r in results for row in r.probe_rows()])))
    for suffix, figure in (
        ("probes", probe_figure(data)),
        ("landmark", probe_figure(data, "landmark_distance")),
        ("heads", head_share_figure(data)),
        ("sinks", sink_figure(data)),
        ("variance", variance_figure(data)),
    ):
        files += [str(p) for p in write_figure(figure, out_dir / f"{stem}_{suffix}")]
    out.print("wrote: " + ", ".join(files))
    if args.json:
        print_json({**report, "files": files})
    return 0
