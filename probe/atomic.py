"""Writing files the way a shared run folder needs: atomically, with the mode the umask gives
ordinary files, and with every OS error turned into one line that names the file and the cause.

A temporary file from :func:`tempfile.mkstemp` is ``0600`` and keeps that mode through the
rename, so a colleague or a Ray worker running as another user could not read a checkpoint;
:func:`atomic_write` gives it ``0666 & ~umask`` (``0644`` under umask 022) before the rename,
as ``open`` would have. Errors surface as :class:`~probe.errors.ProbeError`; the file being replaced is untouched.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from probe.errors import ProbeError

_UMASK_LOCK = threading.Lock()


def file_mode() -> int:
    """``0o666`` less the process umask: the mode ``open(path, "w")`` would create a file with."""
    with _UMASK_LOCK:  # reading the umask means setting it; hold it so no thread sees the 0 between
        umask = os.umask(0)
        os.umask(umask)
    return 0o666 & ~umask


def cause(error: BaseException) -> str:
    """The human part of an OS error, including the ones safetensors wraps in its own message
    (``... IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })`` or
    ``Error while serializing: I/O error: No space left on device (os error 28)``)."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    found = re.search(r'message: "([^"]+)"', str(error)) or re.search(r"([^:]+?) \(os error \d+\)", str(error))
    return found.group(1).strip() if found else str(error)


def write_error(path: str | os.PathLike, error: BaseException) -> ProbeError:
    """One line for a failed write: the file, the cause, what is kept (that one file as it was: a caller that
    wrote others before it says so) and what to do."""
    if Path(path).is_dir():
        return ProbeError(
            f"cannot write {path}: it is a folder, not a file (left as it was); move it away, then run the same "
            "command again"
        )
    return ProbeError(
        f"cannot write {path}: {cause(error)} (the file there, if any, is as it was; free space or choose "
        "another folder, then run the same command again)"
    )


def writable(folder: str | os.PathLike) -> bool:
    """Whether this process may create files in ``folder`` (where it does not exist yet: in the nearest folder
    above it that does): the look a command takes before computing what it would write there. A read-only
    mount says no even to root; a chmod'ed folder says no to anyone but root."""
    path = Path(folder).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None], *, make_parents: bool = True) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it over ``path``.

    The previous ``path`` stays intact until the rename, so a full disk or a kill mid-write
    leaves the last complete file; the temporary file is removed on failure. The folder is
    created unless ``make_parents`` is false (a file name a user typed: a misspelt folder fails).
    """
    path = Path(path)
    if path.is_dir():  # a rename cannot replace a folder: said before anything is written
        raise write_error(path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR)))
    try:
        if make_parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as error:
        raise write_error(path, error) from None
    try:
        os.close(fd)
        write(Path(tmp))  # some writers (safetensors) replace the file: set the mode after them
        os.chmod(tmp, file_mode())
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except (OSError, SafetensorError) as error:
        raise write_error(path, error) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | os.PathLike, text: str, *, make_parents: bool = True) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text), make_parents=make_parents)


def strict_json(data: Any) -> Any:
    """``data`` as strict JSON can hold it: a NaN or an infinity, which Python's ``json`` writes as bare tokens
    strict parsers (JavaScript's ``JSON.parse``, Go's ``encoding/json``) refuse, becomes null;
    a number of another type (a numpy or 0-d torch scalar) becomes a float."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: strict_json(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [strict_json(value) for value in data]
    if data is None or isinstance(data, (str, int)):
        return data
    return strict_json(float(data))


def json_text(data: Any) -> str:
    """``data`` as the strict, indented JSON every file and ``--json`` output of probe is."""
    return json.dumps(strict_json(data), indent=2, allow_nan=False)


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json_text(data) + "\n")


def write_json_and_csv(out_dir: str | os.PathLike, stem: str, data: Any, rows: list[dict[str, Any]]) -> list[Path]:
    """``<stem>.json`` and ``<stem>.csv`` under ``out_dir``, each written atomically; their paths. The
    analyses' outputs: the JSON for programs, the CSV (one row per ``rows`` entry) for spreadsheets."""
    out_dir = Path(out_dir)
    atomic_write_json(out_dir / f"{stem}.json", data)
    return [out_dir / f"{stem}.json", write_csv(out_dir / f"{stem}.csv", rows)]


def write_csv(path: str | os.PathLike, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as a CSV file (the first row's keys as the header) at ``path``, written atomically; the path."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(path, buffer.getvalue())
    return Path(path)


def append_line(path: str | os.PathLike, line: str) -> None:
    """Append one line (a log record); a failure is one line, and earlier lines stay as they were."""
    try:
        with open(path, "a") as handle:
            handle.write(line + "\n")
    except OSError as error:
        raise write_error(path, error) from None
