"""`probe eval`: exact-match accuracy per length bucket for trained runs (Figure showcase)."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_checkpoints,
    add_device,
    add_intervention,
    add_json,
    add_pe_options,
    add_task_options,
    check_at_least,
    check_out,
    console,
    intervention_of,
    parse_options,
    print_json,
    say_skipping,
    scoring_line,
    task_options,
)

NOT_CODE = (
    "probe eval scores a task's exact match; code models are read by held-out perplexity: use `probe perplexity` "
    "(or `probe extrapolate`)"
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval",
        help="exact-match accuracy by length bucket (length generalization)",
        description="Greedy exact match per length bucket on held-out IID examples and the test split "
        "(seen and unseen lengths). Writes eval.json and eval.csv into each run folder (under --out instead, "
        "if given), a plotly figure of accuracy against length, and one ranking of the PEs by OOD accuracy.",
    )
    parser.add_argument("runs", nargs="*", metavar="RUN_DIR", help="run folders (default: every run of --task)")
    parser.add_argument("--task", action="append", help="task(s) whose runs to evaluate (default: the main job's)")
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
        help="replace an evaluation on more examples (default: a smaller one goes beside it, eval+n=N.json, N its "
        "examples: --valid's and --n's)",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="when another process is training or evaluating a run folder, wait for it (default: stop)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="write everything here, the run folders only read (no lock taken: shared read-only runs can be "
        "evaluated): each run's eval.json and .csv under DIR/<task folder>/<pe>/seed<k>, the figures in DIR "
        "(default: eval.json and .csv in each run folder, the figures in each task folder)",
    )
    parser.add_argument(
        "--show",
        type=int,
        metavar="N",
        help="print each run's greedy predictions beside the gold for the first N test examples of each length (seen "
        "lengths from the IID examples where the test split has none), "
        "with the answer read from each where the task scores the answer alone (a scratchpad's) and, with a "
        "scratchpad, the first step where the prediction departs from the gold's; in --json's 'shown'",
    )
    parser.add_argument(
        "--wrong",
        action="store_true",
        help="with --show: the first N of each length scored wrong (a length with none shows none)",
    )
    add_intervention(parser)
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from probe.analysis.evaluation import accuracy_figures, pe_ranking
    from probe.device import resolve_device
    from probe.figures.terminal import fitted

    out = console(stderr=args.json)
    _check_flags(args)
    runs, given = _runs(args, out)
    _check_writable(runs, args)
    device = resolve_device(args.device)
    reports = _evaluated(args, runs, given, device, out)
    for report in reports:
        if report.beside_another:
            out.print(
                f"[yellow]{report.label}: its evaluation on more examples is kept; this one ({report.n_examples} "
                f"examples) is in {report.written_to} (--force replaces it)[/yellow]"
            )
    out.print(fitted(_accuracy_table(reports), out))
    if any(report.last for report in reports):
        out.print("[dim]a run selected on IID validation is reported at its best step, its last step beside it[/dim]")
    for table in _bucket_tables(reports):
        out.print(fitted(table, out))
    figures = [
        str(p)
        for p in accuracy_figures(reports, runs, args.out, parse_options(args.pe_option, None), intervention_of(args))
    ]
    ranking = pe_ranking(reports)
    if ranking.scores:
        out.print(fitted(_rank_table(ranking), out))
    guesses = _say_guesses(reports, out)
    out.print("figures: " + ", ".join(figures))
    shown = _show(args, runs, given, device, out) if args.show else None
    if args.json:
        ranked = ranking.to_json() if ranking.scores else None
        payload = {"runs": [r.to_json() for r in reports], "ranking": ranked, "figures": figures, "guess": guesses}
        print_json(payload | ({} if shown is None else {"shown": shown}))
    return 0


def _evaluated(args: argparse.Namespace, runs: list, given: dict, device, out) -> list:
    """Each run's evaluation (:func:`~probe.analysis.evaluation.evaluate_run`), its progress on the status line."""
    from probe.analysis.evaluation import evaluate_run
    from probe.runs.locks import say_waiting
    from probe.subjects.settings import ReadSettings

    reports = []
    with out.status(f"evaluating {len(runs)} run(s)") as status:
        for i, r in enumerate(runs, 1):
            where = f"evaluating {r.label} ({i}/{len(runs)})"
            status.update(where)
            settings = ReadSettings(
                device=device,
                batch_size=args.batch_size,
                pe_options=given[r.path],
                intervention=intervention_of(args),
                progress=scoring_line(status, where),
            )
            reports.append(
                evaluate_run(
                    r,
                    settings,
                    n_test=args.n,
                    n_valid=args.valid,
                    wait=args.wait,
                    on_wait=lambda holder, r=r: say_waiting(r.path, holder),
                    force=args.force,
                    out=args.out,
                )
            )
    return reports


def _check_show(args: argparse.Namespace) -> None:
    """``--show`` and ``--wrong`` checked before any run is read: one line, nothing computed."""
    from probe.analysis.predictions import check_per_length
    from probe.errors import ProbeError

    if args.show is not None:
        check_per_length(args.show)
    if args.wrong and args.show is None:
        raise ProbeError("--wrong picks which predictions --show prints; give --show N with it")


def _check_flags(args: argparse.Namespace) -> None:
    """The flags checked before any run is read: ``--show`` and ``--wrong``, the counts (a batch of 0 or fewer
    examples is no batch: not the default's, nor a traceback), and ``--intervene``."""
    _check_show(args)
    check_at_least(("--batch-size", args.batch_size, 1), ("--valid", args.valid, 0))
    intervention_of(args)


def _show(args: argparse.Namespace, runs, given, device, out) -> dict[str, list[dict]]:
    """Each run's predictions beside the gold (:func:`probe.analysis.predictions.show_predictions`), a table per
    run; returned per run label for the JSON."""
    from probe.analysis.predictions import show_predictions
    from probe.figures.terminal import fitted
    from probe.subjects.settings import ReadSettings

    shown = {}
    for r in runs:
        settings = ReadSettings(
            device=device, batch_size=args.batch_size, pe_options=given[r.path], intervention=intervention_of(args)
        )
        rows = show_predictions(r, settings, per_length=args.show, wrong=args.wrong, n_test=args.n, n_valid=args.valid)
        out.print(fitted(_shown_table(r.label, rows, args.wrong), out))
        shown[r.label] = [row.to_json() for row in rows]
    return shown


def _shown_table(label: str, rows, wrong: bool):
    """One run's shown predictions: length (* unseen), input, gold, prediction, the answers read where the task
    reads them, the first scratchpad step the prediction departs from the gold's at, and the verdict."""
    from rich.table import Table
    from rich.text import Text

    which = "scored wrong" if wrong else "test examples"
    table = Table(title=f"{label}: greedy predictions, the first of each length's {which} (* = unseen length)")
    read = any(row.gold_answer is not None for row in rows)
    steps = any(row.gold_steps is not None for row in rows)
    columns = ["length", "input", "gold", "prediction"] + (["answer read", "gold answer"] if read else [])
    for column in [*columns, *(["first wrong step"] if steps else []), "✓"]:
        table.add_column(column, justify="right" if column == "length" else "left", overflow="fold")
    for row in rows:
        answers = [str(row.answer) if row.answer is not None else "none", str(row.gold_answer)] if read else []
        verdict = "[green]✓[/green]" if row.correct else "[red]✗[/red]"
        texts = [Text(cell) for cell in (row.source, row.target, row.prediction, *answers)]  # brackets are not markup
        step = [_wrong_step(row)] if steps else []
        table.add_row(f"{row.length}{'' if row.seen else '*'}", *texts, *step, verdict)
    if not rows:
        table.caption = "none scored wrong" if wrong else "no test examples"
    return table


def _wrong_step(row) -> str:
    """Where a shown prediction's scratchpad departs from the gold's: ``3 of 12 (R)``, ``none of 12``."""
    if row.wrong_step is None:
        return f"none of {row.gold_steps}"
    return f"{row.wrong_step} of {row.gold_steps}" + (f" ({row.wrong_component})" if row.wrong_component else "")


def _say_guesses(reports, out) -> dict[str, float | None]:
    """Per task folder evaluated, what a constant guess scores on the unseen-length examples it was scored on
    (:func:`probe.analysis.chance.guess_of`), the floor of its OOD: said where it is worth saying (about half on
    parity and LEGO, a tenth on the mod-10 tasks), every one returned for the JSON."""
    from probe.analysis.chance import GUESS_SHOWN, guesses

    floors = guesses(reports)
    for folder, guess in floors.items():
        if guess is not None and guess >= GUESS_SHOWN:
            out.print(
                f"[dim]{folder}: a constant guess (its commonest training answer) scores {_percent(guess)} on these "
                "unseen lengths; an OOD there at or under it is no better than chance[/dim]"
            )
    return floors


def _runs(args: argparse.Namespace, out) -> tuple[list, dict]:
    """The runs to evaluate (the folders given, else every run of the tasks), and per run folder the ``-p``
    options it takes (those its PE has: runs whose PE has none of them are skipped, one dim line each)."""

    from probe.analysis.evaluation import inference_options
    from probe.corpus import CODE_TASK
    from probe.errors import ProbeError
    from probe.models.checkpoint import task_name
    from probe.runs.folders import Run, find_runs, task_folder_name

    if CODE_TASK in (args.task or ()):
        raise ProbeError(f"--task code: {NOT_CODE}")
    if args.runs:
        runs = [Run.of(p) for p in args.runs]
        for r in runs:
            if task_name(r.config) == CODE_TASK:
                raise ProbeError(f"{r.path} is a code model; {NOT_CODE}")
    else:
        named = [task_options(task, args.option, args.scratchpad) for task in args.task or [None]]
        runs = []
        say = say_skipping(out)
        for task, options in named:
            found, broken = find_runs(args.checkpoints, task, options)
            for path, why in broken:
                say(path, why)
            runs += found
        if not runs:
            folders = ", ".join(task_folder_name(t, options) for t, options in named)
            raise ProbeError(f"no runs of {folders} under {args.checkpoints}; train them first with `probe train`")
    taking, skipped = inference_options(runs, parse_options(args.pe_option, None))
    for r, names in skipped:
        out.print(f"[dim]skipping {r.label}: {r.pe} has none of {names}[/dim]")
    return [r for r in runs if r.path in taking], taking


def _check_writable(runs, args: argparse.Namespace) -> None:
    """Without --out, each run folder gets its evaluation and each task folder its figure: one line before any
    work when one cannot be written (a colleague's shared runs), naming --out; with it, --out (a file there, or
    a read-only folder)."""
    from probe.atomic import writable
    from probe.errors import ProbeError
    from probe.runs.folders import beside

    if args.out is not None:
        check_out(args, args.out, "eval")
        return
    by_task: dict[str, list] = {}
    for r in runs:
        by_task.setdefault(r.task_folder, []).append(r)
    folders = [r.path for r in runs] + [beside(members) for members in by_task.values()]
    for folder in folders:
        if not writable(folder):
            raise ProbeError(
                f"{folder} is read-only here, and probe eval writes its results there; nothing was computed: "
                "pass --out DIR to read the runs and write everything under DIR"
            )


def _accuracy_table(reports):
    from rich.table import Table

    selected = any(report.last for report in reports)
    table = Table(title="probe eval: exact match (greedy)")
    columns = ["run", "IID (seen lengths)", "OOD (unseen lengths)"]
    columns += ["step (best IID valid.)", "last step: IID / OOD"] if selected else []
    for column in columns:
        table.add_column(column)
    for report in reports:
        cells = [_percent(report.iid_accuracy), _percent(report.ood_accuracy)]
        if selected:
            last = report.last
            cells += [
                str(report.selected_step if report.selected_step is not None else "last"),
                f"{_percent(last.iid_accuracy)} / {_percent(last.ood_accuracy)} (step {last.step})" if last else "-",
            ]
        table.add_row(report.label, *cells)
    return table


def _bucket_tables(reports) -> list:
    """Per task folder: exact match per length bucket (rows) of each run (columns), with the bucket's
    example count."""
    from rich.table import Table

    by_folder: dict[str, list] = {}
    for report in reports:
        by_folder.setdefault(report.task_folder, []).append(report)
    tables = []
    for folder, members in by_folder.items():
        table = Table(title=f"{folder}: exact match per length (* = unseen length; n: examples of each run)")
        table.add_column("length", justify="right")
        table.add_column("n", justify="right")
        for report in members:
            table.add_column(report.label.removeprefix(f"{folder}/"), justify="right")
        by_length = [{b.length: b for b in r.buckets} for r in members]
        for length in sorted({length for buckets in by_length for length in buckets}):
            present = [buckets[length] for buckets in by_length if length in buckets]
            counts = sorted({b.n for b in present})
            table.add_row(
                f"{length}{'' if present[0].seen else '*'}",
                "/".join(str(n) for n in counts),
                *(_percent(buckets[length].accuracy) if length in buckets else "-" for buckets in by_length),
            )
        tables.append(table)
    return tables


def _rank_table(ranking):
    from rich.table import Table

    from probe.models.registry import PE_LABELS

    table = Table(
        title="PEs ranked by OOD exact match: mean reciprocal rank (the paper's figures; 1 = first every time)",
        caption=ranking.describe(),
    )
    table.add_column("rank", justify="right")
    table.add_column("PE")
    table.add_column("mean reciprocal rank", justify="right")
    for place, (pe, score) in enumerate(ranking.scores.items(), start=1):
        table.add_row(str(place), PE_LABELS.get(pe, pe), f"{score:.2f}")
    return table


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
