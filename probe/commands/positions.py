"""`probe positions`: how each model represents position: linear position probes per layer, the
relative-vs-absolute decomposition of every head's logits, attention sinks, and the variance of
attention outputs against position (Section 5's claims, measured as Haviv et al. 2022, Xiao et al.
2023 and Chi et al. 2023 do)."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_reading_outputs,
    add_task_options,
    check_at_least,
    check_out_beside,
    check_seeds,
    console,
    intervention_of,
    parse_options,
    pe_kinds,
    progress_bar,
    say_skipping,
    task_options,
    write_report,
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
    parser.add_argument("--task", help="task of the runs (default: the main job's)")
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
    add_reading_outputs(parser, "positions", batch_size=32)
    parser.set_defaults(func=run)


def _check(args: argparse.Namespace) -> None:
    from probe.errors import ProbeError

    check_at_least(
        ("--batch-size", args.batch_size, 1),
        ("--n-per-bucket", args.n_per_bucket, 1),
        ("--resamples", args.resamples, 1),
        ("--max-positions", args.max_positions, 2),
    )
    if not args.alpha > 0:
        raise ProbeError(f"--alpha must be positive, got {args.alpha}")
    check_seeds(args.seed)
    intervention_of(args)


def run(args: argparse.Namespace) -> int:
    from probe.analysis.positions import positions_report
    from probe.device import resolve_device
    from probe.figures.terminal import fitted
    from probe.subjects.settings import ReadSettings

    args.pe = pe_kinds(args.pe)
    _check(args)
    names, options = _subjects(args)
    check_out_beside(args, names, options, "positions", "positions")
    out = console(stderr=args.json)
    with progress_bar(out, "positions", width=24) as on_progress:
        settings = ReadSettings(
            options=options or {},
            n_per_bucket=args.n_per_bucket,
            seed=args.seed,
            batch_size=args.batch_size,
            device=resolve_device(args.device),
            dtype=args.dtype,
            intervention=intervention_of(args),
            progress=on_progress,
        )
        report = positions_report(
            names,
            settings,
            alpha=args.alpha,
            n_resamples=args.resamples,
            max_probe_positions=args.max_positions,
            root=args.checkpoints,
        )
    out.print(fitted(_table(report.results), out))
    if any("unseen" in r.entropy and "seen" in r.entropy for r in report.results):
        out.print(fitted(_entropy_table(report.results), out))
    out.print(
        "[dim]stream 0 = embedding, s = after layer s - 1; beyond: exact accuracy on unseen positions past the "
        "largest fitted one; rel/abs/content: mean over heads of the variance shares of f(i − j), g(j) and "
        "1 − R² of f(i − j) + g(j); heads r/a/c: heads whose logits are mostly relative / absolute / content "
        "(+n: n whose logits do not vary); "
        "var slope: d log Var / d log t of the last layer's attention output[/dim]"
    )
    write_report(report, args, out)
    return 0


def _subjects(args: argparse.Namespace) -> tuple[list, dict | None]:
    """The models named (run folders, hf:), else the runs of the task, and the options naming their corpus."""
    from pathlib import Path

    from probe.errors import ProbeError
    from probe.subjects import task_runs
    from probe.subjects.resolve import reads_code, split_hf

    if args.runs:
        code = reads_code(args.runs, args.task)
        for name in split_hf(args.runs)[1]:
            if not Path(name, "config.json").is_file():
                raise ProbeError(
                    f"{name} is not a run folder (it has no config.json); give run folders, hf:ID or hf:FOLDER"
                )
        return list(args.runs), parse_options(args.option, None) if code else None
    task, options = task_options(args.task, args.option, args.scratchpad)
    say = say_skipping(console(stderr=args.json))
    return task_runs(args.checkpoints, task, options, seed=args.seed, pes=args.pe, on_broken=say), options


def _table(results):
    from rich.table import Table

    table = Table(
        title="How each model represents position (probes: R² / exact accuracy of the best stream; heads "
        "on seen lengths; sink: first-token share of the last layer, seen → unseen)"
    )
    for column in COLUMNS:
        table.add_column(column, justify="left" if column == "model" else "right")
    for r in results:
        table.add_row(*_row(r))
    return table


def _entropy_table(results):
    """Attention distraction: mean row entropy at the seen and unseen lengths, against uniform attention's, and
    the head whose entropy grows most."""
    from rich.table import Table

    table = Table(title="Attention entropy (nats, mean over query rows, layers and heads): seen → unseen lengths")
    for column in ("model", "entropy", "uniform", "share of uniform", "most distracted head (growth)"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for r in results:
        seen, unseen = r.entropy.get("seen"), r.entropy.get("unseen")
        if seen is None or unseen is None:
            continue
        growth = r.entropy["growth"]
        layer, head = max(
            ((lay, h) for lay in range(len(growth)) for h in range(len(growth[lay]))), key=lambda c: growth[c[0]][c[1]]
        )
        table.add_row(
            r.info.label,
            f"{seen['mean']:.3f} → {unseen['mean']:.3f}",
            f"{seen['uniform']:.3f} → {unseen['uniform']:.3f}",
            f"{seen['mean'] / seen['uniform']:.2f} → {unseen['mean'] / unseen['uniform']:.2f}",
            f"L{layer}H{head}: {growth[layer][head]:+.3f}",
        )
    return table


COLUMNS = (
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
)


def _row(r) -> list[str]:
    summary = r.summary()
    best = summary["best_probe"]
    stream = best.get("heldout", {}).get("stream")
    beyond = next(
        (p for p in r.probes if p["target"] == "position" and p["set"] == "beyond" and p["stream"] == stream), None
    )
    sinks = {s["lengths"]: s for s in r.sinks if s["first"] == 1 and s["layer"] == r.n_layers - 1}
    shares, kinds = summary["shares"], summary["kinds"]
    heads = f"{kinds['relative']}/{kinds['absolute']}/{kinds['content']}"
    heads += f" +{kinds['constant']}" if kinds["constant"] else ""  # heads whose logits do not vary

    def cell(b) -> str:
        return f"{b['r2']:.3f} / {100 * b['accuracy']:.0f}% @{b['stream']}" if b else "–"

    return [
        r.info.label,
        cell(best.get("heldout")),
        cell(best.get("unseen")),
        f"{100 * beyond['accuracy']:.0f}%" if beyond else "–",
        f"{shares['relative']:.2f}",
        f"{shares['absolute']:.2f}",
        f"{shares['content']:.2f}",
        heads,
        " → ".join(f"{sinks[k]['share']:.3f}" for k in ("seen", "unseen") if k in sinks),
        " → ".join(f"{sinks[k]['uniform']:.3f}" for k in ("seen", "unseen") if k in sinks),
        f"{r.variance['slope'][-1]:.2f}",
    ]
