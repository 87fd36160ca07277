"""A problem's workloads as the parent judges them (problem_meta.workloads: get_inputs' own first).

The trusted job makes every workload's trial sets from the same secret seeds and writes them into
one trial file, get_inputs' own sets first; `Layout` says which sets are whose, so a wrong set is
named by its workload. Each workload is timed by the same timing phase (timing_driver.drive_timing,
once per workload, the trusted job and the candidate's child switched to its sets first); `combine`
turns the per-workload judgements into the verdict's one: the headline speedup is the geometric
mean of the workloads' speedups over eager (a kernel fast on one shape and slow on another does not
hide the slow one behind an average of times), and the slowest workload is named.
Nothing here reads the candidate's process: the layout is the trusted job's, the rest the parent's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from kernelloop.problem import ProblemError
from kernelloop.records import Status, TimingStats, WorkloadResult
from kernelloop.tools.profile.timing import is_win
from kernelloop.tools.verify.compare import Comparison
from kernelloop.tools.verify.speed import SpeedJudgement
from kernelloop.tools.verify.timed_checks import TimedFailure
from kernelloop.tools.verify.timing_driver import Rehearsed


@dataclass(frozen=True)
class Layout:
    """Which trial sets are whose: [(name, how many sets)] in the trial file's order; empty for a
    problem without get_workloads (then nothing changes anywhere)."""

    counts: tuple[tuple[str, int], ...] = ()

    @classmethod
    def checked(cls, raw: object, names: list[str], sets: int, where: str) -> Layout:
        """The trusted job's layout, checked against the names it sent when ready and the sets made."""
        if raw is None and not names:
            return cls()
        items = raw if isinstance(raw, list) else []
        ok = bool(items) and all(isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)
                                 and isinstance(item[1], int) and item[1] > 0 for item in items)
        if not ok or [item[0] for item in items] != names or sum(item[1] for item in items) != sets:
            raise ProblemError(f"{where}: the trusted job's workload sets don't match its workloads")
        return cls(tuple((str(name), int(count)) for name, count in items))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.counts]

    def ranges(self) -> dict[str, tuple[int, int]]:
        """Each workload's sets: [start, stop) in the trial file."""
        found, start = {}, 0
        for name, count in self.counts:
            found[name] = (start, start + count)
            start += count
        return found

    def name_of(self, index: int) -> str | None:
        """The workload set `index` (0-based) belongs to; None without workloads or past them."""
        for name, (start, stop) in self.ranges().items():
            if start <= index < stop:
                return name
        return None

    def results(self, comparisons: list[Comparison]) -> dict[str, WorkloadResult]:
        """Each workload right or wrong on its own sets (every set is compared)."""
        found = {}
        for name, (start, stop) in self.ranges().items():
            mine = comparisons[start:stop]
            wrong = next((c for c in mine if not c.ok), None)
            found[name] = WorkloadResult(name=name, status=Status.incorrect if wrong else Status.correct,
                                         trials=len(mine), reason=wrong.reason if wrong else "")
        return found


def on_workload(name: str | None, reason: str) -> str:
    """A reason that names the workload it is about ("wrong on workload 'cols_3000': ...")."""
    return f"wrong on workload '{name}': {reason}" if name else reason


def timed_failure_on(name: str | None, failed: TimedFailure) -> TimedFailure:
    """A timed call's failure, its reason naming the workload being timed."""
    return dataclasses.replace(failed, reason=f"on workload '{name}': {failed.reason}") if name else failed


def geometric_mean(values: list[float]) -> float | None:
    """Of positive finite values; None for none, or where one is not (no speed to average)."""
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _times(timings: dict[str, TimingStats]) -> dict[str, float]:
    """Each side's time per call, the one its speed counts (counted_ms), else its event median."""
    return {name: stats.counted_ms if stats.counted_ms is not None else stats.median_ms for name, stats in timings.items()}


def speed_results(judged: dict[str, SpeedJudgement], results: dict[str, WorkloadResult]) -> None:
    """Each workload's speed, times and noise floor into its result."""
    for name, one in judged.items():
        result = results.setdefault(name, WorkloadResult(name=name))
        result.speedup, result.speedups = one.speedup, dict(one.speedups)
        result.times_ms, result.noise_floor = _times(one.timings), one.noise_floor


def slowest(results: dict[str, WorkloadResult]) -> str:
    """The workload with the lowest speedup over eager ("" where none was timed)."""
    timed = [(r.speedup, name) for name, r in results.items() if r.speedup is not None]
    return min(timed)[1] if timed else ""


def combine(judged: dict[str, SpeedJudgement | Rehearsed]) -> SpeedJudgement | Rehearsed:
    """The verdict's one judgement from each workload's (get_inputs' own first): a rejection on any
    workload rejects, naming it; the speedup over each baseline is the geometric mean of the
    workloads'; the noise floor the largest; timings, profile and GPU state get_inputs' own (the
    per-workload table holds the rest). One workload: its judgement as it is."""
    if len(judged) == 1:
        return next(iter(judged.values()))
    if any(isinstance(one, Rehearsed) for one in judged.values()):  # the CPU's rehearsal: calls checked in all
        return Rehearsed(checked=sum(one.checked for one in judged.values() if isinstance(one, Rehearsed)))
    speeds = {name: one for name, one in judged.items() if isinstance(one, SpeedJudgement)}
    first_name, first = next(iter(speeds.items()))
    for name, one in speeds.items():
        if one.rejection:
            return dataclasses.replace(one, rejection=f"on workload '{name}': {one.rejection}")
    baselines = [b for b in first.speedups if all(b in one.speedups for one in speeds.values())]
    speedups = {b: mean for b in baselines
                if (mean := geometric_mean([one.speedups[b] for one in speeds.values()])) is not None}
    speedup = geometric_mean([one.speedup for one in speeds.values() if one.speedup is not None]) \
        if all(one.speedup is not None for one in speeds.values()) else None
    floors = [one.noise_floor for one in speeds.values() if one.noise_floor is not None]
    noise = max(floors) if floors else None
    results: dict[str, WorkloadResult] = {}
    speed_results(speeds, results)
    slow = slowest(results)
    lines = [f"geometric mean over {len(speeds)} workloads" + (f", slowest '{slow}'" if slow else "")]
    lines += [f"{name}: {one.speed_source}" for name, one in speeds.items() if one.speed_source]
    named = lambda name, items: [item if name == first_name else f"workload '{name}': {item}" for item in items]  # noqa: E731
    return dataclasses.replace(
        first, speedup=speedup, speedups=speedups, noise_floor=noise,
        win=is_win(speedup, noise or 0.0) if speedup is not None else None,
        suspicious=[s for name, one in speeds.items() for s in named(name, one.suspicious)],
        warnings=[w for name, one in speeds.items() for w in named(name, one.warnings)],
        less_work_than_reference=any(one.less_work_than_reference for one in speeds.values()),
        speed_source="; ".join(lines))
