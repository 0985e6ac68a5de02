"""The kit's results, valid on disk at every moment: one JSON document rewritten atomically (a temporary
name, then a rename) wherever it is kept, after every measurement; SIGTERM and SIGINT write it a last
time and end the process, so a kill at the device's time limit keeps everything measured up to then.
Progress lines for a log that is read only after the call, at least every ``HEARTBEAT`` seconds."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HEARTBEAT = 10.0  # seconds without a line before the heartbeat prints one (the issue asks for 15 at most)


STOPPING = {signal.SIGINT, signal.SIGTERM}


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """``payload`` as ``path``, replaced in one rename: a reader, or a kill, sees the old document or
    the new one, never half of one. SIGINT and SIGTERM wait until the write is over (a handler raising
    between the temporary file's creation and the rename left it behind); a failed write leaves none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOPPING)
    try:
        handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp", delete=False)
        try:
            with handle:
                json.dump(payload, handle, indent=2, default=str)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(handle.name, 0o644)  # NamedTemporaryFile makes it 0600
            os.replace(handle.name, path)
        except BaseException:
            Path(handle.name).unlink(missing_ok=True)
            raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


class Record:
    """One result document kept at several ``paths`` ($OUT and bench/results/): :meth:`put` sets a
    field (a path of keys) and writes every copy at once."""

    def __init__(self, paths: Iterable[Path], data: dict[str, Any]):
        self.paths = [Path(p) for p in paths]
        self.data = data
        self.write()

    def put(self, *keys: str, value: Any) -> None:
        """Set ``data[k1][k2]... = value``, making the dictionaries on the way, then write."""
        node = self.data
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        self.write()

    def data_at(self, *keys: str) -> Any:
        """``data[k1][k2]...`` (an empty dictionary where it is not yet set)."""
        node = self.data
        for key in keys:
            node = node.get(key, {})
        return node

    def write(self) -> None:
        for path in self.paths:
            write_json_atomic(path, self.data)


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT once the record holds the stop: not an
    ``Exception``, so no ``except Exception`` on the way out swallows it."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_on_signals(record: Record, started: float) -> None:
    """On SIGTERM or SIGINT: note the signal, the phase and the time in ``record``, write it, and raise
    :class:`Stopped`; a second signal while that unwinds ends the process at once."""

    def handler(signum: int, frame: object) -> None:
        if record.data.get("stopped"):
            os._exit(128 + signum)
        name = signal.Signals(signum).name
        record.put("stopped", value={"signal": name, "phase": record.data.get("phase"), "at_s": since(started)})
        raise Stopped(signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def since(started: float) -> float:
    return round(time.time() - started, 1)


class Progress:
    """Lines stamped with the seconds since ``started``. With ``heartbeat``, a daemon thread repeats
    the last status whenever nothing was printed for that long, so the log never goes quiet while the
    main thread is busy (a build, a capture, an evaluation, a child process); :meth:`relay` passes a
    child's lines through and counts them as printed."""

    def __init__(self, started: float, heartbeat: float | None = HEARTBEAT):
        self.started, self.heartbeat = started, heartbeat
        self.status = "starting"
        self.last = time.monotonic()
        self._lock = threading.Lock()
        self._done = threading.Event()
        if heartbeat:
            threading.Thread(target=self._beat, daemon=True, name="kit-heartbeat").start()

    def say(self, line: str) -> None:
        """Print ``line`` now and keep it as the status the heartbeat repeats."""
        with self._lock:
            self.status = line
            self._print(f"[kit {time.time() - self.started:6.0f} s] {line}")

    def relay(self, line: str) -> None:
        """Print a line a child printed, as it is."""
        with self._lock:
            self._print(line.rstrip("\n"))

    def _print(self, line: str) -> None:
        print(line, flush=True)
        self.last = time.monotonic()

    def _beat(self) -> None:
        while not self._done.wait(1.0):
            with self._lock:
                if time.monotonic() - self.last >= self.heartbeat:
                    self._print(f"[kit {time.time() - self.started:6.0f} s] ... still: {self.status}")

    def close(self) -> None:
        self._done.set()


def out_paths(name: str, device_type: str, results: Path) -> list[Path]:
    """Where the record is kept: bench/results/ and, when the device tool set it, $OUT (the only
    folder whose files come back)."""
    filename = f"{name}_{device_type}.json"
    paths = [results / filename]
    if os.environ.get("OUT"):
        paths.append(Path(os.environ["OUT"]) / filename)
    return paths
