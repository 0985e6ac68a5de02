"""The package's own error: raised for a user's mistake, printed by the CLI as one line; and the hint such a line
gives for a misspelt name."""

from __future__ import annotations

import difflib
from collections.abc import Sequence


class ProbeError(Exception):
    """A bad input (unknown name, missing or corrupt file, impossible request).

    The CLI prints ``str(error)`` on one line and exits with status 2; library callers can catch it.
    """


def first_line(error: BaseException) -> str:
    """A third-party error's first line (its type where it says nothing), to quote in a ProbeError."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def closest(given: str, choices: Sequence[str]) -> str | None:
    """The choice closest to ``given`` (any case), or None where none is close."""
    by_folded = {c.casefold(): c for c in choices}
    close = difflib.get_close_matches(given.casefold(), list(by_folded), n=1, cutoff=0.6)
    return by_folded[close[0]] if close else None


def did_you_mean(given: str, choices: Sequence[str]) -> str:
    """``; did you mean 'eval'?`` when a choice is close to ``given`` (any case), else ``""``."""
    choice = closest(given, choices)
    return f"; did you mean {choice!r}?" if choice else ""
