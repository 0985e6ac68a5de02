"""Which code produced a result: probe's version, and where probe runs from a git checkout, its commit.

A study trains over several sittings, and between two sittings the code may change how a run rounds (a
kernel, an attention route) without changing what it computes: a run resumed across such a change trained
under two versions. Each training session records the version it ran (:class:`probe.training.loop.Trainer`),
and a study's summaries keep them per run, so a reader can tell which runs a change reached.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import probe

PACKAGE = Path(probe.__file__).resolve().parent
UNRECORDED = "unrecorded"  # a session that trained before the version was recorded (a state written earlier)


@functools.cache
def code_version() -> str:
    """``0.1.0`` for an installed probe; ``0.1.0+g<commit>`` where probe runs from a git checkout of its own
    (an editable install, a clone), ``.dirty`` after it where probe's tracked files differ from that commit.
    Read once per process: a sitting runs the code it imported."""
    commit = _git("rev-parse", "HEAD")
    top = _git("rev-parse", "--show-toplevel")
    if commit is None or top is None or Path(top).resolve() / "probe" != PACKAGE:  # not probe's own repository
        return probe.__version__
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", str(PACKAGE))
    return f"{probe.__version__}+g{commit[:12]}" + (".dirty" if changed else "")


def _git(*args: str) -> str | None:
    """``git args`` run in probe's folder, its output stripped; None where git or a repository is missing."""
    try:
        done = subprocess.run(["git", *args], cwd=PACKAGE, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def sessions_code(earlier: list[str], now: str) -> list[str]:
    """The versions a run trained under, in order: ``earlier`` sessions' and this one's, a version that the
    session before ran too counted once."""
    return earlier if earlier and earlier[-1] == now else [*earlier, now]
