"""Flags and output shared by several commands (one spelling everywhere)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any



def add_checkpoints(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoints", metavar="DIR", default="checkpoints",
                        help="root folder of the runs (default: checkpoints/)")


def add_device(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda if available)")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, default=float)
    sys.stdout.write("\n")


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr)
