"""`probe import`: the paper's released code models (or any folder laid out as theirs) as probe runs."""

from __future__ import annotations

import argparse

from probe.commands.common import add_checkpoints


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import",
        help="read one of the paper's released code models into a probe run",
        description="Reads a folder laid out as the authors' Hub repos McGill-NLP/codellm_1b_{nope,rotary,alibi} "
        "(config.json with position_encoding_type, pytorch_model.bin or model.safetensors, tokenizer.json, and "
        "tokenizer_config.json or special_tokens_map.json naming its BOS) and writes "
        "a run folder CHECKPOINTS/code+context=1024+tokenizer=<digest>/<pe>/seed0/ beside the code corpus tokenized "
        "with that tokenizer, which probe perplexity, probe compare --task code, probe distances --task code and the "
        "explorer read. Pickle weights are read with torch.load(weights_only=True): nothing in them is executed.",
    )
    parser.add_argument("folder", metavar="FOLDER", help="the downloaded model folder")
    parser.add_argument(
        "--corpus",
        default="stdlib",
        metavar="DIR",
        help="stdlib (default), packages, or a folder of source files: the held-out files analysed",
    )
    parser.add_argument("--context", type=int, help="training context in tokens (default: the model's, 1024)")
    parser.add_argument("--seed", type=int, default=0, help="the seed folder to write (default 0)")
    parser.add_argument("--force", action="store_true", help="import over an existing run folder")
    parser.add_argument("--json", action="store_true", help="print the run folder as JSON")
    add_checkpoints(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sys

    from probe.commands.common import check_at_least, check_seeds, print_json
    from probe.runs.released import import_released

    check_at_least(("--context", args.context, 2))
    check_seeds(args.seed)
    path = import_released(
        args.folder,
        args.checkpoints,
        corpus=args.corpus,
        context=args.context,
        seed=args.seed,
        force=args.force,
        progress=lambda message: print(message, file=sys.stderr, flush=True),
    )
    if args.json:
        print_json({"run": str(path)})
    else:
        print(f"imported {args.folder} as {path}")
    return 0
