"""Nsight Compute within a budget: at most PROFILING_SHARE of a run's wall clock goes to it.

ncu replays every launch it profiles 30-40 times, so it runs only where it pays: on the best
correct candidate of a round (or when asked, `kernelloop profile --ncu`), and only while the
time spent on it stays under the share. What it found, or why it did not run (a CPU, no counter
permission, the budget), lands in the candidate's Profile, which the critic reads.
"""

from __future__ import annotations

import time
from pathlib import Path

from kernelloop.records import Profile
from kernelloop.tools.profile.ncu import NcuReport, ncu_facts

PROFILING_SHARE = 0.1
FIRST_ESTIMATE_S = 30.0  # before ncu has run once in this run: a short forward, ~35 passes per launch
NCU_KERNELS = 2  # launches the critic sees, longest first


def refusal(device: str, run_s: float, profiling_s: float, last_ncu_s: float | None = None) -> str | None:
    """Why ncu must not run now (one line), or None when it may: on a GPU, and the run's profiling
    (this one's estimate included) stays within PROFILING_SHARE of its wall clock."""
    if device != "cuda":
        return "Nsight Compute: not run on the CPU (no GPU counters; the Triton interpreter checks correctness only)"
    estimate = last_ncu_s or FIRST_ESTIMATE_S
    if profiling_s + estimate > PROFILING_SHARE * (run_s + estimate):
        return (f"Nsight Compute: skipped to keep profiling within {100 * PROFILING_SHARE:.0f}% of the run's wall "
                f"clock ({profiling_s:.0f} s of {run_s:.0f} s so far; one run takes ~{estimate:.0f} s)")
    return None


def with_ncu(profile: Profile | None, report: NcuReport, seconds: float) -> Profile:
    """A verdict's profile with ncu's facts (or its notes, when it measured nothing) and its cost."""
    record = Profile.model_validate(profile.model_dump()) if profile is not None else Profile()  # a copy
    launches = sorted(report.kernels, key=lambda k: -(k.duration_ms or 0.0))[:NCU_KERNELS]
    record.ncu = [ncu_facts(kernel) for kernel in launches]
    record.ncu_note = "" if record.ncu else "; ".join(report.notes) or "Nsight Compute measured no kernel"
    record.profiling_s = seconds
    return record


def with_note(profile: Profile | None, note: str) -> Profile | None:
    """A verdict's profile saying why ncu did not run (None when there is no profile)."""
    return profile.model_copy(update={"ncu_note": note}) if profile is not None else None


def profile_candidate(candidate: Path, problem: Path, own_kernels: list[str],
                      profile: Profile | None) -> tuple[Profile, float]:
    """Run ncu on one correct candidate; (its profile with ncu's facts, seconds it took)."""
    from kernelloop.tools.profile.ncu_run import run_ncu

    started = time.perf_counter()
    report = run_ncu(candidate, problem, own_kernels)
    seconds = time.perf_counter() - started
    return with_ncu(profile, report, seconds), seconds
