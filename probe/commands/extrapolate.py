"""`probe extrapolate`: each run under each inference-time intervention, against itself untouched."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_checkpoints,
    add_device,
    add_json,
    add_task_options,
    check_at_least,
    check_out_beside,
    check_seeds,
    console,
    elapsed,
    print_json,
    progress_bar,
    read_intervention,
    say_skipping,
    task_options,
    write_report,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    from probe.presets import EXTRAPOLATION_FIXED as FIXED
    from probe.presets import EXTRAPOLATION_TUNED as TUNED

    parser = subparsers.add_parser(
        "extrapolate",
        help="what rescues length generalization: each run under inference-time interventions on attention",
        description="Evaluates runs untouched and under each intervention on their attention, with 95% bootstrap "
        "intervals over examples: task runs by exact match per unseen length of their test split (and on IID "
        "examples, a check that seen lengths are kept), code runs and hf: models by held-out perplexity per "
        f"multiple of their context. Fixed rules ({', '.join(FIXED)}) take the length trained on, L; tuned ones "
        f"({', '.join(TUNED)}) are chosen "
        "on a validation slice of the unseen lengths (held-out files) that the test numbers leave out. Writes "
        "extrapolation.json, .csv, .md and a figure per PE to the task folder's extrapolation/.",
    )
    parser.add_argument(
        "runs", nargs="*", metavar="RUN_DIR", help="run folders or hf:ID, hf:FOLDER (default: every run of --task)"
    )
    parser.add_argument("--task", help="task whose runs to read when none is given (default: the main job's)")
    add_task_options(parser, "of the runs to read (as given to `probe train`)")
    parser.add_argument(
        "--family",
        action="append",
        choices=FIXED + TUNED,
        help="only these interventions (repeatable; default all that apply to each run)",
    )
    parser.add_argument(
        "--intervention",
        action="append",
        default=[],
        metavar="SPEC",
        help="also evaluate this one as given, a fixed rule: e.g. temperature=0.8+window=32+sinks=4, "
        "log-length, cap=40, scaling=yarn+factor=2 (terms joined by +)",
    )
    _add_counts(parser)
    parser.add_argument(
        "--multiples",
        type=float,
        nargs="+",
        default=None,
        metavar="X",
        help="language models: context multiples read (default 0.5 1 1.5 2 2.5)",
    )
    _add_language_model_options(parser)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of the files drawn")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: extrapolation/ in the task folder)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="say what each model will be put through and about how long it takes here, and stop",
    )
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def _add_counts(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--n-valid",
        type=int,
        default=50,
        metavar="N",
        help="validation examples per unseen length at most; language models: held-out files in all (50)",
    )
    parser.add_argument("--n-iid", type=int, default=200, metavar="N", help="IID examples checked (default 200)")


def _add_language_model_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-files", type=int, default=40, metavar="N", help="language models: held-out files read (default 40)"
    )
    parser.add_argument("--corpus", default="stdlib", help="hf: models: the held-out code read (default stdlib)")
    parser.add_argument("--heldout", type=float, default=0.1, help="hf: models: the held-out share (default 0.1)")
    parser.add_argument(
        "--context", type=int, help="hf: models: T, the multiples' unit (default: n_ctx, the context trained at)"
    )


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from probe.device import resolve_device
    from probe.errors import ProbeError
    from probe.extrapolation.extrapolate import estimate, extrapolate, plan
    from probe.extrapolation.plan import FAMILIES, MULTIPLES, Settings
    from probe.extrapolation.report import best_line
    from probe.figures.terminal import fitted

    counts = ("--n-valid", args.n_valid), ("--n-iid", args.n_iid), ("--batch-size", args.batch_size)
    check_at_least(*((flag, value, 1) for flag, value in (*counts, ("--max-files", args.max_files))))
    check_at_least(("--context", args.context, 2))
    check_seeds(args.seed)
    for multiple in args.multiples or ():
        if not multiple > 0:
            raise ProbeError(f"--multiples must each be above 0 (contexts in units of T), got {multiple:g}")
    given = [read_intervention(spec) for spec in args.intervention]
    names = list(args.runs) or _runs(args)
    options = {"corpus": args.corpus, "heldout": args.heldout}
    if args.context is not None:
        options["context"] = args.context
    if not args.dry_run:  # before the plan's timing pass: a dry run writes nothing
        check_out_beside(args, names, options, "extrapolation", "extrapolate")
    out = console(stderr=args.json)
    settings = Settings(
        families=args.family or FAMILIES,
        given=given,
        n_valid=args.n_valid,
        n_iid=args.n_iid,
        multiples=args.multiples or MULTIPLES,
        max_files=args.max_files,
        device=resolve_device(args.device),
        batch_size=args.batch_size,
        seed=args.seed,
        options=options,
    )
    plans = plan(names, settings)
    _say_plan(plans, out)
    with out.status("timing one pass over the first run's test examples"):
        seconds = estimate(names, settings, plans)
    if seconds is not None:
        out.print(f"about {elapsed(seconds)} here (one pass over the first run's test examples, timed now)")
    if args.dry_run:
        if args.json:
            runs = [{"label": p.label, "steps": p.steps, "skipped": p.skipped} for p in plans]
            print_json({"runs": runs, "estimated_seconds": seconds})
        return 0
    with progress_bar(out, "extrapolate") as on_progress:
        report = extrapolate(names, replace(settings, progress=on_progress), root=args.checkpoints)
    out.print(fitted(_table(report), out))
    for run in report.runs:
        out.print(best_line(run, report.higher_is_better), highlight=False)
    for run in report.runs:
        for name, why in run.skipped.items():
            out.print(f"[dim]{run.label}: {name} not applicable ({why})[/dim]")
    write_report(report, args, out)
    return 0


def _say_plan(plans, out) -> None:
    """Before any model loads: each model's steps (models with the same steps on one line), and the total
    the progress line counts down."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for p in plans:
        groups.setdefault(tuple(p.steps), []).append(p.label)
    total = sum(len(p.steps) for p in plans)
    out.print(f"probe extrapolate: {len(plans)} model(s), {total} steps in all:", highlight=False)
    for steps, labels in groups.items():
        out.print(f"  {', '.join(labels)}: {', '.join(steps)}", highlight=False)


def _runs(args: argparse.Namespace) -> list[str]:
    from probe.errors import ProbeError
    from probe.runs.folders import find_runs, task_folder_name

    task, options = task_options(args.task, args.option, args.scratchpad)
    found, broken = find_runs(args.checkpoints, task, options)
    say = say_skipping(console(stderr=args.json))
    for path, why in broken:
        say(path, why)
    runs = [r for r in found if r.complete]
    if not runs:
        raise ProbeError(
            f"no runs of {task_folder_name(task, options)} under {args.checkpoints}; train them with `probe train`"
        )
    return [str(r.path) for r in runs]


def _table(report):
    from rich.table import Table

    from probe.extrapolation.report import dropped_words, format_value, iid_cell, iid_heading, shown

    exact = report.measure == "exact match"
    headline = "OOD exact match" if exact else "perplexity past T"
    table = Table(title=f"probe extrapolate: {headline} under each intervention (95% bootstrap interval)")
    if report.runs:
        table.caption = dropped_words(report.runs[0])
    table.add_column("run")
    table.add_column("kind")
    table.add_column("intervention", overflow="fold")
    table.add_column(iid_heading(report.measure), justify="right")
    table.add_column(headline, justify="right")
    table.add_column("change", justify="right")
    for run in report.runs:
        base = run.baseline.test["mean"]
        for o in run.outcomes:
            change = o.test["mean"] - base
            cells = [run.label, o.kind, shown(o), iid_cell(run, o)]
            cells += [format_value(o.test, report.measure), f"{100 * change:+.1f}" if exact else f"{change:+.2f}"]
            table.add_row(*cells)
        table.add_section()
    return table
