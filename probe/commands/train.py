"""`probe train`: train a set of runs (default: the main job, every PE plus NoPE' = NoPE seed 1)."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_task_options,
    check_seeds,
    console,
    parse_options,
    pe_kinds,
    scoring_line,
)
from probe.commands.shared_training import add_training_options, report_results, results_table, train_with_progress
from probe.presets import RECIPES, listed


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train models (default: the main job, every PE + NoPE' on copy, preset tiny)",
        description="Train one model per (PE, seed). With no --task: the main job (copy, the authors' split "
        "and count variant, preset tiny, 1,500 packed steps: the PEs' length generalization apart in minutes). "
        "With no --pe and no --seed: every PE with seed 0 "
        "plus a second NoPE seed (the paper's NoPE' baseline). Finished runs are skipped (if trained with "
        "the same settings; otherwise one line says which differ), interrupted ones resume from their last state.",
    )
    parser.add_argument(
        "--task",
        help="task name (see `probe tasks`; default: the main job's, copy with -o split=paper -o variant=count)",
    )
    parser.add_argument(
        "--pe", action="append", help="positional encoding (repeatable; default: the paper's five; see `probe pes`)"
    )
    parser.add_argument("--seed", action="append", type=int, help="seed (repeatable; default 0)")
    parser.add_argument("--preset", help=f"model size: {listed(RECIPES)} (default tiny)")
    add_task_options(parser, "(see `probe tasks`)")
    parser.add_argument(
        "--protocol",
        choices=("probe", "authors"),
        help="authors: their sequences (no <bos>), random batches, T5's dropout sites, eps 1e-6 and the "
        "best checkpoint on IID validation; probe: <bos>, length-grouped batches, the last step "
        "(default: authors with --split paper, else probe)",
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        metavar="N",
        help="steps between the IID validations that select the "
        "published checkpoint; 0 publishes the last step (default: 20 a run under the authors' protocol, "
        "else 0)",
    )
    parser.add_argument(
        "--pack",
        action=argparse.BooleanOptionalAction,
        help="pack several examples into each row, attention kept within each: the same scored tokens in "
        "less padding (PEs whose logits read only relative positions, and embedded ones; default: the main "
        "job packs, other tasks do not)",
    )
    parser.add_argument(
        "--no-eval",
        action="store_true",
        help="skip scoring the trained runs on the test split (seen and unseen lengths) at the end",
    )
    add_training_options(parser, "examples")
    parser.set_defaults(func=run)


def planned_runs(args: argparse.Namespace) -> list[tuple[str, int]]:
    from probe.models.registry import PAPER_PES, pe_class
    from probe.studies.plans import seed_baseline_blocks

    args.pe = pe_kinds(args.pe)  # `--pe Rotary`, the label tables print, is rotary
    pes = args.pe or list(PAPER_PES)
    check_seeds(args.seed)  # a seed names its run folder: seed-1 is none
    seeds = args.seed or [0]
    for pe in pes:
        pe_class(pe)  # an unknown PE gets its line before any run starts
    blocks = seed_baseline_blocks(seeds) if args.pe is None and args.seed is None else [{"seed": seeds}]
    return [
        (pe, seed)
        for block in blocks
        for pe in dict.fromkeys(block.get("pe", pes))
        for seed in dict.fromkeys(block["seed"])
    ]


def run(args: argparse.Namespace) -> int:
    from probe.device import resolve_device
    from probe.runs.folders import run_dir
    from probe.training.train_config import TrainConfig

    runs = planned_runs(args)
    device = resolve_device(args.device)
    job = _job(args)
    model = parse_options(args.model, None)
    pe_options = parse_options(args.pe_option, None)
    configs = [
        TrainConfig(
            task=job["task"],
            pe=pe,
            seed=seed,
            preset=job["preset"],
            task_options=job["options"],
            pe_options=pe_options,
            steps=job["steps"],
            lr=args.lr,
            batch_size=args.batch_size,
            dropout=args.dropout,
            model=model,
            checkpoint_every=args.checkpoint_every,
            protocol=args.protocol,
            pack=job["pack"],
            precision=args.precision,
            eval_every=args.eval_every,
        )
        for pe, seed in runs
    ]
    for config in configs:  # a misspelt model field, a PE option or a precision the device has not: a line first
        config.model_config(vocab_size=1)
        config.numerics(device.type)
    paths = [run_dir(args.checkpoints, c.task, c.pe, c.seed, c.task_options, c.pe_options) for c in configs]
    out = console(stderr=args.json)
    results = train_with_progress(configs, paths, device, args, out)
    folder = paths[0].parent.parent.name
    out.print(
        results_table(
            f"probe train: {folder}, preset {job['preset']} (runs under {args.checkpoints})",
            results,
            ("steps/s", "IID exact match"),
            lambda r: (
                "-" if r.steps_per_second is None else f"{r.steps_per_second:.1f}",
                "-" if r.iid_accuracy is None else f"{100 * r.iid_accuracy:.1f}%",
            ),
        )
    )
    examples = {c.eval_examples for c in configs}
    out.print(
        f"[dim]IID exact match: greedy, on {', '.join(map(str, sorted(examples)))} held-out examples of the "
        "training lengths (`probe eval` scores its own draw, with the test split's seen lengths: its IID "
        "differs a little)[/dim]"
    )
    if not args.no_eval:
        _length_generalization(results, device, out)
    _next_steps(job, args, configs, out)
    return report_results(results, args, out)


def _job(args: argparse.Namespace) -> dict:
    """Task, options, preset, steps and packing of the runs asked for: the main job's where no --task is given
    (:data:`probe.presets.MAIN_JOB`), flags over it; else the task's with the preset's recipe."""
    from probe.presets import MAIN_JOB, main_task
    from probe.tasks import resolved_options

    task, options = main_task(args.task, parse_options(args.option, args.scratchpad))
    options = resolved_options(task, options)  # an unknown option or value gets its line before any run starts
    main = args.task is None
    return {
        "task": task,
        "options": options,
        "preset": args.preset or (MAIN_JOB["preset"] if main else "tiny"),
        "steps": args.steps if args.steps is not None else MAIN_JOB["steps"] if main and args.preset is None else None,
        "pack": args.pack if args.pack is not None else main and MAIN_JOB["pack"],
    }


def _length_generalization(results: list, device, out) -> None:
    """Score every trained run on the test split and print exact match on seen and unseen lengths, the number
    the paper is about, beside IID (``eval.json`` per run, as `probe eval` writes it)."""
    from rich.table import Table

    from probe.analysis.eval_report import read_eval
    from probe.analysis.evaluation import evaluate_run
    from probe.atomic import writable
    from probe.models.checkpoint import read_checkpoint_config
    from probe.runs.folders import Run
    from probe.subjects.settings import ReadSettings
    from probe.training.parallel import RunFailure

    trained = [r for r in results if not isinstance(r, RunFailure)]
    if not trained:
        return
    table = Table(title="exact match on the test split: seen lengths and unseen (longer) ones")
    for column in ("run", "seen lengths (IID)", "unseen lengths (OOD)"):
        table.add_column(column, justify="left" if column == "run" else "right")
    with out.status("scoring the runs on seen and unseen lengths") as status:
        for r in trained:
            what = f"scoring {'/'.join(r.path.parts[-2:])} on seen and unseen lengths"
            status.update(what)
            report = read_eval(r.path) if r.status == "skipped" else None  # a finished run's own evaluation
            if report is None:  # written where the run can be written; a read-only run is read, not locked
                run = Run(r.path, read_checkpoint_config(r.path))
                settings = ReadSettings(device=device, progress=scoring_line(status, what))
                report = evaluate_run(run, settings, wait=True, write=writable(r.path))
            ood = "-" if report.ood_accuracy is None else f"{100 * report.ood_accuracy:.1f}%"
            table.add_row("/".join(r.path.parts[-2:]), f"{100 * report.iid_accuracy:.1f}%", ood)
    out.print(table)


def _next_steps(job: dict, args: argparse.Namespace, configs: list, out) -> None:
    """What to run next, and what it shows; the comparison names two of the PEs just trained (NoPE and T5's
    bias where both are; one alone: it and every other PE found), at their seed."""
    from probe.models.registry import pe_folder_name

    where = "" if args.checkpoints == "checkpoints" else f" --checkpoints {args.checkpoints}"
    task = (
        ""
        if args.task is None
        else f" --task {job['task']}" + "".join(f" -o {k}={v}" for k, v in sorted(job["options"].items()))
    )
    pes = list(dict.fromkeys(pe_folder_name(c.pe, c.pe_options) for c in configs))
    pair = ["nope", "t5"] if {"nope", "t5"} <= set(pes) else pes[:2]  # the pair Section 5 finds alike
    seed = min(c.seed for c in configs)
    at = "" if seed == 0 else f" --seed {seed}"
    steps = [
        (f"probe eval{task}{where}", "accuracy per length bucket, a figure, the PEs ranked"),
        (
            f"probe compare {' '.join(pair)}{task}{at}{where}",
            "how alike two PEs' attention is, layer by layer (Section 5)",
        ),
        (f"probe distances{task}{at}{where}", "how far back each PE attends on unseen lengths (Section 6)"),
        ("probe app", "all of it in the browser"),
    ]
    width = max(len(command) for command, _ in steps)
    out.print("next:\n" + "\n".join(f"  {command:<{width}}   {what}" for command, what in steps), highlight=False)
