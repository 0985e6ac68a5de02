"""`probe compare A [B ...]`: layerwise min-head distance between runs' attention (Section 5.2, Figure
similarity_per_layer), per length bucket, with NoPE vs NoPE' as the seed baseline."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from probe.commands.common import (
    add_pe_options,
    add_reading_outputs,
    add_task_options,
    check_at_least,
    check_out,
    check_pe_options,
    check_seeds,
    console,
    intervention_of,
    parse_options,
    pe_or_run,
    progress_bar,
    say_skipping,
    task_options,
    write_report,
)
from probe.presets import HF_CONTEXT

if TYPE_CHECKING:
    from rich.table import Table

    from probe.analysis.results import CompareReport, CompareResult


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="layerwise attention distance between runs (NoPE vs T5, ALiBi, ...)",
        description="D^(l)(A, B) = min over head pairs of the mean JSD between their attention rows (Eq. "
        "similarity), per layer and length bucket, on up to --n-per-bucket examples of every bucket "
        "(gold input + output), with 95% bootstrap intervals. A and B are PE names (runs of --task and "
        "--seed under --checkpoints) or run folders; 'probe compare nope' compares NoPE with every "
        "other PE found. Adds A vs A' (another seed of A, NoPE' for NoPE) when that run exists. Writes "
        "JSON, CSV and a plotly figure under --out. Pretrained code models (--task code, -o context=256 ...) "
        "read the last c tokens of held-out files instead, c = 1x and 2x their training context. A model may be "
        "hf:ID or hf:FOLDER (any model TransformerLens loads): read on held-out code of the corpus -o corpus=... "
        f"(default stdlib) with its own tokenizer, at 1x and 2x -o context=T (default: the smaller of A's n_ctx and "
        f"{HF_CONTEXT}); models of "
        "different depth pair each layer of A with B's layer at the same relative depth.",
    )
    parser.add_argument(
        "runs", nargs="+", metavar="PE_OR_RUN", help="A, then the runs (or hf:ID, hf:FOLDER) to compare it with"
    )
    parser.add_argument(
        "--task", help="task of the runs named by PE (default: the main job's; code where a model is hf:)"
    )
    add_task_options(parser)
    parser.add_argument("--seed", type=int, default=0, help="seed of the runs named by PE (default 0)")
    parser.add_argument(
        "--metric",
        default="jsd",
        choices=("jsd", "reference-code"),
        help="jsd: the paper's definition (default); reference-code: the released code's "
        "½(KL(M‖P) + KL(M‖Q)) over the head pairs it visits, B's head index below A's (its A is NoPE: "
        "name NoPE first to visit its pairs)",
    )
    parser.add_argument(
        "--n-per-bucket", type=int, default=10, metavar="N", help="examples per length bucket (default 10)"
    )
    parser.add_argument(
        "--lengths", default="all", choices=("all", "seen", "unseen"), help="which length buckets (default all)"
    )
    add_pe_options(
        parser,
        "applied at inference to the runs whose PE has it, e.g. RoPE scaling: -p scaling=yarn "
        "-p factor=2 (labels and output names say so)",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip A vs A' (another seed of A)")
    parser.add_argument("--detail", action="store_true", help="print every comparison's layer × bucket table")
    add_reading_outputs(parser, "compare", batch_size=16)
    parser.set_defaults(func=run)


def _layer(result, layer: int) -> str:
    """``L2``, or ``L2:1`` where A's layer 2 is compared with B's layer 1 (models of different depth)."""
    other = result.paired[layer]
    return f"L{layer}" if other == layer else f"L{layer}:{other}"


def pairing_note(report: CompareReport) -> str | None:
    """One line per comparison of models of different depth: which layer of B each layer of A met."""
    lines = [
        f"{r.label}: " + ", ".join(f"A's L{layer} with B's L{m}" for layer, m in enumerate(r.paired))
        for r in report.results
        if r.paired != list(range(r.n_layers))
    ]
    if not lines:
        return None
    return "layers paired at the same relative depth, round(l (L_B - 1) / (L_A - 1)):\n" + "\n".join(lines)


def _ci(stats) -> str:
    return f"{float(stats.mean):.4f} [{float(stats.low):.4f}, {float(stats.high):.4f}]"


def summary_table(report: CompareReport) -> Table:
    from rich.table import Table

    first = report.results[0]
    n_buckets = len(first.buckets)
    table = Table(
        title=f"D^(l)({report.a.label}, ·) on {report.task_folder} ({first.metric}): mean over "
        f"{first.overall.n_examples} examples in {n_buckets} length buckets, 95% bootstrap CI"
    )
    table.add_column("compared with")
    for layer in range(first.n_layers):
        table.add_column(f"L{layer}", justify="right")
    table.add_column("average over layers", justify="right")
    for result in report.results:
        stats = result.overall
        style = "dim" if result is report.baseline else None
        table.add_row(
            result.label, *(f"{v:.4f}" for v in stats.per_layer.mean.tolist()), _ci(stats.average), style=style
        )
    return table


def bucket_table(report: CompareReport) -> Table:
    from rich.table import Table

    table = Table(title="average over layers, per length bucket (* = unseen length; v = from the valid split)")
    table.add_column("λ", justify="right")
    table.add_column("n", justify="right")
    for result in report.results:
        table.add_column(result.label, justify="right")
    first = report.results[0]
    for i, bucket in enumerate(first.buckets):
        mark = ("" if bucket.seen else "*") + ("v" if bucket.split == "valid" else "")
        table.add_row(
            f"{bucket.length}{mark}",
            str(bucket.n_examples),
            *(f"{float(r.buckets[i].average.mean):.4f}" for r in report.results),
        )
    return table


def detail_table(result: CompareResult) -> Table:
    from rich.table import Table

    table = Table(title=f"D^(l)({result.a.label}, {result.label}) per layer and length bucket (* = unseen length)")
    table.add_column("λ", justify="right")
    table.add_column("n", justify="right")
    for layer in range(result.n_layers):
        table.add_column(_layer(result, layer), justify="right")
    table.add_column("average [95% CI]", justify="right")
    for stats in [*result.buckets, result.overall]:
        name = "all" if stats.length is None else f"{stats.length}{'' if stats.seen else '*'}"
        table.add_row(
            name,
            str(stats.n_examples),
            *(f"{v:.4f}" for v in stats.per_layer.mean.tolist()),
            _ci(stats.average),
            end_section=stats.length is None or stats is result.buckets[-1],
        )
    return table


def run(args: argparse.Namespace) -> int:
    from probe.analysis import compare_report
    from probe.device import resolve_device
    from probe.figures.terminal import fitted
    from probe.runs.folders import train_command
    from probe.subjects.resolve import home, subjects_task
    from probe.subjects.settings import ReadSettings

    # a bad value is its own line, before any run is looked for
    check_at_least(("--batch-size", args.batch_size, 1), ("--n-per-bucket", args.n_per_bucket, 1))
    check_seeds(args.seed)
    check_pe_options(args.pe_option)
    intervention_of(args)
    args.runs = [pe_or_run(name) for name in args.runs]
    task, options = task_options(subjects_task(args.runs, args.task), args.option, args.scratchpad)
    subjects = _subjects(args, task, options)
    check_out(args, home(subjects[:1], args.checkpoints, options) / "compare", "compare")
    out = console(stderr=args.json)
    with progress_bar(out, "comparing", width=40) as on_progress:
        settings = ReadSettings(
            options=options,
            n_per_bucket=args.n_per_bucket,
            lengths=args.lengths,
            seed=args.seed,
            batch_size=args.batch_size,
            device=resolve_device(args.device),
            dtype=args.dtype,
            intervention=intervention_of(args),
            pe_options=parse_options(args.pe_option, None),
            progress=on_progress,
        )
        report = compare_report(
            subjects[0].run or args.runs[0],  # an hf: model has no run
            [subject.run or name for subject, name in zip(subjects[1:], args.runs[1:])],
            settings,
            root=args.checkpoints,
            task=task,
            metric=args.metric,
            baseline=not args.no_baseline,
            on_broken=say_skipping(out),
        )
    out.print(fitted(summary_table(report), out))
    detailed = args.detail or len(report.comparisons) == 1
    for table in [detail_table(r) for r in report.results] if detailed else [bucket_table(report)]:
        out.print(fitted(table, out))
    note = pairing_note(report)
    if note:
        out.print(note, highlight=False)
    if report.baseline is None and not args.no_baseline and report.seed_baseline:
        a = report.a
        command = train_command(task, options, args.checkpoints, pe=a.pe, seed=1, pe_options=dict(a.pe_options))
        out.print(f"[dim]no other seed of {a.label} found, so no {a.label}' baseline (make one with: {command})[/dim]")
    skipped = sum(r.skipped for r in report.results)
    if skipped:
        out.print(f"[yellow]{skipped} example(s) longer than the models' context were left out[/yellow]")
    write_report(report, args, out)
    return 0


def _subjects(args: argparse.Namespace, task: str, options: dict) -> list:
    """Every model named, resolved once (their runs, config.json read, go on to the report); a run a PE name finds
    under the task folder that is another task's (moved or copied there) is one line, not read as the folder's."""
    from pathlib import Path

    from probe.runs.folders import check_belongs
    from probe.subjects.resolve import resolve_all

    subjects = resolve_all(args.runs, root=args.checkpoints, task=task, seed=args.seed, options=options)
    for name, subject in zip(args.runs, subjects):
        if subject.run is not None and not (Path(name) / "config.json").is_file():  # a PE name, not a folder
            check_belongs(subject.run, task, options)
    return subjects
