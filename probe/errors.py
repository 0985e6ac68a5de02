"""The package's own error: raised for a user's mistake, printed by the CLI as one line."""


class ProbeError(Exception):
    """A bad input (unknown name, missing or corrupt file, impossible request).

    The CLI prints ``str(error)`` on one line and exits with status 2; library callers can catch it.
    """
