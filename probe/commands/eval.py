"""`probe eval`: exact-match accuracy per length bucket for trained runs (Figure showcase)."""

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


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="exact-match accuracy by length bucket (length generalization)",
        description="Greedy exact match per length bucket on held-out IID examples and the test split "
        "(seen and unseen lengths). Writes eval.json into each run folder, a plotly figure of accuracy "
        "against length, and the mean rank of each PE when several tasks were evaluated.",
    )
    parser.add_argument("runs", nargs="*", metavar="RUN_DIR", help="run folders (default: every run of --task)")
    parser.add_argument("--task", action="append", help="task(s) whose runs to evaluate (default scan)")
    add_task_options(parser, "of the runs to evaluate (as given to `probe train`)")
    add_pe_options(
        parser,
        "applied at inference to every run evaluated, e.g. RoPE scaling: -p scaling=yarn "
        "-p factor=4 -p original_length=50 (results go to eval+<options>.json)",
    )
    parser.add_argument("--n", type=int, help="test examples (default: the whole test split of the task)")
    parser.add_argument("--valid", type=int, default=500, metavar="N", help="IID held-out examples (default 500)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an evaluation on more examples (default: a smaller one goes beside it, eval+n=N.json)",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="when another process is training or evaluating a run folder, wait for it (default: stop)",
    )
    parser.add_argument(
        "--out", metavar="DIR", help="where the figures go (default: each task folder, or beside the run folders given)"
    )
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.table import Table

    from probe.device import resolve_device
    from probe.errors import ProbeError
    from probe.evaluation import eval_file, evaluate_run, mean_ranks, mean_reciprocal_ranks
    from probe.locks import say_waiting
    from probe.models.checkpoint import read_checkpoint_config
    from probe.models.registry import PE_LABELS, options_for, parse_pe_options
    from probe.plots import accuracy_by_length, write_figure
    from probe.runs import Run, beside, find_runs, task_folder_name

    device = resolve_device(args.device)
    out = console(stderr=args.json)
    if args.runs:
        runs = [Run(Path(p), read_checkpoint_config(p)) for p in args.runs]
    else:
        runs = []
        options = parse_options(args.option, args.scratchpad, tasks=args.task or ["scan"])
        for task in args.task or ["scan"]:
            found, broken = find_runs(args.checkpoints, task, options)
            for path, why in broken:
                out.print(f"[yellow]skipping {path}: {why}[/yellow]")
            runs += found
        if not runs:
            tasks = ", ".join(task_folder_name(t, options) for t in args.task or ["scan"])
            raise ProbeError(f"no runs of {tasks} under {args.checkpoints}; train them first with `probe train`")
    given = parse_options(args.pe_option, None)
    if given:  # inference options apply to the runs whose PE has them, as in `probe compare`
        taking = [r for r in runs if options_for(r.pe, given)]
        for r in runs:
            if r not in taking:
                out.print(f"[dim]skipping {r.label}: {r.pe} has none of {', '.join(sorted(given))}[/dim]")
        if not taking:
            raise ProbeError(f"no run here has the option(s) {', '.join(sorted(given))}; see `probe pes`")
        runs = taking
    for r in runs:  # every run must take its options before any is evaluated
        parse_pe_options(r.pe, options_for(r.pe, given))
    reports = []
    with out.status("evaluating") as status:
        for r in runs:
            status.update(f"evaluating {r.label}")
            reports.append(
                evaluate_run(
                    r,
                    n_test=args.n,
                    n_valid=args.valid,
                    device=device,
                    batch_size=args.batch_size,
                    wait=args.wait,
                    on_wait=lambda holder, r=r: say_waiting(r.path, holder),
                    pe_options=options_for(r.pe, given),
                    force=args.force,
                )
            )
    for report in reports:
        if Path(report["written_to"]).name != eval_file(report["pe_options_at_inference"]):
            out.print(
                f"[yellow]{report['label']}: its evaluation on more examples is kept; this one ({report['n_examples']} "
                f"examples) is in {report['written_to']} (--force replaces it)[/yellow]"
            )

    selected = any("last" in report for report in reports)
    table = Table(title="probe eval: exact match (greedy)")
    columns = ["run", "IID (seen lengths)", "OOD (unseen lengths)"]
    columns += ["step (best IID valid.)", "last step: IID / OOD"] if selected else []
    for column in (*columns, "buckets"):
        table.add_column(column)
    for report in reports:
        cells = [_percent(report["iid_accuracy"]), _percent(report["ood_accuracy"])]
        if selected:
            last = report.get("last")
            cells += [
                str(report.get("selected_step", "last")),
                f"{_percent(last['iid_accuracy'])} / {_percent(last['ood_accuracy'])} (step {last['step']})"
                if last
                else "-",
            ]
        table.add_row(
            report["label"],
            *cells,
            " ".join(
                f"{b['length']}:{100 * b['accuracy']:.0f}" + ("" if b["seen"] else "*") for b in report["buckets"]
            ),
        )
    out.print(table)
    selection = "; a run selected on IID validation is reported at its best step, its last step beside it"
    out.print(f"[dim]buckets: length:accuracy%, * = unseen length{selection if selected else ''}[/dim]")

    by_task: dict[str, list[dict]] = {}
    runs_of: dict[str, list] = {}
    for run, report in zip(runs, reports):
        by_task.setdefault(report["task_folder"], []).append(report)
        runs_of.setdefault(report["task_folder"], []).append(run)
    figures = []
    for task_folder, task_reports in by_task.items():
        curves = [
            {
                "label": f"{PE_LABELS.get(r['pe'], r['pe'])} (seed {r['seed']})" + _options(r),
                "pe": r["pe"],
                "dashed": r["seed"] != 0,
                "lengths": [b["length"] for b in r["buckets"]],
                "accuracy": [b["accuracy"] for b in r["buckets"]],
            }
            for r in task_reports
        ]
        seen = [b["length"] for r in task_reports for b in r["buckets"] if b["seen"]]
        figure = accuracy_by_length(
            curves, (min(seen), max(seen)) if seen else None, f"{task_folder}: exact match by length"
        )
        target = Path(args.out) if args.out else beside(runs_of[task_folder])
        figures += [
            str(p)
            for p in write_figure(
                figure, target / eval_file(given).replace("eval", "eval_accuracy", 1).removesuffix(".json")
            )
        ]
    ranks = mean_ranks(reports)
    reciprocal = mean_reciprocal_ranks(reports)
    if ranks:
        rank_table = Table(title="PEs ranked by OOD accuracy, one query per (task, seed)")
        rank_table.add_column("PE")
        rank_table.add_column("mean reciprocal rank\n(the paper's figures; 1 = always first)", justify="right")
        rank_table.add_column("mean rank\n(1 = best; ties share)", justify="right")
        for pe in sorted(ranks, key=lambda pe: -reciprocal.get(pe, 0)):
            rank_table.add_row(
                PE_LABELS.get(pe, pe), f"{reciprocal[pe]:.2f}" if pe in reciprocal else "-", f"{ranks[pe]:.2f}"
            )
        out.print(rank_table)
    out.print("figures: " + ", ".join(figures))
    if args.json:
        print_json({"runs": reports, "mean_rank": ranks, "mean_reciprocal_rank": reciprocal, "figures": figures})
    return 0


def _options(report: dict) -> str:
    """`` [scaling=yarn factor=4]``: the PE options a report applied at inference, for a legend."""
    from probe.models.positional import format_option

    given = report.get("pe_options_at_inference") or {}
    return f" [{' '.join(f'{k}={format_option(v)}' for k, v in sorted(given.items()))}]" if given else ""


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
