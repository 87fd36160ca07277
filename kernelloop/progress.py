"""Phase reports from the sandbox to whoever shows progress (`kernelloop verify` on stderr, MCP's
verify and profile tools as progress notifications).

The sandbox's job sessions call `report(kind, phase)` as a job starts and moves through its
phases; a listener, if one is set, turns that into words (`describe`). The listener is held in
a context variable: a verification reports in the thread that asked for it, so each MCP job
thread hears only its own jobs. Stdlib only: the verifier imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Listener = Callable[[str, str], None]  # (job kind: 'reference', 'candidate', 'baselines'; phase)
_listener: ContextVar[Listener | None] = ContextVar("kernelloop_progress_listener", default=None)

# What each job phase is, in a person's words; a (kind, phase) not here is not shown.
PHASES = {("reference", "compile"): "making the reference outputs",
          ("candidate", "compile"): "compiling the candidate and making its first call",
          ("candidate", "trials"): "checking the candidate's outputs",
          ("candidate", "timing"): "timing the candidate against the baselines",
          ("candidate", "fresh"): "checking on fresh inputs",
          ("baselines", "compile"): "timing the baselines"}


def describe(kind: str, phase: str) -> str | None:
    """The words for a reported phase, or None for one nobody needs to see."""
    return PHASES.get((kind, phase))


def report(kind: str, phase: str) -> None:
    """Tell this context's listener a job of `kind` is now in `phase`; never raises into the sandbox."""
    listener = _listener.get()
    if listener is not None:
        try:
            listener(kind, phase)
        except Exception:  # noqa: BLE001 - progress display must never break a verification
            pass


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send the phase reports of verifications run in this thread (context) to `listener` while the block runs."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
