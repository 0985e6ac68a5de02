"""How `probe app` serves the explorer: locate its script, check the port, and run Streamlit as a child
that owns no signal of its own, so a stop signal is passed on once and waited for and no server outlives
`probe app` holding the port. Imports no Streamlit and nothing of the explorer (which imports probe).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_PORT = 8501
HOST = "127.0.0.1"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_TIMEOUT = 10.0  # seconds the server gets to shut down after a stop signal, then it is killed
POLL = 0.2  # seconds between looks at the server and at the stop signals received


def explorer_script() -> Path:
    """``probe/explorer/explorer.py`` of this installation (located, never imported: the explorer imports probe)."""
    return Path(__file__).resolve().parent / "explorer.py"


def check_port(port: int) -> None:
    """One line (ProbeError) when ``port`` is out of range or already held on HOST, before any server starts."""
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


def streamlit_command(script: Path, port: int) -> list[str]:
    """Streamlit serving ``script`` on HOST:``port``, headless, without usage statistics."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(script),
        "--server.address",
        HOST,
        "--server.port",
        str(port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "minimal",
    ]


def serve(command: list[str], env: dict[str, str]) -> int:
    """Run the server until it exits; return its exit code, or 0 when a stop signal ended it.

    The server runs in a session of its own, so a signal reaches it only through here, exactly once:
    SIGTERM, SIGINT (the terminal's Ctrl-C) and SIGHUP are forwarded, then the server gets STOP_TIMEOUT
    seconds to shut down before it is killed. One that was ignored when `probe app` started (nohup's
    SIGHUP, a background job's SIGINT) stays ignored. The handlers only record a signal; forwarding
    happens in this loop, so a signal that comes while the server is starting is not lost.
    """
    stops: list[int] = []

    def record(signum: int, frame: object) -> None:
        stops.append(signum)

    previous = {
        signum: signal.signal(signum, record)
        for signum in STOP_SIGNALS
        if signal.getsignal(signum) is not signal.SIG_IGN
    }
    try:
        process = subprocess.Popen(command, env=env, start_new_session=True)
        forwarded, deadline = 0, None
        while True:
            try:
                code = process.wait(timeout=POLL)
                return 0 if stops else code
            except subprocess.TimeoutExpired:
                pass
            for signum in stops[forwarded:]:
                process.send_signal(signum)
            forwarded = len(stops)
            if stops and deadline is None:
                deadline = time.monotonic() + STOP_TIMEOUT
            if deadline is not None and time.monotonic() > deadline:
                print(
                    f"probe app: the server did not stop within {STOP_TIMEOUT:.0f} s; killed it",
                    file=sys.stderr,
                    flush=True,
                )
                process.kill()
                process.wait()
                return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
