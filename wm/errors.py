"""The one exception type users see: a clear, single-line problem statement (exit code 2)."""


class WMError(Exception):
    """A problem with the user's input or run directory; the CLI prints `error: <message>` and exits 2."""
