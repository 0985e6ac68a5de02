"""`probe`: the command-line face of the library.

Each subcommand lives in ``probe/commands/<module>.py`` and exposes ``register(subparsers)`` (``import``,
a Python keyword, lives in ``released.py``: it imports the released models);
command modules import torch and the library lazily, inside their handlers, so ``probe --help``
stays instant (``tests/test_cli_face.py`` holds that building the parser imports neither torch nor
TransformerLens). A mistyped command, choice or flag gets a "did you mean", and an unknown flag the usage of
the subcommand it was given to. A :class:`ProbeError` (a user's mistake) or an OS error (a folder that cannot be
written) becomes one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from probe.errors import ProbeError, closest, did_you_mean

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


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose "invalid choice" line names the closest choice (``probe evl``: did you mean
    'eval'?). Subcommands' parsers are of this class too (argparse makes them of their parent's). A flag is
    taken only as spelled: argparse's prefix matching would read ``--cpus`` as ``--cpus-per-run``, and a script
    written so would change meaning the day a second flag shares the prefix."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        choice = re.search(r"invalid choice: '?([^' ]*)'? \(choose from (.*)\)", message)
        if choice:
            choices = [c.strip("'") for c in choice.group(2).split(", ")]
            message += did_you_mean(choice.group(1), choices)
        super().error(message)

    def unknown_flags(self, extras: Sequence[str]) -> NoReturn:
        """The error for arguments this (sub)parser does not take, with the closest flag it does take, each hint
        once. Flags are compared without their ``--``: every flag shares it, and counted in it lifts a short one
        past the cutoff (``--pe`` came within 0.6 of ``--capture``)."""
        flags = {f.removeprefix("--"): f for f in self._option_string_actions if f.startswith("--")}
        close = (closest(x.partition("=")[0].removeprefix("--"), list(flags)) for x in extras if x.startswith("--"))
        hints = "".join(f"; did you mean {flags[name]!r}?" for name in dict.fromkeys(close) if name)
        self.error(f"unrecognized arguments: {' '.join(extras)}{hints}")


_RESUMES = "finished runs and each run's last checkpoint are kept; the same command again resumes from them"
INTERRUPTED = {
    "train": _RESUMES,
    "pretrain": _RESUMES,
    "sweep": "finished runs and evaluations are kept; the same command again resumes the grid",
    "reproduce": "finished runs and scenario summaries are kept; the same command again resumes the study",
    "eval": "the runs evaluated so far keep their eval.json; the same command again evaluates every run",
}
"""What Ctrl-C leaves, per command (the rest write their files whole at the end: nothing half-written)."""


def build_parser() -> Parser:
    parser = Parser(
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
    args, extras = parser.parse_known_args(argv)
    if extras:  # named by the parser they were given to: `probe eval --bogus` prints eval's usage
        subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        (subparsers.choices[args.command] if args.command else parser).unknown_flags(extras)
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
        kept = INTERRUPTED.get(args.command, "no file is left half-written; run the same command again to redo it")
        print(f"probe {args.command}: interrupted; {kept}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
