"""Named laps of wall time, for the verifier's cost reports (where a job's seconds went)."""

from __future__ import annotations

import time


class Stopwatch:
    """Laps since creation, in seconds, each named by what just finished."""

    def __init__(self) -> None:
        self.started = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = now - self.last
        self.last = now

    def total(self) -> float:
        return self.last - self.started
