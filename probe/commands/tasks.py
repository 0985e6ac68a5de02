"""`probe tasks`: not built yet."""

from __future__ import annotations

import argparse

from probe.errors import ProbeError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="(not built yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise ProbeError("'probe tasks' is not built yet in this version")
