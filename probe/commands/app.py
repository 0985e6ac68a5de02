"""`probe app`: not built yet."""

from __future__ import annotations

import argparse

from probe.errors import ProbeError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("app", help="(not built yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    raise ProbeError("'probe app' is not built yet in this version")
