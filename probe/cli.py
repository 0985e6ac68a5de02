"""`probe`: the command-line face of the library.

Each subcommand lives in ``probe/commands/<module>.py`` and exposes ``register(subparsers)`` (``import``,
a Python keyword, lives in ``released.py``: it imports the released models);
command modules import torch and the library lazily, inside their handlers, so ``probe --help``
stays instant. A :class:`ProbeError` (a user's mistake) or an OS error (a folder that cannot be
written) becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from probe.errors import ProbeError

COMMANDS = (
    "train",
    "eval",
    "compare",
    "distances",
    "positions",
    "theorem",
    "tasks",
    "pes",
    "sweep",
    "reproduce",
    "pretrain",
    "perplexity",
    "extrapolate",
    "released",
    "app",
)  # the modules, in the order of `probe --help`


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="probe",
        description="Positional encoding, attention and length generalization in decoder-only "
        "transformers (Kazemnejad et al., NeurIPS 2023). Every command runs with no arguments "
        "on a small embedded default.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"probe.commands.{name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except ProbeError as error:
        print(f"probe {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a file the command could not read or write: name it, no traceback
        where = f"{error.filename}: " if error.filename else ""
        print(
            f"probe {args.command}: error: {where}{error.strerror or error} (finished work is kept; choose another "
            "folder with --checkpoints or --out)",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"probe {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
