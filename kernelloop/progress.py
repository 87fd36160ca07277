"""Phase reports from the sandbox to whoever shows progress (`kernelloop verify` on stderr).

The sandbox's job sessions call `report(kind, phase)` as a job starts and moves through its
phases; a listener, if one is set, turns that into words. Stdlib only: the verifier imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[str, str], None]  # (job kind: 'reference', 'candidate', 'baselines'; phase)
_listener: Listener | None = None


def report(kind: str, phase: str) -> None:
    """Tell the listener a job of `kind` is now in `phase`; never raises into the sandbox."""
    listener = _listener
    if listener is not None:
        try:
            listener(kind, phase)
        except Exception:  # noqa: BLE001 - progress display must never break a verification
            pass


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send phase reports to `listener` while the block runs (one listener at a time: the CLI's)."""
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous
