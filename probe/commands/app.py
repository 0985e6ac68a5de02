"""`probe app`: start the Streamlit explorer (``probe/explorer/explorer.py``) on 127.0.0.1.

The explorer ships inside the package, so a wheel installs it too. Its checkpoint folder travels in
``PROBE_CHECKPOINTS``; :mod:`probe.explorer.server` runs and stops the server.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from probe.commands.common import add_checkpoints
from probe.explorer import server


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "app",
        help="the Streamlit explorer over everything above",
        description="Start the Streamlit explorer (models, attention, comparisons, attended distances and the "
        "Theorem 1 / 2 constructions) on http://127.0.0.1:PORT, headless, without usage statistics. "
        "Ctrl-C stops it.",
    )
    parser.add_argument(
        "--port", type=int, default=server.DEFAULT_PORT, help=f"port on 127.0.0.1 (default {server.DEFAULT_PORT})"
    )
    add_checkpoints(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import importlib.util
    import os

    from probe.errors import ProbeError

    script = server.explorer_script()
    if not script.is_file():
        raise ProbeError(
            f"the explorer is missing: no {script} (this installation of probe is incomplete; "
            "reinstall it: pip install --force-reinstall probe, or pip install -e . in a clone)"
        )
    if importlib.util.find_spec("streamlit") is None:
        raise ProbeError("streamlit is not installed in this environment (pip install streamlit)")
    checkpoints = Path(args.checkpoints).resolve()
    if checkpoints.exists() and not checkpoints.is_dir():
        raise ProbeError(f"--checkpoints {args.checkpoints} is a file, not a folder")
    server.check_port(args.port)
    env = {**os.environ, "PROBE_CHECKPOINTS": str(checkpoints)}
    print(f"probe app: explorer at http://{server.HOST}:{args.port} over {checkpoints} (Ctrl-C stops it)", flush=True)
    return server.serve(server.streamlit_command(script, args.port), env)
