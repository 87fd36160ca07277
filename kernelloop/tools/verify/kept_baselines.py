"""One verification's use of the baseline timings kept across processes (trusted_cache.py): the
record it found (its torch.compile baselines are then not compiled), or, where none was kept, the
record it leaves once the candidate's process is gone (the baselines timed alone)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kernelloop.problem import ProblemError
from kernelloop.records import TimingStats
from kernelloop.tools.profile.timing import speedup_from_rounds
from kernelloop.tools.verify import trusted_cache
from kernelloop.tools.verify.reference_server import ReferenceServer
from kernelloop.tools.verify.speed import SpeedJudgement, summarize_all

CACHE_ROUNDS = 50  # rounds of the baselines alone, timed for a cache record


@dataclass
class KeptBaselines:
    """The cache lookup of one verification, and what its timing did with the baselines."""

    key: str | None = None  # None: the trusted cache is off, or nothing was looked up (no timing)
    asked: list[str] = field(default_factory=list)  # the torch.compile baselines a record must hold
    record: dict | None = None  # a complete record found for `key`
    timed: dict = field(default_factory=dict)  # filled by drive_timing: "timed" (names), "compile_s"
    stored: bool = False

    @property
    def skip(self) -> list[str]:
        """The baselines this verification's timing skips as cached."""
        return list(self.asked) if self.record is not None else []

    def store(self, cache: trusted_cache.BaselineCache | None, server: ReferenceServer) -> None:
        """After a verification that compiled and timed the baselines with no cached record: time
        them once more, alone (no candidate process exists now), and keep that record."""
        timed = self.timed.get("timed") or []
        if cache is None or not self.key or self.record is not None or not set(self.asked) <= set(timed) \
                or not server.alive():
            return
        try:
            samples = server.ask("block", {"rounds": CACHE_ROUNDS}).get("samples_ms") or {}
            eager = samples["eager"]
            record = {"timings": {name: {**summarize_all({name: samples[name]})[name].model_dump(),
                                         "over_eager": speedup_from_rounds(samples[name], eager)}
                                  for name in self.asked},
                      "eager": summarize_all({"eager": eager})["eager"].model_dump(),
                      "compile_s": {k: v for k, v in (self.timed.get("compile_s") or {}).items() if k in self.asked},
                      "rounds": CACHE_ROUNDS, "measured_at": time.time()}
            cache.store(self.key, record)
            self.stored = True
        except (ProblemError, KeyError, TypeError, ValueError, OSError):  # no record this time; the verdict stands
            return

    def costs(self) -> dict[str, float]:
        """The verdict's cost_s entries of the cache: when the record used was measured, or that one was stored."""
        if self.record is not None:
            return {"baselines_cached_at": float(self.record.get("measured_at", 0.0))}
        return {"baselines_cache_stored": 1.0} if self.stored else {}


def with_cached_baselines(judged: SpeedJudgement, record: dict) -> SpeedJudgement:
    """A judgement whose torch.compile baselines were not run here: their times from the record,
    and the speedup over each this run's speedup over eager (paired rounds) times the record's
    baseline/eager ratio (its own paired rounds), labelled as cached."""
    when = trusted_cache.describe(record)
    for name, stats in (record.get("timings") or {}).items():
        if name in judged.timings or not isinstance(stats, dict):
            continue
        fields = {k: v for k, v in stats.items() if k in TimingStats.__dataclass_fields__}
        judged.timings[name] = TimingStats.model_validate(fields)
        ratio = stats.get("over_eager")
        if judged.speedup is not None and isinstance(ratio, (int, float)) and ratio > 0:
            judged.speedups[name] = judged.speedup * float(ratio)
        judged.warnings.append(f"{name} baseline: {when} on the same problem source, GPU, driver, torch and triton "
                               f"(not compiled in this verification; its speedup is this run's speedup over eager times "
                               f"the recorded {name}/eager ratio)")
    return judged
