"""`probe perplexity`: held-out perplexity against context size per PE (the paper's pretraining figure and tables)."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_corpus_options,
    add_pe_options,
    add_reading_outputs,
    check_at_least,
    check_out_beside,
    check_pe_options,
    check_seeds,
    console,
    corpus_spec,
    intervention_of,
    parse_options,
    pe_kinds,
    progress_bar,
    write_report,
)
from probe.presets import HF_CONTEXT, PERPLEXITY_WINDOWS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "perplexity",
        help="held-out perplexity of pretrained code models at 0.5x to 2.5x their training context",
        description="Each held-out file is read at each context size c (the paper's 512 ... 2560 for its 1024, scaled "
        "to the training context) as its last c tokens, and its last 200/1024 of a context are scored, the same tokens "
        "at every c; a bucket of file lengths (250/1024 of a context wide) is read at the sizes all its files have. "
        "Per run, bucket and context: mean file perplexity with a bootstrap interval over files. Writes "
        "perplexity.json, "
        ".csv, .md (the paper's table layout) and the figure (HTML, PNG) to the task folder's perplexity/. A model may "
        "be hf:ID or hf:FOLDER (any model TransformerLens loads): the held-out files of --corpus are read with its own "
        f"tokenizer at multiples of --context (default: the smaller of the first model's n_ctx and {HF_CONTEXT}); "
        "models of one table share a "
        "tokenizer; outputs go to perplexity+<models>/.",
    )
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN_DIR",
        help="run folders or hf:ID, hf:FOLDER (default: the "
        "complete runs of the corpus and context given, seed --seed, every PE)",
    )
    add_corpus_options(parser)
    parser.add_argument("--pe", action="append", help="only these PEs (repeatable; default every PE found)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the runs (default 0)")
    add_pe_options(
        parser, "applied at inference to the runs whose PE has it (RoPE scaling: -p scaling=yarn -p factor=2.5)"
    )
    parser.add_argument("--max-files", type=int, metavar="N", help="read at most N held-out files (default all)")
    parser.add_argument(
        "--windows",
        choices=PERPLEXITY_WINDOWS,
        default="shared",
        help="shared (default): a file's scored tokens read from its last c tokens, one pass per file and size; "
        "own: each scored token read from a window of its own, BOS and the c - 1 tokens before it, as the authors' "
        "released evaluation (every token predicted from c tokens; 200/1024 of a context times the passes; outputs "
        "in perplexity+own-windows/)",
    )
    add_reading_outputs(parser, "perplexity", batch_size=16, beside=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from probe.analysis.perplexity import perplexity_report
    from probe.device import resolve_device
    from probe.figures.terminal import fitted
    from probe.subjects.settings import ReadSettings

    args.pe = pe_kinds(args.pe)
    check_at_least(
        ("--batch-size", args.batch_size, 1), ("--max-files", args.max_files, 1), ("--context", args.context, 2)
    )
    check_seeds(args.seed)
    check_pe_options(args.pe_option)
    intervention_of(args)
    names = list(args.runs) or _runs(args)
    options = {
        "corpus": args.corpus,
        "heldout": args.heldout,
        "vocab_size": args.vocab_size,
        **({"context": args.context} if args.context is not None else {}),
    }
    check_out_beside(args, names, options, "perplexity", "perplexity")
    out = console(stderr=args.json)
    with progress_bar(out, "perplexity") as on_progress:
        settings = ReadSettings(
            options=options,
            batch_size=args.batch_size,
            device=resolve_device(args.device),
            dtype=args.dtype,
            intervention=intervention_of(args),
            pe_options=parse_options(args.pe_option, None),
            progress=on_progress,
        )
        report = perplexity_report(
            names, settings, max_files=args.max_files, windows=args.windows, root=args.checkpoints
        )
    out.print(fitted(_table(report), out))
    write_report(report, args, out)
    return 0


def _runs(args: argparse.Namespace) -> list:
    """The complete runs of the corpus and context given, seed --seed, in the figures' PE order."""
    from pathlib import Path

    from probe.corpus import CODE_TASK
    from probe.errors import ProbeError
    from probe.models.registry import FIGURE_ORDER
    from probe.presets import CONTEXTS
    from probe.runs.folders import find_runs, task_folder_name

    spec = corpus_spec(args, CONTEXTS["tiny"])
    runs, _ = find_runs(args.checkpoints, CODE_TASK, spec.given())
    runs = [r for r in runs if r.complete and r.seed == args.seed and r.in_layout and (not args.pe or r.pe in args.pe)]
    if not runs:
        folder = Path(args.checkpoints) / task_folder_name(CODE_TASK, spec.given())
        raise ProbeError(
            f"no finished runs in {folder} (seed {args.seed}); train them with "
            f"`probe pretrain --checkpoints {args.checkpoints}`, or give run folders"
        )
    order = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    return sorted(runs, key=lambda r: (order.get(r.pe, len(order)), r.pe_name))


def _table(report):
    from rich.table import Table

    protocol = report.protocol
    table = Table(
        title=f"probe perplexity: {len(report.files)} held-out files, last {protocol.scored} tokens scored, "
        f"{protocol.reading}; all files of at least {protocol.contexts[-1]} tokens"
    )
    table.add_column("model", overflow="fold")
    for context in protocol.contexts:
        table.add_column(f"{context}\n{context / protocol.train_context:.2g}x", justify="right", min_width=5)
    cells = report.cells("all")  # by run: two runs may share a label
    for index, r in enumerate(report.runs):
        table.add_row(
            r.label,
            *(f"{cells[index, c]['perplexity']:.4g}" if (index, c) in cells else "-" for c in protocol.contexts),
        )
    return table
