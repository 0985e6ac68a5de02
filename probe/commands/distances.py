"""`probe distances`: which part of the sequence each PE attends to (Section 6.1, Figure attended_distance)."""

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
from probe.presets import HF_CONTEXT


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "distances",
        help="normalized attended-distance histograms per PE (--paper: the paper's addition + full scratchpad)",
        description="For every output query, the normalized distance d̄ to the key it attends to, pooled over "
        "layers, heads and up to --n-per-bucket examples per length bucket (gold input + output): one "
        "histogram per run on one figure, for the arg-max key (the paper) and attention-weighted, with "
        "Sarle's bimodality coefficient (5/9 = uniform; higher = two modes, near and far). Default: the "
        "runs of --task (the main job's, as `probe train` makes them); --paper: the paper's Figure attended_distance "
        "setting, addition with the full scratchpad (`probe train --task addition --scratchpad full` makes those). "
        "Pretrained code models (--task code): every query of the last c tokens of held-out files, one histogram "
        "per run at c = 1x and 2x the training context. A model may be hf:ID "
        "or hf:FOLDER (any model TransformerLens loads): read on held-out code of -o corpus=... (default stdlib) with "
        f"its own tokenizer, at 1x and 2x -o context=T (default: the smaller of its n_ctx and {HF_CONTEXT}).",
    )
    parser.add_argument(
        "runs", nargs="*", metavar="RUN_DIR", help="run folders or hf:ID, hf:FOLDER (default: --task's)"
    )
    parser.add_argument("--task", help="task of the runs (default: the main job's; code where a model is hf:)")
    add_task_options(parser)
    parser.add_argument(
        "--paper",
        action="store_true",
        help="the paper's figure: the runs of addition with the full "
        "scratchpad (the same as --task addition --scratchpad full)",
    )
    parser.add_argument("--pe", action="append", help="only these PEs (repeatable; default every PE found)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the runs (default 0)")
    _add_reading(parser)
    add_reading_outputs(parser, "distances", batch_size=16)
    parser.set_defaults(func=run)


def _add_reading(parser: argparse.ArgumentParser) -> None:
    """The flags that say what is read and how d̄ is counted."""
    parser.add_argument(
        "--normalization",
        default="text",
        choices=("text", "reference-code"),
        help="text: d̄ = (t − n + 1)/t as the paper writes (default); reference-code: (t − n)/t "
        "as its released notebook computes",
    )
    parser.add_argument(
        "--queries",
        default="output",
        choices=("output", "answer"),
        help="output: every output token's query, a scratchpad's and its answer's, as the paper's text reads "
        "(default); answer: only the answer's, after the scratchpad's end, as the released notebook's figure "
        "counts them (the same without a scratchpad)",
    )
    parser.add_argument(
        "--lengths",
        choices=("all", "seen", "unseen"),
        help="which length buckets (default unseen, as the released notebook); code runs: seen = 1x, "
        "unseen = 2x the training context (default all: both, one histogram each)",
    )
    parser.add_argument(
        "--n-per-bucket", type=int, default=10, metavar="N", help="examples per length bucket (default 10)"
    )
    parser.add_argument("--bins", type=int, default=20, help="histogram bins on [0, 1] (default 20)")


PAPER_TASK, PAPER_SCRATCHPAD = "addition", "full"  # Section 6.1, Figure attended_distance


def _mass(stats, low: float, high: float) -> float:
    """Share of the weight with low <= d̄ < high (exact, from the distribution's support)."""
    inside = (stats.values >= low) & (stats.values < high)
    return float(stats.weights[inside].sum() / stats.weights.sum())


def run(args: argparse.Namespace) -> int:
    from probe.analysis import attended_distance_report
    from probe.device import resolve_device
    from probe.subjects.settings import ReadSettings

    check_at_least(
        ("--batch-size", args.batch_size, 1), ("--n-per-bucket", args.n_per_bucket, 1), ("--bins", args.bins, 1)
    )
    check_seeds(args.seed)
    intervention_of(args)
    args.pe = pe_kinds(args.pe)
    names, options = _subjects(args)
    check_out_beside(args, names, options, "distances", "distances")
    out = console(stderr=args.json)
    with progress_bar(out, "attended distance", width=24) as on_progress:
        settings = ReadSettings(
            options=options,
            n_per_bucket=args.n_per_bucket,
            lengths=args.lengths,
            seed=args.seed,
            batch_size=args.batch_size,
            device=resolve_device(args.device),
            dtype=args.dtype,
            intervention=intervention_of(args),
            progress=on_progress,
        )
        report = attended_distance_report(
            names,
            settings,
            normalization=args.normalization,
            bins=args.bins,
            queries=args.queries,
            root=args.checkpoints,
        )
    out.print(_table(report, args.normalization))
    out.print(
        "[dim]n: examples; bimodality: of the arg-max d̄ (the paper's), weighted: of the attention-weighted "
        "d̄; near: arg-max d̄ < 0.2; far: arg-max d̄ ≥ 0.8; mean d̄: arg-max[/dim]"
    )
    skipped = sum(r.skipped for r in report.results)
    if skipped:
        out.print(f"[yellow]{skipped} example(s) longer than the model's context (n_ctx) were left out[/yellow]")
    write_report(report, args, out)
    return 0


def _subjects(args: argparse.Namespace) -> tuple[list, dict]:
    """The models named (run folders, hf:), else the runs of the task (--paper: the paper's figure's), and
    the options that name their task or corpus."""
    from probe.errors import ProbeError
    from probe.subjects import task_runs
    from probe.subjects.resolve import reads_code

    if args.runs:
        return list(args.runs), parse_options(args.option, None) if reads_code(args.runs, args.task) else {}
    task, scratchpad = args.task, args.scratchpad
    if args.paper:
        if args.task not in (None, PAPER_TASK) or args.scratchpad not in (None, PAPER_SCRATCHPAD):
            raise ProbeError(
                f"--paper is {PAPER_TASK} with the {PAPER_SCRATCHPAD} scratchpad (the paper's figure); "
                "give either --paper or --task/--scratchpad"
            )
        task, scratchpad = PAPER_TASK, PAPER_SCRATCHPAD
    task, options = task_options(task, args.option, None if scratchpad in (None, "none") else scratchpad)
    say = say_skipping(console(stderr=args.json))
    return task_runs(args.checkpoints, task, options, seed=args.seed, pes=args.pe, on_broken=say), options


def _table(report, normalization: str):
    from rich.table import Table

    table = Table(
        title=f"normalized attended distance d̄ on {report.task_folder} ({report.lengths} lengths, "
        f"{report.queries} queries, normalization {normalization}): bimodality > 5/9 ≈ 0.556 reads as two modes"
    )
    for column in ("run", "n", "bimodality", "weighted", "near", "far", "mean d̄"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for result in report.results:
        argmax, weighted = result.stats["argmax"], result.stats["attention"]
        table.add_row(
            result.run.label,
            str(result.n_examples),
            f"{argmax.bimodality:.3f}",
            f"{weighted.bimodality:.3f}",
            f"{100 * _mass(argmax, 0.0, 0.2):.1f}%",
            f"{100 * _mass(argmax, 0.8, 1.01):.1f}%",
            f"{argmax.mean:.3f}",
        )
    return table
