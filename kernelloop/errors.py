"""One line naming an exception, for the verdicts, notes and messages that report one; and the
problem's own error, which every room raises and catches."""

from __future__ import annotations


class ProblemError(ValueError):
    """A problem or candidate file that doesn't fit the format. The message is one line."""


def error_line(exc: BaseException) -> str:
    """'TypeError: first line of its message' (tracebacks and multi-line messages stay out)."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
