"""Where the run goes next: pure functions of the state (no clock, no files, no model).

Routing sits on conditional edges rather than in `Command(goto=...)` returns, so that a fork
(`update_state(..., as_node="critic")`) re-routes from the changed state: a new hint or
target reaches the next coders. Time enters only through `spent_s`, which the nodes keep.
"""

from __future__ import annotations

from typing import Literal

from langgraph.types import Send

from kernelloop.agents.coder import CoderBrief, PriorAttempt
from kernelloop.agents.records import Attempt
from kernelloop.graph.state import (
    State,
    attempts_of,
    best_of,
    critiques_of,
    plan_of,
    problem_of,
    settings_of,
    start_of,
)
from kernelloop.records import Status

StopReason = Literal["target_met", "correct_unmeasured", "stopped_by_user", "budget_spent", "rounds_exhausted",
                     "model_unavailable"]


def target_met(best: Attempt | None, target: float | None, baseline: str) -> StopReason | None:
    """'target_met' when the best is correct and fast enough; 'correct_unmeasured' when speed can't be
    measured where it ran (CPU), so a correct kernel is as far as the run can get."""
    if best is None or best.verdict is None or best.verdict.status is not Status.correct:
        return None
    speedup = best.speedup_vs(baseline)
    if target is None or (speedup is not None and speedup >= target):
        return "target_met"
    if speedup is None and not best.verdict.timings:
        return "correct_unmeasured"
    return None


def stop_reason(state: State) -> StopReason | None:
    """Why the run should end now, or None to go on. Checked after every round and review."""
    settings = settings_of(state)
    reached = target_met(best_of(state), settings.target_speedup, settings.baseline)
    if reached:
        return reached
    if state.get("stop_requested"):
        return "stopped_by_user"
    if state.get("spent_s", 0.0) >= settings.budget_s:
        return "budget_spent"
    if state.get("round", 0) >= settings.max_rounds:
        return "rounds_exhausted"
    last_round = [a for a in attempts_of(state) if a.round == state.get("round", 0)]
    if last_round and all(a.model_error for a in last_round):
        return "model_unavailable"
    return None


def coder_briefs(state: State) -> list[CoderBrief]:
    """The next round's coder briefs: plan, hints, best so far, each lineage's last try, critique.

    After round 0 (the start kernel) every coder begins from it: as the best so far when it is
    correct, else as the attempt to fix, with its verdict and critique."""
    settings, problem, plan = settings_of(state), problem_of(state), plan_of(state)
    if plan is None:
        raise ValueError("no plan in the state: the planner must run before the coders")
    next_round = state.get("round", 0) + 1
    last = [a for a in attempts_of(state) if a.round == next_round - 1]
    best = best_of(state)
    critiques = critiques_of(state)
    critique = critiques[-1] if critiques and critiques[-1].round == next_round - 1 else None
    backend = plan.backend if settings.backend == "auto" else settings.backend
    start = next((a for a in last if a.round == 0), None)
    briefs = []
    for index in range(settings.candidates):
        if start is not None:
            previous = None if start.status == "correct" else start
        else:
            previous = next((a for a in last if a.index == index), None)
        lineage = previous or start  # whose fixes in the critique this coder reads first
        shown_best = best if best is not None and best.status == "correct" and (
            previous is None or best.id != previous.id) else None
        briefs.append(CoderBrief(
            attempt_id=f"r{next_round}c{index}", round=next_round, index=index, candidates=settings.candidates,
            backend=backend, baseline=settings.baseline, model=settings.model, problem_name=problem.name,
            problem_source=problem.source, plan=plan.text, hints=list(state.get("hints") or []),
            best=PriorAttempt.of(shown_best, settings.baseline) if shown_best else None,
            previous=PriorAttempt.of(previous, settings.baseline) if previous else None,
            others=[PriorAttempt.of(a, settings.baseline, with_code=False) for a in last
                    if a is not previous and a is not start],
            critique=critique.for_coder(lineage.id if lineage else None) if critique else ""))
    return briefs


def coder_sends(state: State) -> list[Send]:
    """One Send per candidate; each coder gets its brief as its whole input."""
    return [Send("coder", brief.model_dump(mode="json")) for brief in coder_briefs(state)]


def needs_warm_start(state: State) -> bool:
    """A start kernel was given and is not an attempt yet."""
    start = start_of(state)
    return start is not None and start.has_kernel and not any(a.round == 0 for a in attempts_of(state))


def after_plan_review(state: State) -> Literal["finalize", "warm_start"] | list[Send]:
    """planner/review -> the start kernel (attempt 0) when one was given, else the coders; finalize
    when the user stopped at the plan."""
    if state.get("phase") not in ("plan_reviewed",):
        raise ValueError(f"after_plan_review reached in phase {state.get('phase')!r}")
    if state.get("stop_requested"):
        return "finalize"
    return "warm_start" if needs_warm_start(state) else coder_sends(state)


def after_critic(state: State) -> Literal["finalize", "review_round"] | list[Send]:
    """critic -> finalize when a stop condition holds, a review when interactive, else the next round."""
    if state.get("phase") != "critiqued":
        raise ValueError(f"after_critic reached in phase {state.get('phase')!r}")
    if stop_reason(state):
        return "finalize"
    return "review_round" if settings_of(state).interactive else coder_sends(state)


def after_round_review(state: State) -> Literal["finalize"] | list[Send]:
    """review -> finalize when the user stopped (or a condition holds), else the next round."""
    if state.get("phase") != "round_reviewed":
        raise ValueError(f"after_round_review reached in phase {state.get('phase')!r}")
    return "finalize" if stop_reason(state) else coder_sends(state)
