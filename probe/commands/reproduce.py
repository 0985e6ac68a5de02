"""`probe reproduce`: train, evaluate and analyse a study on the paper's splits; report it beside
the paper's released numbers (HTML with figures, JSON, Markdown)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from typing import Any

from probe.commands.common import add_device, add_json, console, print_json
from probe.commands.shared_training import add_capture
from probe.errors import ProbeError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reproduce",
        help="train + evaluate + analyse a study on the paper's splits; report it beside the paper",
        description="Trains every PE (and NoPE', NoPE at the next seed) on the paper's splits, evaluates them, "
        "computes D(NoPE, ·) per layer and the attended distances, and writes one report (report.html, "
        "report.json, summary.md) with the paper's released numbers beside ours. Resumable: finished runs "
        "are skipped, interrupted ones resume.",
    )
    parser.add_argument(
        "--scale",
        default="reduced",
        choices=["reduced", "section3", "section6", "paper"],
        help="reduced (default): SCAN, copy and reverse at small, on a 2-core CPU; section3: the paper's 17 "
        "Section 3 scenarios at tiny, ranked; section6: scratchpad formats on the math & reasoning tasks at "
        "tiny, its report with the formats ranked per task and per PE, a scratchpad's gain per PE and a line per "
        "claim of the paper's Section 6; paper: the paper's whole grid, preset base",
    )
    parser.add_argument(
        "--task",
        action="append",
        metavar="TASK",
        help="task of the study to run (repeatable; default scan, or the study's first task where it has no SCAN: "
        "section6's addition; 'all' for every task of the study)",
    )
    parser.add_argument("--seeds", type=int, default=1, metavar="N", help="seeds per PE (default 1; the paper: 3)")
    parser.add_argument(
        "--steps", type=int, metavar="N", help="override the study's training steps (a quick look, not the study)"
    )
    parser.add_argument("--checkpoints", metavar="DIR", help="where the runs go (default: checkpoints/reproduce-SCALE)")
    parser.add_argument("--out", metavar="DIR", help="where the report goes (default: CHECKPOINTS/report)")
    parser.add_argument(
        "--summaries",
        metavar="DIR",
        help="where each scenario's summary goes, per seed, as soon as its runs are evaluated; a part whose "
        "summary is there already is not trained again (default: CHECKPOINTS/summaries)",
    )
    parser.add_argument(
        "--jobs", type=int, metavar="N", help="runs trained side by side (default: one per CPU core; 1 on a GPU)"
    )
    parser.add_argument(
        "--stack",
        action=argparse.BooleanOptionalAction,
        help="train the PEs of each seed as one program (default: on a GPU, not on a CPU)",
    )
    add_capture(parser)
    parser.add_argument(
        "--n-per-bucket",
        type=int,
        default=10,
        metavar="N",
        help="examples per length bucket in the attention analyses (default 10, as the paper)",
    )
    parser.add_argument(
        "--address", help="train on a Ray cluster (auto, HOST:PORT or ray://HOST:PORT) instead of locally"
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would run and how long it should take here")
    add_device(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from probe.device import resolve_device
    from probe.studies.reproduce import (
        SUMMARIES,
        chosen_runs,
        default_task,
        ladder,
        pending,
        plan,
        rung_plan,
        train_and_evaluate,
    )
    from probe.studies.reproduce_report import REPORT, markdown, write_report
    from probe.studies.summaries import Landed
    from probe.training.parallel import default_jobs, default_stack
    from probe.training.steps import Engine

    root = Path(args.checkpoints or f"checkpoints/reproduce-{args.scale}")
    tasks = [] if args.task and "all" in args.task else list(args.task or [default_task(args.scale)])
    if args.steps is not None and args.steps < 1:
        raise ProbeError(f"--steps must be at least 1, got {args.steps}")
    summaries = Path(args.summaries) if args.summaries else root / SUMMARIES
    _check_up_front(args, root, summaries, Path(args.out) if args.out else root / REPORT)
    runs = plan(args.scale, root, seeds=args.seeds, tasks=tasks, steps=args.steps)
    device = resolve_device(args.device)
    if args.jobs is not None and args.jobs < 1:
        raise ProbeError(f"--jobs must be at least 1, got {args.jobs}")
    engine = Engine.for_device(device, capture=args.capture)  # --capture on a CPU: one line, before any work
    stack = default_stack(device.type) if args.stack is None else args.stack
    jobs = 1 if stack else args.jobs or default_jobs(len(runs), device.type)
    out = console(stderr=args.json)
    rule = None if args.steps else ladder(args.scale)  # --steps: a quick look at one recipe
    rung = rung_plan(args.scale, root, rule, seeds=args.seeds, tasks=tasks) if rule else None
    landed = Landed(summaries, args.scale, device.type)
    if args.dry_run:
        shown = chosen_runs(runs, rule, rung, landed) if rule else runs  # each scenario at the rung it is at
        return _dry_run(args, shown, pending(runs, rule, rung, landed), root, device, jobs, out)
    on_scenario = partial(_summarise, args.scale, folder=summaries, out=out)
    study = {"rule": rule, "rung": rung, "on_scenario": on_scenario, "landed": landed}
    if args.address:
        train = partial(_train_on_cluster, args.address, root, f"reproduce-{args.scale}", out, args.capture)
        train_and_evaluate(runs, device, train, **study)
    else:
        _train_here(runs, pending(runs, rule, rung, landed), device, jobs, stack, engine, out, study)
    report = _report(args, runs, root, summaries, rule, rung, device, out)
    written = write_report(report, Path(args.out) if args.out else root / REPORT)
    out.print(markdown(report), markup=False, highlight=False)
    out.print("report: " + ", ".join(str(p) for p in written))
    if args.json:
        claims = {"section6_claims": report["section6"]["claims"]} if "section6" in report else {}
        print_json({"report": str(written[0]), "notes": report["notes"], "mrr": report["mrr"], **claims})
    return 0


def _check_up_front(args: argparse.Namespace, root, summaries, report) -> None:
    """What the study reads after hours of training, checked before any (a dry run too): the analyses' examples
    per bucket, and the folders it writes its runs, summaries and report into (a file there, or a read-only one)."""
    from probe.commands.common import check_at_least, folder_problem

    check_at_least(("--n-per-bucket", args.n_per_bucket, 1))
    for flag, folder, what in (
        ("--checkpoints", root, "its runs"),
        ("--summaries", summaries, "each scenario's summary"),
        ("--out", report, "its report"),
    ):
        problem = folder_problem(folder)
        if problem:
            raise ProbeError(
                f"{problem}, and probe reproduce writes {what} there; nothing was trained: choose another {flag}"
            )


def _report(args: argparse.Namespace, runs: list, root, summaries, rule, rung, device, out) -> dict:
    """The study's report: a ranking study's from its summaries, earlier sittings' parts too (Section 6's with its
    own questions beside: the formats ranked, a scratchpad's gain, the claims); another's from its runs, with
    the attention analyses."""
    from probe.studies.reproduce import analyse, chosen_runs, summaries_report
    from probe.studies.reproduce_report import RANKING_ONLY, build_report

    if args.scale in RANKING_ONLY:
        report = summaries_report(runs, summaries, scale=args.scale, seeds=args.seeds, rule=rule)
        if args.scale == "section6":
            from probe.studies.section6 import study_report

            report["section6"] = study_report(summaries, range(args.seeds))
        return report
    with out.status("analysing attention") as status:
        analyses = analyse(runs, root, device, n_per_bucket=args.n_per_bucket, progress=status.update)
    return build_report(chosen_runs(runs, rule, rung) if rule else runs, analyses, scale=args.scale)


def _print_scenarios(out, runs: list, todo: list, priced: dict[str, float]) -> None:
    """One line a scenario: its runs left, its recipe at the rung it trains at next, its share of the price."""
    from probe.studies.sweep import duration

    for folder in dict.fromkeys(r.path.parent.parent.name for r in runs):
        members = [r for r in runs if r.path.parent.parent.name == folder]
        left = [r for r in todo if r.path.parent.parent.name == folder]
        first = (left or members)[0].config
        price = f", about {duration(priced[folder])}" if folder in priced else ""
        out.print(
            f"  {folder}: {len(left)} of {len(members)} runs left, preset {first.preset}, "
            f"{first.steps} steps of {first.batch_size}{price}"
        )


def _say_blocked(out, todo: list) -> list[dict[str, str]]:
    """The runs of ``todo`` whose folder holds another run (trained with other settings, or damaged), each with
    the line training fails it with, said in red: a dry run that counted them as runs left said nothing."""
    from rich.markup import escape

    from probe.studies.sweep import why_blocked

    blocked = [{"path": str(r.path), "why": why} for r in todo if (why := why_blocked(r))]
    if blocked:
        out.print(
            f"[red]{len(blocked)} run folder(s) hold other runs, which a sitting fails (the rest train): move them "
            "aside or choose another --checkpoints[/red]"
        )
        for entry in blocked[:5]:
            out.print(f"  {escape(entry['why'])}")
        if len(blocked) > 5:
            out.print(f"  and {len(blocked) - 5} more (--json lists them)")
    return blocked


def _dry_run(args: argparse.Namespace, runs: list, todo: list, root, device, jobs: int, out) -> int:
    """What the study trains, and about how long it takes here (measured on this machine): a phase's runs (under
    a recipe rule, seed 0 first) as one queue for ``jobs`` workers, scenario by scenario, as
    :func:`~probe.studies.reproduce.train_and_evaluate` trains them."""
    from probe.studies.reproduce import ladder, study_prices
    from probe.studies.summaries import machine
    from probe.studies.sweep import duration, estimate_cost, steps_left
    from probe.training.bookkeeping import TRAIN_THREADS

    threads = TRAIN_THREADS
    rule = None if args.steps else ladder(args.scale)
    with out.status("measuring this machine's training speed") as status:
        cost = estimate_cost(todo, device=str(device), threads=threads, on_measure=status.update)
    evaluation = cost.get("evaluation_seconds")
    priced, wall = study_prices(todo, cost["seconds"], jobs, seed0_first=rule is not None, evaluation=evaluation)
    out.print(f"probe reproduce --scale {args.scale}: {len(runs)} runs ({len(todo)} to train or evaluate) under {root}")
    _print_scenarios(out, runs, todo, priced)
    blocked = _say_blocked(out, todo)
    evaluating = sum(evaluation or []) / jobs
    out.print(
        f"training and evaluation: about {duration(wall)} here ({jobs} side by side, {threads} thread(s) each, "
        f"{cost['source']}; checkpoint selection included, and the evaluation after training, {duration(evaluating)} "
        "of it; a scenario's line is its share: its runs' time over the workers)"
    )
    if rule is not None and len(rule.steps) > 1:
        rungs = f"{', '.join(map(str, rule.steps[1:]))} steps while its median PE stays under {rule.median_iid:.0%} IID"
        if {r.path for r in todo} != {r.path for r in runs}:  # part of it done, landed or climbed
            price = "the price above is what is left, each scenario at the rung it trains at next"
        else:
            climb = rule.steps[-1] / rule.steps[0]
            worst = wall / args.seeds * (1 + args.seeds * climb)  # seed 0 at the first rung, then all at the last
            price = f"the price above is every scenario at {rule.steps[0]} steps, "
            price += f"and at most about {duration(worst)} if all climb"
        out.print(
            f"recipe rule: seed 0 of a scenario trains again at {rungs}, and its other seeds at the rung it stops at; "
            + price
        )
    if args.json:
        print_json(
            {
                "runs": [str(r.path) for r in runs],
                "todo": [
                    {"path": str(r.path), "steps_left": steps_left(r), "seconds": s, "evaluation_seconds": e}
                    for r, s, e in zip(todo, cost["seconds"], evaluation or [0.0] * len(todo))
                ],
                "scenarios": priced,
                "blocked": blocked,
                "estimated_training_seconds": wall,
                "seed0_first": rule is not None,
                "jobs": jobs,
                "threads_per_job": threads,
                "machine": machine(),  # the price measures the CPU it runs on
            }
        )
    return 0


def _train_on_cluster(address: str, root, name: str, out, capture: bool | None, runs: list, finished) -> list:
    """One phase of the study on the Ray cluster at ``address``, resumable through its manifest; its
    scenarios land when the whole phase has trained (``finished`` is not told of runs one by one)."""
    from probe.studies.sweep import Manifest, connect, execute, manifest_path, run_state

    todo = [r for r in runs if run_state(r) != "done"]
    if not todo:
        return []
    connect(address)
    with out.status(f"training {len(todo)} runs on the Ray cluster at {address}"):
        manifest = execute(runs, Manifest(manifest_path(root, name), name, runs), capture=capture)
    failed = [label for label, entry in manifest.entries.items() if entry["state"] == "failed"]
    if failed:
        raise ProbeError(f"{len(failed)} run(s) failed on the cluster (see {manifest.path}); rerun to resume")
    return []


def _summarise(study: str, scenario: str, group: list, tag: str, *, folder, out) -> None:
    """A scenario's summaries at one rung (``tag``) as it lands, and at once a line naming its runs that
    did not finish (their errors are listed again when the study ends)."""
    from probe.analysis.eval_report import read_eval
    from probe.studies.summaries import write_summaries

    for path in write_summaries(study, scenario, group, folder, tag):
        out.print(f"{scenario}{tag}: summary written to {path}")
    unfinished = [r.label for r in group if read_eval(r.path) is None]
    if unfinished:
        out.print(f"[red]{scenario}{tag}: {len(unfinished)} run(s) did not finish: {', '.join(unfinished)}[/red]")


def _tokens_per_step() -> Callable[[Any], float]:
    """A run's training tokens per step (:func:`~probe.studies.sweep.cost.mean_batch_tokens`), read once per
    scenario and seed: its PEs and rungs cut the same batches."""
    from probe.studies.sweep.cost import mean_batch_tokens

    read: dict[tuple[str, int], float] = {}

    def tokens(run: Any) -> float:
        key = (run.path.parent.parent.name, run.config.seed)
        if key not in read:
            read[key] = mean_batch_tokens(run)
        return read[key]

    return tokens


def _train_here(runs: list, todo: list, device, jobs: int, stack: bool, engine, out, study: dict) -> None:
    """Train and evaluate the study here, a phase's runs as one queue, each scenario landing as its runs end
    (``todo``: what is left of it at the rungs known now): ``study`` holds
    :func:`~probe.studies.reproduce.train_and_evaluate`'s recipe rule, rung plan, landed summaries and
    ``on_scenario``. The status names the latest run's step and the sitting's progress."""
    from pathlib import Path

    from probe.studies.progress import SittingProgress
    from probe.studies.reproduce import local_trainer, train_and_evaluate

    how = "the PEs of a seed as one program" if stack else f"{jobs} side by side"
    progress = SittingProgress(todo, tokens_per_step=_tokens_per_step())
    with out.status(f"training {len(todo)} of the study's {len(runs)} runs, {how}") as status:

        def on_event(path, kind, step, loss, speed):
            if kind == "step":
                progress.update(str(path), step)
                run = "/".join(Path(path).parts[-3:])
                of = progress.last_step(str(path))
                status.update(f"{run} step {step}{f'/{of}' if of else ''}, loss {loss:.4f}; {progress.line()}")

        trainer = local_trainer(device, jobs=jobs, stack=stack, engine=engine, on_event=on_event)

        def train(group: list, finished) -> list:
            progress.expect(group)  # a rung the rule climbs to joins the count
            return trainer(group, finished)

        def evaluating(scenario: str) -> None:  # a line of its own: a log's status lines come 30 s apart at most
            out.print(f"{scenario}: evaluating its runs, beside the training", markup=False, highlight=False)

        results = train_and_evaluate(runs, device, train, evaluating=evaluating, **study)
    failed = [r for r in results if getattr(r, "error", None)]
    for failure in failed:
        out.print(f"[red]{failure.path}: {failure.error}[/red]")
    if failed:
        raise ProbeError(f"{len(failed)} run(s) failed; the others are kept; rerun to resume")
