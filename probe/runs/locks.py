"""Run-folder locks: one process trains or evaluates into a run folder at a time.

The lock is ``flock`` on ``<run>/.lock``, an OS-level lock that the kernel drops when its holder
exits, however it exits: a SIGKILLed trainer leaves no stale lock behind, and nothing ever has
to be cleaned up by hand. Linux's NFS client turns ``flock`` into a byte-range lock the server
arbitrates, so the lock holds across the nodes of a Ray cluster on a shared folder; where a file
system takes no locks at all, :func:`run_lock` says so once and goes on unprotected.

The file itself only describes the holder (pid, host, since when, what it runs), for the message
a second writer gets.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from probe.atomic import file_mode, write_error
from probe.errors import ProbeError

LOCK = ".lock"
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}
_warned: set[str] = set()


class RunLocked(ProbeError):
    """Another live process holds the run folder; ``holder`` says who (may be empty if unreadable)."""

    def __init__(self, folder: Path, holder: dict) -> None:
        self.folder = folder
        self.holder = holder
        super().__init__(f"{folder} is in use by {describe(holder)}; wait for it with --wait, or stop that process")


def describe(holder: dict) -> str:
    """``pid 4242 on node-3 since 2026-11-23 06:45:25 (probe train)``, from what the holder wrote."""
    if not holder:
        return "another process"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder["since"])) if "since" in holder else "?"
    what = f" ({holder['command']})" if holder.get("command") else ""
    return f"pid {holder.get('pid', '?')} on {holder.get('host', '?')} since {since}{what}"


def say_waiting(folder: str | os.PathLike, holder: dict) -> None:
    """The line ``--wait`` prints once when a run folder is busy."""
    print(f"{folder}: waiting for {describe(holder)} to finish with it", file=sys.stderr, flush=True)


def read_holder(folder: str | os.PathLike) -> dict:
    """What the current (or last) holder wrote in the lock file; {} if nothing readable."""
    try:
        holder = json.loads((Path(folder) / LOCK).read_text() or "{}")
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def check_free(folder: str | os.PathLike) -> None:
    """Raise :class:`RunLocked` if a live process holds ``folder`` now: a command's early look,
    before it starts anything; the lock itself is taken by :func:`run_lock`."""
    folder = Path(folder)
    try:
        fd = os.open(folder / LOCK, os.O_RDONLY)
    except OSError:
        return  # no lock file (or unreadable): nothing holds it that we could see
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RunLocked(folder, read_holder(folder)) from None
    except OSError:
        return
    finally:
        os.close(fd)


def _unsupported(folder: Path, error: OSError) -> None:
    key = str(folder.parent.parent)
    if key not in _warned:
        _warned.add(key)
        print(
            f"probe: warning: this file system takes no locks ({error.strerror}) under {key}; two processes "
            "could write the same run folder there at once",
            file=sys.stderr,
        )


@contextmanager
def run_lock(
    folder: str | os.PathLike,
    *,
    wait: bool = False,
    command: str = "probe",
    on_wait: Callable[[dict], None] | None = None,
) -> Iterator[None]:
    """Hold ``folder``'s lock for the ``with`` block.

    Busy: raise :class:`RunLocked`, or with ``wait`` block until the holder is gone (calling
    ``on_wait(holder)`` once first). The folder is created if needed.
    """
    folder = Path(folder)
    path = folder / LOCK
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, file_mode())
    except OSError as error:
        raise write_error(path, error) from None
    try:
        try:
            _acquire(fd, folder, wait, on_wait)
        except OSError as error:
            if error.errno not in _UNSUPPORTED:
                raise write_error(path, error) from None
            _unsupported(folder, error)
        else:
            holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(), "command": command}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)
        yield
    finally:
        os.close(fd)  # closing drops the flock


def _acquire(fd: int, folder: Path, wait: bool, on_wait: Callable[[dict], None] | None) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = read_holder(folder)
        if not wait:
            raise RunLocked(folder, holder) from None
        if on_wait:
            on_wait(holder)
        fcntl.flock(fd, fcntl.LOCK_EX)
