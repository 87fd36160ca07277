"""The one lap timer of the verifier's cost reports (where a verification's or a job's seconds went).

Wall time on this process's clock (perf_counter), in seconds. Each `lap(name)` adds the time since
the last lap to `name` (a name met again adds up), so the laps add up to the whole; `elapsed()` is
the time since the start, for a span measured once.
"""

from __future__ import annotations

import time


class Stopwatch:
    """Laps since creation, in seconds, each named by what just finished."""

    def __init__(self) -> None:
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> float:
        """Add the time since the last lap to `name`; returns this lap's seconds."""
        now = time.perf_counter()
        seconds = now - self.last
        self.laps[name] = self.laps.get(name, 0.0) + seconds
        self.last = now
        return seconds

    def elapsed(self) -> float:
        """Seconds since the start, now."""
        return time.perf_counter() - self.started

    def total(self) -> float:
        """Seconds from the start to the last lap."""
        return self.last - self.started

    def costs(self, prefix: str = "phase_") -> dict[str, float]:
        """The laps as cost_s entries: {"<prefix><name>_s": seconds}."""
        return {f"{prefix}{name}_s": seconds for name, seconds in self.laps.items()}
