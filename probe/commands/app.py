"""`probe app`: start the Streamlit explorer (``app/explorer.py``) on 127.0.0.1.

The explorer lives beside the package in a source checkout (``pip install -e .``), so it is
found relative to ``probe/``. Its checkpoint folder travels in ``PROBE_CHECKPOINTS``.
"""

from __future__ import annotations

import argparse

from probe.commands.common import add_checkpoints

DEFAULT_PORT = 8501
HOST = "127.0.0.1"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "app", help="the Streamlit explorer over everything above",
        description="Start the Streamlit explorer (models, attention, comparisons, attended distances and the "
        "Theorem 1 / 2 constructions) on http://127.0.0.1:PORT, headless, without usage statistics. "
        "Ctrl-C stops it.",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT})")
    add_checkpoints(parser)
    parser.set_defaults(func=run)


def explorer_script():
    """``app/explorer.py`` of the source checkout this package was installed from."""
    from pathlib import Path

    import probe

    return Path(probe.__file__).resolve().parent.parent / "app" / "explorer.py"


def check_port(port: int) -> None:
    import socket

    from probe.errors import ProbeError

    if not 1 <= port <= 65535:
        raise ProbeError(f"--port must be in 1..65535, got {port}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will: TIME_WAIT is no conflict
        try:
            sock.bind((HOST, port))
        except OSError:
            raise ProbeError(f"port {port} on {HOST} is already in use; choose another with --port") from None


def streamlit_command(script, port: int) -> list[str]:
    import sys

    return [sys.executable, "-m", "streamlit", "run", str(script),
            "--server.address", HOST, "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--client.toolbarMode", "minimal"]


def run(args: argparse.Namespace) -> int:
    import importlib.util
    import os
    import subprocess
    from pathlib import Path

    from probe.errors import ProbeError

    script = explorer_script()
    if not script.is_file():
        raise ProbeError(f"the explorer is missing: no {script} (the app ships with the source checkout; "
                         "install it with `pip install -e .` from a clone of the repository)")
    if importlib.util.find_spec("streamlit") is None:
        raise ProbeError("streamlit is not installed in this environment (pip install streamlit)")
    checkpoints = Path(args.checkpoints).resolve()
    if checkpoints.exists() and not checkpoints.is_dir():
        raise ProbeError(f"--checkpoints {args.checkpoints} is a file, not a folder")
    check_port(args.port)
    env = {**os.environ, "PROBE_CHECKPOINTS": str(checkpoints)}
    print(f"probe app: explorer at http://{HOST}:{args.port} over {checkpoints} (Ctrl-C stops it)", flush=True)
    process = subprocess.Popen(streamlit_command(script, args.port), env=env)
    try:
        return process.wait()
    except KeyboardInterrupt:  # Ctrl-C reaches streamlit too; let it shut down cleanly
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.terminate()
            process.wait()
        return 0
