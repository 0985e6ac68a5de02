"""`probe perplexity`: held-out perplexity against context size per PE (the paper's pretraining figure and tables)."""

from __future__ import annotations

import argparse

from probe.commands.common import (
    add_checkpoints,
    add_corpus_options,
    add_device,
    add_json,
    add_pe_options,
    console,
    corpus_spec,
    parse_options,
    print_json,
)


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
        "tokenizer at multiples of --context (default: the first model's n_ctx); models of one table share a "
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
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--out", metavar="DIR", help="output folder (default: perplexity/ in the runs' task folder)")
    add_checkpoints(parser)
    add_device(parser)
    add_json(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from probe.analysis import external_perplexity_report
    from probe.analysis.perplexity import perplexity_report
    from probe.analysis.subjects import models_home, models_stem
    from probe.atomic import atomic_write_text, write_json_and_csv
    from probe.corpus import CODE_TASK
    from probe.device import resolve_device
    from probe.errors import ProbeError
    from probe.figures import perplexity_figure, write_figure
    from probe.models.hf import is_external
    from probe.models.registry import FIGURE_ORDER, pe_folder_name
    from probe.presets import CONTEXTS
    from probe.runs.folders import find_runs, task_folder_name

    if args.batch_size < 1:
        raise ProbeError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.max_files is not None and args.max_files < 1:
        raise ProbeError(f"--max-files must be at least 1, got {args.max_files}")
    pe_options = parse_options(args.pe_option, None)
    external = any(is_external(name) for name in args.runs)
    if external:
        if pe_options:
            raise ProbeError(
                "-p applies probe's PE options at inference; hf: models are read as published: read them without -p"
            )
        options = {
            "corpus": args.corpus,
            "heldout": args.heldout,
            "vocab_size": args.vocab_size,
            **({"context": args.context} if args.context is not None else {}),
        }
        paths = list(args.runs)
        home = models_home(paths, args.checkpoints, options)
    elif args.runs:
        paths = [Path(r) for r in args.runs]
        home = paths[0].resolve().parents[1]
    else:
        spec = corpus_spec(args, CONTEXTS["tiny"])
        folder = task_folder_name(CODE_TASK, spec.given())
        runs, _ = find_runs(args.checkpoints, CODE_TASK, spec.given())
        runs = [
            r for r in runs if r.complete and r.seed == args.seed and r.in_layout and (not args.pe or r.pe in args.pe)
        ]
        if not runs:
            raise ProbeError(
                f"no finished runs in {Path(args.checkpoints) / folder} (seed {args.seed}); train them "
                "with "
                f"`probe pretrain --checkpoints {args.checkpoints}`, or give run folders"
            )
        order = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
        runs.sort(key=lambda r: (order.get(r.pe, len(order)), r.pe_name))
        paths = [r.path for r in runs]
        home = Path(args.checkpoints) / folder
    device = resolve_device(args.device)
    out = console(stderr=args.json)
    columns = (TextColumn("{task.description:<30}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=out, transient=True) as progress:
        bar = progress.add_task("perplexity", total=None)

        def on_progress(what: str, done: int, total: int) -> None:
            progress.update(bar, description=what, completed=done, total=total)

        if external:
            report = external_perplexity_report(
                paths,
                options=options,
                max_files=args.max_files,
                device=device,
                batch_size=args.batch_size,
                progress=on_progress,
            )
        else:
            report = perplexity_report(
                paths,
                pe_options=pe_options,
                max_files=args.max_files,
                device=device,
                batch_size=args.batch_size,
                progress=on_progress,
            )
    rows = report.table()
    protocol = report.protocol
    suffix = models_stem(paths) if external else pe_folder_name("", pe_options).lstrip("+") if pe_options else ""
    out_dir = Path(args.out) if args.out else home / ("perplexity" + (f"+{suffix}" if suffix else ""))
    written = write_json_and_csv(out_dir, "perplexity", report.to_json(), rows)
    atomic_write_text(out_dir / "perplexity.md", report.to_markdown())
    written.append(out_dir / "perplexity.md")
    figure = perplexity_figure(
        rows,
        protocol.train_context,
        f"Held-out perplexity against context size (training context {protocol.train_context})",
    )
    written += write_figure(figure, out_dir / "perplexity")

    table = Table(
        title=f"probe perplexity: {len(report.files)} held-out files, last {protocol.scored} tokens scored; "
        f"all files of at least {protocol.contexts[-1]} tokens"
    )
    table.add_column("model", overflow="fold")
    for context in protocol.contexts:
        table.add_column(f"{context}\n{context / protocol.train_context:.2g}x", justify="right", min_width=5)
    cells = {(row["run"], row["context"]): row["perplexity"] for row in rows if row["bucket"] == "all"}
    for r in report.runs:
        table.add_row(
            r.label, *(f"{cells[r.label, c]:.4g}" if (r.label, c) in cells else "-" for c in protocol.contexts)
        )
    out.print(table)
    out.print("wrote " + ", ".join(str(p) for p in written), highlight=False)
    if args.json:
        print_json(report.to_json())
    return 0
