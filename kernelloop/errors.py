"""One line naming an exception, for the verdicts, notes and messages that report one."""

from __future__ import annotations


def error_line(exc: BaseException) -> str:
    """'TypeError: first line of its message' (tracebacks and multi-line messages stay out)."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
