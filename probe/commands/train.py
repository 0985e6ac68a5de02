"""`probe train`: train a set of runs (default: every PE on SCAN, plus NoPE' = NoPE seed 1)."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_task_options,
    console,
    parse_options,
    pe_kinds,
)
from probe.commands.shared_training import add_training_options, report_results, results_table, train_with_progress
from probe.presets import RECIPES, listed


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train models (default: every PE + NoPE' on SCAN, preset tiny)",
        description="Train one model per (PE, seed). With no --pe and no --seed: every PE with seed 0 "
        "plus a second NoPE seed (the paper's NoPE' baseline). Finished runs are skipped (if trained with "
        "the same settings; otherwise one line says which differ), interrupted ones resume from their last state.",
    )
    parser.add_argument("--task", default="scan", help="task name (see `probe tasks`; default scan)")
    parser.add_argument(
        "--pe", action="append", help="positional encoding (repeatable; default: the paper's five; see `probe pes`)"
    )
    parser.add_argument("--seed", action="append", type=int, help="seed (repeatable; default 0)")
    parser.add_argument("--preset", default="tiny", help=f"model size: {listed(RECIPES)} (default tiny)")
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
        action="store_true",
        help="pack several examples into each row, attention kept within each: the same scored tokens in "
        "less padding (PEs whose logits read only relative positions, and embedded ones)",
    )
    add_training_options(parser, "examples")
    parser.set_defaults(func=run)


def planned_runs(args: argparse.Namespace) -> list[tuple[str, int]]:
    from probe.models.registry import PAPER_PES, pe_class
    from probe.studies.plans import seed_baseline_blocks

    args.pe = pe_kinds(args.pe)  # `--pe Rotary`, the label tables print, is rotary
    pes = args.pe or list(PAPER_PES)
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
    task_options = parse_options(args.option, args.scratchpad, tasks=[args.task])  # checked before any run
    model = parse_options(args.model, None)
    pe_options = parse_options(args.pe_option, None)
    configs = [
        TrainConfig(
            task=args.task,
            pe=pe,
            seed=seed,
            preset=args.preset,
            task_options=task_options,
            pe_options=pe_options,
            steps=args.steps,
            lr=args.lr,
            batch_size=args.batch_size,
            dropout=args.dropout,
            model=model,
            checkpoint_every=args.checkpoint_every,
            protocol=args.protocol,
            pack=args.pack,
            precision=args.precision,
            eval_every=args.eval_every,
        )
        for pe, seed in runs
    ]
    for config in configs:  # a misspelt model field or PE option gets its line before any run starts
        config.model_config(vocab_size=1)
    paths = [run_dir(args.checkpoints, c.task, c.pe, c.seed, c.task_options, c.pe_options) for c in configs]
    out = console(stderr=args.json)
    results = train_with_progress(configs, paths, device, args, out)

    out.print(
        results_table(
            f"probe train: {args.task}, preset {args.preset} (runs under {args.checkpoints})",
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
    return report_results(results, args, out)
