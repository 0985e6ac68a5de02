"""The package's own error: raised for a user's mistake, printed by the CLI as one line."""


class ProbeError(Exception):
    """A bad input (unknown name, missing or corrupt file, impossible request).

    The CLI prints ``str(error)`` on one line and exits with status 2; library callers can catch it.
    """


def first_line(error: BaseException) -> str:
    """A third-party error's first line (its type where it says nothing), to quote in a ProbeError."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
