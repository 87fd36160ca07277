"""KernelBench's metrics, and the per-problem view of a results file they are computed on.

Definitions (KernelBench, `fast_p`): over all N problems of a run,
    fast_p = (1/N) * #{problems correct AND speedup > p}
with fast_0 = the correctness rate (a correct kernel counts for p = 0 even where no speed
was measured, e.g. on the CPU). The geometric-mean speedup is over correct problems that
have a measured speedup. A problem with several attempts (samples, agent rounds) counts as
correct when any attempt is; its speedup over each baseline is the best correct attempt's.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kernelloop.evals.claims import compare_claims
from kernelloop.evals.records import (
    COMPILE,
    EAGER,
    BaselineMetrics,
    BenchRecord,
    BenchSummary,
    Mode,
    ProblemSummary,
    RunEnvironment,
)
from kernelloop.graph.usage import Usage
from kernelloop.records import Status

FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)

# Most useful first: a problem's best_status is that of its most advanced attempt.
_STATUS_RANK = [Status.correct, Status.incorrect, Status.runtime_error, Status.timeout,
                Status.compile_error, Status.rejected]


@dataclass(frozen=True)
class Outcome:
    """One problem for the metrics: was it solved, and how fast (None: not measured)."""

    correct: bool
    speedup: float | None = None


def _require(outcomes: Sequence[Outcome]) -> None:
    if not outcomes:
        raise ValueError("no problems to score")


def correctness_rate(outcomes: Sequence[Outcome]) -> float:
    _require(outcomes)
    return sum(o.correct for o in outcomes) / len(outcomes)


def fast_p(outcomes: Sequence[Outcome], p: float) -> float:
    """Share of all problems that are correct with speedup > p; p = 0 is the correctness rate."""
    _require(outcomes)
    if p == 0:
        return correctness_rate(outcomes)
    return sum(o.correct and o.speedup is not None and o.speedup > p for o in outcomes) / len(outcomes)


def geomean_speedup(outcomes: Sequence[Outcome]) -> float | None:
    """Geometric mean of the speedups of correct problems that have one; None when none do."""
    speedups = [o.speedup for o in outcomes if o.correct and o.speedup is not None]
    if not speedups:
        return None
    if any(s <= 0 or not math.isfinite(s) for s in speedups):
        raise ValueError(f"speedups must be positive and finite, got {speedups}")
    return math.exp(sum(math.log(s) for s in speedups) / len(speedups))


def p_label(p: float) -> str:
    """1.5 -> '1.5', 1.0 -> '1': the keys of a fast_p dict."""
    return f"{p:g}"


def baseline_metrics(outcomes: Sequence[Outcome], thresholds: Iterable[float] = FAST_P_THRESHOLDS) -> BaselineMetrics:
    """fast_p over p > 0 is None (null in summary.json) when no correct problem was timed: unknown, not 0%."""
    timed = sum(o.correct and o.speedup is not None for o in outcomes)
    return BaselineMetrics(fast_p={p_label(p): fast_p(outcomes, p) if p == 0 or timed else None for p in thresholds},
                           geomean_speedup=geomean_speedup(outcomes), timed=timed)


def add_usage(usages: Iterable[Usage | None]) -> Usage | None:
    """The sum of some runs' tokens (None where none has any); a cost only when every run has one."""
    known = [u for u in usages if u is not None]
    if not known:
        return None
    costs = [u.cost_usd for u in known]
    return Usage(calls=sum(u.calls for u in known), prompt_tokens=sum(u.prompt_tokens for u in known),
                 completion_tokens=sum(u.completion_tokens for u in known),
                 reasoning_tokens=sum(u.reasoning_tokens for u in known),
                 cost_usd=None if None in costs else sum(c for c in costs if c is not None))


def tokens_per_solved(mode: Mode, tokens: Usage | None, solved: int) -> tuple[float | None, str]:
    """Total tokens per solved problem, or None and why not."""
    if mode is not Mode.agent:
        return None, "no model calls"
    if tokens is None:
        return None, "not recorded"
    if solved == 0:
        return None, "no problem solved"
    return tokens.total_tokens / solved, ""


def solve_rate_curve(times_to_solve_s: Sequence[float | None], total: int, grid_s: Sequence[float]) -> list[float]:
    """Share of `total` problems solved within each time of `grid_s` (None: never solved)."""
    if total <= 0:
        raise ValueError("no problems to score")
    solved = [t for t in times_to_solve_s if t is not None]
    return [sum(t <= limit for t in solved) / total for limit in grid_s]


# --------------------------------------------------------------------------- per problem


def summarize_problem(name: str, records: Sequence[BenchRecord]) -> ProblemSummary:
    """Fold the records of one problem into one row; `attempts` counts the verified ones."""
    ordered = sorted(records, key=lambda r: r.attempt)
    correct = [r for r in ordered if r.correct]
    speedups: dict[str, float] = {}
    for record in correct:
        for baseline, value in record.speedups.items():
            speedups[baseline] = max(value, speedups.get(baseline, value))
    statuses = [r.status for r in ordered if r.status is not None]
    best = min(statuses, key=_STATUS_RANK.index) if statuses else None
    shown = next((r for r in ordered if r.status is best), ordered[-1]) if ordered else None
    # the workloads of its fastest correct attempt (else of the attempt its reason is shown from)
    fastest = max(correct, key=lambda r: r.speedups.get(EAGER, 0.0)) if correct else shown
    baseline_ms = {}
    for record in ordered:
        baseline_ms.update({n: t.median_ms for n, t in record.timings.items() if n != "candidate"})
    return ProblemSummary(
        problem=name, solved=bool(correct), attempts=len(statuses), best_status=best,
        reason=shown.reason if shown else "not run", speedups=speedups,
        time_to_solve_s=correct[0].elapsed_s if correct else None,
        time_spent_s=max((r.elapsed_s for r in ordered), default=0.0), baseline_ms=baseline_ms,
        suspicious=sorted({line for r in correct for line in r.suspicious}),
        tokens=add_usage(r.tokens for r in ordered),
        workloads=dict(fastest.workloads) if fastest else {}, slowest_workload=fastest.slowest_workload if fastest else "")


def outcomes_against(problems: Sequence[ProblemSummary], baseline: str) -> list[Outcome]:
    return [Outcome(correct=p.solved, speedup=p.speedups.get(baseline)) for p in problems]


HOST_BOUND_SPREAD = 2.0  # a baseline's median at least this many times its fastest call
SAME_DEVICE_WORK = 1.15  # and its fastest call within 15% of eager's: the same device work


def host_bound_baseline_notes(records: Sequence[BenchRecord]) -> list[str]:
    """Why a baseline reads slower than eager on a tiny problem, from its own samples: its fastest call
    matches eager's (the same device work) while its median is far above it, so the difference is the
    host's per-call work that a CUDA-event bracket around each call takes in."""
    notes = []
    for record in records:
        eager = record.timings.get(EAGER)
        for name, stats in sorted(record.timings.items()):
            if name in (EAGER, "candidate") or eager is None or stats.min_ms <= 0:
                continue
            if stats.median_ms >= HOST_BOUND_SPREAD * stats.min_ms and stats.min_ms <= SAME_DEVICE_WORK * eager.min_ms:
                note = (f"{record.problem}: {name} reads {stats.median_ms:.4f} ms (median) against eager's "
                        f"{eager.median_ms:.4f} ms, but its fastest call took {stats.min_ms:.4f} ms, as eager's "
                        f"{eager.min_ms:.4f} ms, so the device work looks the same; what the median adds is most likely "
                        f"{name}'s per-call host work (guards, the compiled wrapper), which a CUDA-event bracket "
                        "around each call takes in when it outlasts the device work (a reading of the samples, not "
                        "measured apart); KernelBench's time_execution_with_cuda_event brackets each "
                        f"call the same way. A speedup over {name} on a problem this small measures that overhead.")
                if note not in notes:
                    notes.append(note)
    return notes


def summarize(suite: str, mode: Mode, problem_names: Sequence[str], records: Sequence[BenchRecord],
              notes: Sequence[str] = ()) -> BenchSummary:
    """The summary over the given problems (in that order); a problem with no record counts as unsolved."""
    if not problem_names:
        raise ValueError("no problems to score")
    by_problem: dict[str, list[BenchRecord]] = defaultdict(list)
    for record in records:
        by_problem[record.problem].append(record)
    rows = [summarize_problem(name, by_problem.get(name, [])) for name in problem_names]
    baselines = [EAGER, COMPILE, *sorted({b for row in rows for b in row.speedups} - {EAGER, COMPILE})]
    by_baseline = {b: baseline_metrics(outcomes_against(rows, b)) for b in baselines}
    chosen = set(problem_names)
    environments: list[RunEnvironment] = []
    for record in records:
        if record.problem in chosen and record.environment not in environments:
            environments.append(record.environment)
    verified = mode is not Mode.baselines
    solved = sum(r.solved for r in rows)
    claims = compare_claims([r for r in records if r.problem in chosen])
    tokens = add_usage(r.tokens for r in rows)
    per_solved, tokens_note = tokens_per_solved(mode, tokens, solved)
    return BenchSummary(
        suite=suite, mode=mode, problems=len(rows), attempts=sum(r.attempts for r in rows),
        solved=solved,
        correctness_rate=correctness_rate(outcomes_against(rows, EAGER)) if verified else None,
        fast_p=by_baseline[EAGER].fast_p if verified else {},
        geomean_speedup=by_baseline[EAGER].geomean_speedup,
        fast_p_compile=by_baseline[COMPILE].fast_p if verified else {},
        geomean_speedup_compile=by_baseline[COMPILE].geomean_speedup,
        by_baseline=by_baseline if verified else {}, per_problem=rows, tokens=tokens, tokens_per_solved=per_solved,
        tokens_note=tokens_note, environments=environments, claims=claims,
        notes=[*notes, *host_bound_baseline_notes([r for r in records if r.problem in chosen])])
