"""How a long batch is going: candidates done of the total, per minute, and the time left at that rate.

The rate counts only what this run judged (a resumed run's earlier candidates took no time now),
so the ETA is that of the work left at today's pace. Read by bench's progress bar on a terminal,
and printed as one plain line now and then where stderr is a log file.
"""

from __future__ import annotations

from dataclasses import dataclass

LOG_EVERY_S = 30.0  # where stderr is no terminal: a pace line at most this often


@dataclass(frozen=True)
class Pace:
    done: int  # candidates judged, this run's and earlier runs' into the same directory
    total: int
    per_minute: float | None  # this run's rate; None before its first candidate
    eta_s: float | None  # seconds left at that rate; None while there is no rate

    @property
    def rate_text(self) -> str:
        return "-/min" if self.per_minute is None else f"{self.per_minute:.1f}/min"

    @property
    def eta_text(self) -> str:
        if self.eta_s is None:
            return "eta -"
        minutes, seconds = divmod(int(round(self.eta_s)), 60)
        return f"eta {minutes // 60}:{minutes % 60:02d}:{seconds:02d}"

    def line(self) -> str:
        return f"{self.done}/{self.total} candidates, {self.rate_text}, {self.eta_text}"


def pace(done_now: int, done_before: int, total: int, elapsed_s: float) -> Pace:
    """done_now: candidates this run judged in elapsed_s seconds; done_before: found done at its start."""
    done = done_before + done_now
    if done_now <= 0 or elapsed_s <= 0:
        return Pace(done, total, None, None)
    per_s = done_now / elapsed_s
    return Pace(done, total, 60 * per_s, max(total - done, 0) / per_s)
