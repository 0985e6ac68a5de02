"""`probe theorem`: build the NoPE weights of Theorems 1 and 2 (Appendix C) and verify every claim
numerically, in float32 and float64; `--match alibi|t5` builds a NoPE layer that reproduces a
relative bias instead and compares its attention with the target's (JSD)."""

from __future__ import annotations

import argparse
from pathlib import Path

from probe.errors import ProbeError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "theorem",
        help="build the Theorem 1 / 2 NoPE weights and verify them numerically",
        description="Builds the NoPE constructions of Theorems 1 and 2 (Appendix C) as TransformerLens models, "
        "runs them on a random <bos>-led sequence of every length up to --max-length, and prints the max "
        "absolute error of each claim against its tolerance. Exit status 1 if any claim fails. "
        "--match builds a NoPE layer whose relative term reproduces ALiBi or a T5 head instead.",
    )
    parser.add_argument(
        "--max-length",
        type=int,
        default=512,
        metavar="T",
        help="longest sequence (tokens, <bos> included) the constructions are built and checked for (default 512)",
    )
    parser.add_argument("--dtype", choices=("float32", "float64", "both"), default="both", help="default: both")
    parser.add_argument("--seed", type=int, default=0, help="seed of the arbitrary weights and the token sequences")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--export", metavar="DIR", help="also write the constructed model(s) as checkpoints under DIR")
    parser.add_argument(
        "--match",
        choices=("alibi", "t5"),
        help="beyond the paper: a NoPE layer reproducing ALiBi's bias or a T5 head's bucket bias",
    )
    parser.add_argument("--slope", type=float, default=None, help="ALiBi slope for --match alibi (default 0.5)")
    parser.add_argument(
        "--from",
        dest="source",
        metavar="CHECKPOINT_DIR",
        help="t5 checkpoint for --match t5 (default: a random bias table)",
    )
    parser.add_argument("--layer", type=int, default=0, help="layer of the t5 head to match (default 0)")
    parser.add_argument("--head", type=int, default=0, help="t5 head to match (default 0)")
    parser.add_argument("--sequences", type=int, default=4, help="random sequences for --match (default 4)")
    parser.set_defaults(func=run)


def _check_arguments(args: argparse.Namespace) -> None:
    from probe.commands.common import check_seeds

    check_seeds(args.seed)  # numpy's generators take none below 0
    if args.max_length < 2:
        raise ProbeError(f"--max-length must be at least 2, got {args.max_length}")
    if args.sequences < 1:
        raise ProbeError(f"--sequences must be positive, got {args.sequences}")
    if args.slope is not None and args.match != "alibi":
        raise ProbeError("--slope applies to --match alibi only")
    if args.match != "t5" and (args.source is not None or args.layer != 0 or args.head != 0):
        raise ProbeError("--from, --layer and --head apply to --match t5 only")


def run(args: argparse.Namespace) -> int:
    _check_arguments(args)
    from rich.console import Console

    from probe.commands.common import print_json
    from probe.theorems import checks

    console = Console()
    dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    if args.match:
        return _run_match(args, dtypes, console)

    results = []
    for dtype in dtypes:
        results += _with_progress(
            f"Theorems 1-2, {dtype}",
            args.max_length,
            lambda progress, dtype=dtype: checks.verify_theorems(args.max_length, dtype, args.seed, progress=progress),
        )
    exported = []
    if args.export:
        exported.append(_export_theorem(Path(args.export), args, [r for r in results if r.dtype == dtypes[0]]))
    passed = all(r.passed for r in results)
    if args.json:
        print_json(
            {
                "max_length": args.max_length,
                "seed": args.seed,
                "passed": passed,
                "claims": [r.to_dict() for r in results],
                "tolerances": checks.TOLERANCES,
                "exported": [str(p) for p in exported],
            }
        )
    else:
        _print_claims(console, results, dtypes, args)
        for path in exported:
            console.print(f"wrote {path}")
    return 0 if passed else 1


def _with_progress(description: str, total: int, work):
    """Run ``work(progress)`` under a rich progress bar on stderr (what, how far, how fast, time left)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:.1f} lengths/s" if task.speed else "")

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), Rate(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        return work(lambda length: bar.update(task, advance=1))


def _print_claims(console, results, dtypes: list[str], args: argparse.Namespace) -> None:
    from rich.markup import escape
    from rich.table import Table

    from probe.theorems.checks import CLAIMS, TOLERANCES

    table = Table(
        title=f"Theorems 1 and 2, constructed NoPE weights: max |error| over a random sequence of "
        f"every length 1..{args.max_length} (seed {args.seed})",
        title_justify="left",
    )
    table.add_column("claim")
    for dtype in dtypes:
        table.add_column(f"{dtype} |error|", justify="right")
        table.add_column("tolerance", justify="right")
    table.add_column("")
    by_key = {(r.claim, r.dtype): r for r in results}
    for claim, _, _ in CLAIMS:
        row, ok = [claim], True
        for dtype in dtypes:
            r = by_key[(claim, dtype)]
            ok &= r.passed
            error = f"{r.max_error:.3g}"
            row += [
                error if r.passed else f"[red]{error} (length {r.worst_length}, t={r.worst_position})[/red]",
                f"{r.tolerance:.3g}",
            ]
        table.add_row(*row, "[green]ok[/green]" if ok else "[red]FAIL[/red]")
    console.print(table)
    console.print(
        "[dim]t is the 1-based position (<bos> at t = 1); eps the dtype's machine epsilon; T = --max-length, "
        "tokens with <bos> (the paper's T + 1); no layer norm, and T hidden units in the first MLP[/dim]"
    )
    for claim, statement, hook in CLAIMS:
        console.print(f"[bold]{claim}[/bold]  {escape(statement)}", highlight=False)
        console.print(f"[dim]    read at {hook}; tolerance {escape(TOLERANCES[claim])}[/dim]", highlight=False)


def _t5_source(args: argparse.Namespace):
    """The t5 model ``--match t5`` reads its head from, and a note saying what the match is of."""
    from probe.theorems import checks

    if args.source is None:
        source = checks.random_t5_source(seed=args.seed)
        note = f"no --from: matching a random N(0, 1) T5 bias table (seed {args.seed})"
    else:
        from probe.runs.folders import load_run

        source = load_run(args.source)
        note = f"t5 head from {args.source}"
    if args.layer > 0:
        note += (
            f"; layer {args.layer}'s head is fed the token embeddings (through its ln1), not the residual it reads "
            "in the trained model: the match is of its query-key map and bias, not of the pattern it shows there"
        )
    return source, note


def _run_match(args: argparse.Namespace, dtypes: list[str], console) -> int:
    from probe.commands.common import print_json
    from probe.theorems import checks

    source, name, note = None, "t5", None
    if args.match == "t5":
        source, note = _t5_source(args)
    results, matches = [], {}
    for dtype in dtypes:
        if args.match == "alibi":
            match = checks.match_alibi(0.5 if args.slope is None else args.slope, args.max_length, args.seed, dtype)
        else:
            match = checks.match_t5(source, args.layer, args.head, args.max_length, args.seed, dtype, name)
        matches[dtype] = match
        results.append(checks.verify_match(match, args.max_length, args.sequences, args.seed))
    exported = []
    if args.export:
        exported.append(_export_match(Path(args.export), args, matches[dtypes[0]], results[0], source))
    passed = all(r.passed for r in results)
    if args.json:
        print_json(
            {
                "match": args.match,
                "passed": passed,
                "note": note,
                "results": [r.to_dict() for r in results],
                "exported": [str(p) for p in exported],
            }
        )
        return 0 if passed else 1
    console.print(_match_table(results, args))
    if note:
        console.print(f"[dim]{note}[/dim]")
    code = (
        "position code: none beyond dims 1-3 (Theorem 2 with its position components scaled by the slope)"
        if results[0].position_dims == 0
        else f"position code: {results[0].position_dims} residual dims (the first MLP writes a one-hot code of t; "
        "the key reads it through the bias matrix)"
    )
    console.print(f"[dim]{code}[/dim]")
    console.print(
        "[dim]JSD in nats per query row; pass: max |Δlogit| <= tolerance and max JSD <= tolerance² σ(2 "
        "tolerance)² / 2 + 16 eps(float64), the most logits within tolerance allow (about tolerance² / 8), "
        "plus the JSD's own rounding[/dim]"
    )
    for path in exported:
        console.print(f"wrote {path}")
    return 0 if passed else 1


def _match_table(results, args: argparse.Namespace):
    from rich.table import Table

    table = Table(
        title=f"NoPE layer 2 vs the target head on the same tokens: {args.sequences} random sequences "
        f"of {args.max_length} tokens (so every query position 1..{args.max_length})",
        title_justify="left",
    )
    for column in ("target", "dtype", "max JSD", "mean JSD", "max |Δlogit|", "tolerance", ""):
        table.add_column(column, justify="left" if column in ("target", "dtype") else "right")
    for r in results:
        table.add_row(
            r.target,
            r.dtype,
            f"{r.max_jsd:.3g}",
            f"{r.mean_jsd:.3g}",
            f"{r.max_logit_error:.3g}",
            f"{r.tolerance:.3g}",
            "[green]ok[/green]" if r.passed else "[red]FAIL[/red]",
        )
    return table


def _export_theorem(directory: Path, args: argparse.Namespace, results) -> Path:
    from probe.models.checkpoint import save_checkpoint
    from probe.theorems import checks
    from probe.theorems.constructions import theorem_model

    model = theorem_model(args.max_length, seed=args.seed, dtype=checks.parse_dtype(results[0].dtype))
    vocab = checks.vocabulary(model.cfg.d_vocab)
    return save_checkpoint(
        model,
        directory / "theorem",
        construction="theorem1+2",
        max_length=args.max_length,
        vocabulary=vocab,
        tokenizer=checks.tokenizer_dict(vocab),
        claims=[r.to_dict() for r in results],
    )


def _export_match(directory: Path, args: argparse.Namespace, match, result, source) -> Path:
    from probe.models.checkpoint import save_checkpoint
    from probe.theorems import checks

    model = match.nope
    metadata = getattr(source, "metadata", None) or {}
    tokenizer = metadata.get("tokenizer")
    vocab = metadata.get("vocabulary") or checks.vocabulary(model.cfg.d_vocab)
    return save_checkpoint(
        model,
        directory / f"match-{args.match}",
        construction=f"match-{args.match}",
        target=match.name,
        source=args.source,
        max_length=args.max_length,
        vocabulary=vocab,
        tokenizer=tokenizer or checks.tokenizer_dict(vocab),
        match=result.to_dict(),
    )
