"""The graph's nodes: each does one step's work (model calls, verification, files) and returns an update.

Nodes are where I/O happens; where to go next is decided in routing.py. Every node that runs
alone brings `spent_s` up to date, so the budget check in routing needs no clock. A node that
interrupts re-runs from its start when resumed, so interrupts live in their own small nodes
(review_plan, review_round) and never after a model call.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from langgraph.runtime import Runtime
from langgraph.types import interrupt

from kernelloop.agents.coder import CoderBrief, write_candidate
from kernelloop.agents.critic import advise, critique_round
from kernelloop.agents.planner import Plan, ReferenceFacts, make_plan, planner_messages
from kernelloop.agents.records import Attempt, Critique
from kernelloop.agents.turns import ModelListener, listening, turn_key
from kernelloop.errors import error_line
from kernelloop.graph.context import Context, RunEvent
from kernelloop.graph.report import write_outputs
from kernelloop.graph.routing import stop_reason
from kernelloop.graph.rundir import RunDir
from kernelloop.graph.state import (
    CLEAR,
    Review,
    RunSettings,
    State,
    attempts_of,
    best_of,
    facts_of,
    plan_of,
    problem_of,
    rank_best,
    settings_of,
    start_of,
)
from kernelloop.graph.usage import TurnUsage
from kernelloop.problem import Candidate
from kernelloop.starts import START_ID, backend_of
from kernelloop.tools.profile import ncu_budget

REASONING_TAIL_CHARS = 200  # of streamed reasoning kept for the live view


def _run_dir(runtime: Runtime[Context]) -> RunDir:
    info = runtime.execution_info
    if info is None or not info.thread_id:
        raise ValueError("kernelloop's graph needs a checkpointer and a thread_id in the config")
    return RunDir(runtime.context.workspace_path(), info.thread_id)


def _tick(state: State, context: Context) -> dict:
    """spent_s brought up to now; time before this session began (a dead process, a prompt) is not spent."""
    now = context.clock()
    since = max(state.get("mark_at") or context.session_started_at, context.session_started_at)
    return {"spent_s": state.get("spent_s", 0.0) + max(0.0, now - since), "mark_at": now}


def _emit(runtime: Runtime[Context], event: RunEvent) -> None:
    runtime.stream_writer(event.model_dump(mode="json"))


def _listener(runtime: Runtime[Context], round_: int, attempt_id: str | None = None) -> ModelListener:
    """One model call's retries, streamed reasoning (at most two events a second) and replay
    misses, as events for the live view."""
    tail, said_at = "", 0.0

    def say(kind: Literal["retrying", "reasoning", "asked_live"], message: str) -> None:
        _emit(runtime, RunEvent(kind=kind, round=round_, attempt_id=attempt_id, message=message))

    def on_reasoning(delta: str) -> None:
        nonlocal tail, said_at
        tail = (tail + delta)[-REASONING_TAIL_CHARS:]
        if time.monotonic() - said_at >= 0.5:
            said_at = time.monotonic()
            say("reasoning", " ".join(tail.split()))

    return ModelListener(on_retry=lambda why: say("retrying", why), on_reasoning=on_reasoning,
                         on_live=lambda why: say("asked_live", why))


def planner(state: State, runtime: Runtime[Context]) -> dict:
    """Roofline facts of the reference, then one model call for the plan."""
    context, run = runtime.context, _run_dir(runtime)
    # The run's input, checked once and kept whole: a typo or a wrong hash stops here; a path is read once.
    settings, record = RunSettings.from_input(state.get("settings") or {}), problem_of(state)
    _emit(runtime, RunEvent(kind="planning"))
    problem = run.problem(record.name, record.source, record.trusted)
    facts: ReferenceFacts | None = None
    if context.analyze is not None:
        try:
            facts = context.analyze(problem)
        except Exception as exc:  # the roofline is advice: planning goes on without it, saying why
            facts = ReferenceFacts(notes=[f"no roofline: {error_line(exc)}"])
    start = start_of(state)
    messages = planner_messages(record.name, record.source, facts, settings.backend, settings.baseline,
                                settings.target_speedup, start.source if start is not None else "")
    with listening(_listener(runtime, 0)):
        plan, turn = make_plan(context.client(), messages, settings.backend)
    usage = []
    if turn is not None:
        key = turn_key("planner", "plan")
        plan.turn_file, plan.turn_sha256 = run.save_turn(key, turn)
        usage.append(TurnUsage.of(key, 0, turn).model_dump())
    _emit(runtime, RunEvent(kind="planned", message=plan.model_error or plan.backend))
    return {"problem": record.model_dump(), "settings": settings.model_dump(),
            "facts": facts.model_dump(mode="json") if facts else None, "plan": plan.model_dump(mode="json"),
            "usage": usage, "hints": list(state.get("hints") or []), "round": 0, "attempts": [], "critiques": [],
            "best_id": None, "stop_requested": False, "stop_reason": None, "status": "running",
            "phase": "planned", **_tick(state, context)}


def review_plan(state: State, runtime: Runtime[Context]) -> dict:
    """Interactive: the person approves or edits the plan, may add a hint, or stops."""
    update: dict = {"phase": "plan_reviewed"}
    if settings_of(state).interactive:
        plan = plan_of(state) or Plan(text="")
        answer = Review.model_validate(interrupt({"kind": "plan", "plan": plan.text, "backend": plan.backend,
                                                  "expected_speedup": plan.expected_speedup}))
        if answer.action == "edit":
            if not answer.plan:
                raise ValueError("a plan edit needs the new plan text")
            update["plan"] = plan.model_copy(update={"text": answer.plan, "origin": "user"}).model_dump(mode="json")
        if answer.hint:
            update["hints"] = list(state.get("hints") or []) + [answer.hint]
        update["stop_requested"] = answer.action == "stop"
    return update | _tick(state, runtime.context)


def warm_start(state: State, runtime: Runtime[Context]) -> dict:
    """Attempt 0: the kernel the run starts from, as the only draft of round 0. The verifier and the
    critic then treat it like any round, so it is judged, ranked and critiqued as every attempt is."""
    run, start = _run_dir(runtime), start_of(state)
    if start is None or not start.has_kernel:
        raise ValueError("warm_start reached without a start kernel in the state")
    attempt = Attempt(id=START_ID, round=0, index=0, backend=backend_of(start.source), code=start.source,
                      code_sha256=start.sha256)
    attempt.kernel_file = run.write_kernel(attempt)
    _emit(runtime, RunEvent(kind="coded", round=0, attempt_id=attempt.id, status=attempt.status,
                            message=f"start kernel: {start.line}"))
    return {"drafts": [attempt.model_dump(mode="json")], "phase": "warm_started", **_tick(state, runtime.context)}


def coder(brief: dict, runtime: Runtime[Context]) -> dict:
    """One candidate from one model call (many run in parallel); files written, nothing verified."""
    task, run = CoderBrief.model_validate(brief), _run_dir(runtime)
    _emit(runtime, RunEvent(kind="coding", round=task.round, attempt_id=task.attempt_id))
    with listening(_listener(runtime, task.round, task.attempt_id)):
        attempt, turn = write_candidate(task, runtime.context.client())
    usage = []
    if turn is not None:
        key = turn_key("coder", attempt.id)
        attempt.turn_file, attempt.turn_sha256 = run.save_turn(key, turn)
        usage.append(TurnUsage.of(key, task.round, turn).model_dump())
    if attempt.code:
        attempt.kernel_file = run.write_kernel(attempt)
    _emit(runtime, RunEvent(kind="coded", round=task.round, attempt_id=attempt.id, status=attempt.status,
                            message=attempt.model_error or attempt.extract_error or ""))
    return {"drafts": [attempt.model_dump(mode="json")], "usage": usage}


def _verify_one(attempt: Attempt, run: RunDir, problem, runtime: Runtime[Context], budget_ends_at: float) -> None:
    """A verdict from the verifier (the journal was consulted by the caller). May run in a worker thread.
    `budget_ends_at`: when the run's budget is spent (the context's clock); the verification is cut there."""
    context = runtime.context
    started = time.perf_counter()
    candidate = Candidate(source=attempt.code, path=run.path(attempt.kernel_file) if attempt.kernel_file else None)
    verdict = context.get_verifier().verify(candidate, problem, time_left_s=budget_ends_at - context.clock())
    attempt.verify_s = time.perf_counter() - started
    run.save_verdict(attempt, verdict, attempt.verify_s)  # journal first: a kill now loses nothing
    attempt.verdict = verdict


def verifier(state: State, runtime: Runtime[Context]) -> dict:
    """Verify the round's drafts, then keep the best so far. One at a time on a single verifier
    (one GPU times one kernel at a time; the CPU interpreter is too heavy to share); as many at
    once as a pool takes (`parallel_callers`: one per GPU, plus its compile stage's build slots)."""
    run, settings, record = _run_dir(runtime), settings_of(state), problem_of(state)
    drafts = {d["id"]: Attempt.model_validate(d) for d in state.get("drafts") or []}
    if not drafts:
        raise ValueError("the verifier ran with no drafts: the coders wrote nothing")
    problem = run.problem(record.name, record.source, record.trusted)
    ordered = sorted(drafts.values(), key=lambda a: a.index)
    pending = []
    for attempt in ordered:
        if attempt.verdict is not None or not attempt.code:
            continue
        journaled = run.load_verdict(attempt) if runtime.context.reuse_verdicts else None
        if journaled is not None:  # verified before a kill or in the run being replayed
            attempt.verdict, attempt.verify_s = journaled
            attempt.verdict_reused = True
        else:
            pending.append(attempt)
            _emit(runtime, RunEvent(kind="verifying", round=attempt.round, attempt_id=attempt.id))
    # A pool with a compile stage takes more callers than it has devices: the next candidates build while one is timed.
    judge = runtime.context.get_verifier()
    width = min(len(pending), max(1, int(getattr(judge, "parallel_callers", getattr(judge, "size", 1))))) if pending else 1
    # A verification never runs past the run's budget (a starter that hangs on the CPU overran a 240 s budget by 23 s).
    ends_at = runtime.context.clock() + settings.budget_s - _tick(state, runtime.context)["spent_s"]
    if width > 1:
        with ThreadPoolExecutor(max_workers=width, thread_name_prefix="kernelloop-verify") as workers:
            list(workers.map(lambda attempt: _verify_one(attempt, run, problem, runtime, ends_at), pending))
    else:
        for attempt in pending:
            _verify_one(attempt, run, problem, runtime, ends_at)
    for attempt in ordered:
        _emit(runtime, RunEvent(kind="verified", round=attempt.round, attempt_id=attempt.id, status=attempt.status,
                                speedup=attempt.speedup_vs(settings.baseline),
                                message=attempt.verdict.reason if attempt.verdict else attempt.model_error or ""))
    profiling_s = _profile_round_best([a for a in pending if a.kernel_file], run, problem, state, runtime)
    attempts = [a for a in attempts_of(state) if a.id not in drafts] + sorted(drafts.values(), key=lambda a: a.index)
    best = rank_best(attempts, settings.baseline)
    return {"attempts": [a.model_dump(mode="json") for a in attempts], "drafts": CLEAR,
            "best_id": best.id if best else None, "round": max(a.round for a in drafts.values()),
            "phase": "verified", "profiling_s": profiling_s, **_tick(state, runtime.context)}


def _profile_round_best(verified: list[Attempt], run: RunDir, problem, state: State,
                        runtime: Runtime[Context]) -> float:
    """Nsight Compute on the round's fastest correct attempt, within its share of the run's wall
    clock (ncu_budget.py); the run's profiling seconds so far. Its facts, or why it did not run,
    go into that attempt's profile for the critic."""
    profiling_s = state.get("profiling_s", 0.0)
    timed = [(a.verdict.speedup, a, a.verdict) for a in verified
             if a.verdict is not None and a.verdict.ok and a.verdict.speedup is not None]
    if not timed:
        return profiling_s
    _, best, verdict = max(timed, key=lambda t: t[0])  # verdict is best.verdict, narrowed
    run_s = _tick(state, runtime.context)["spent_s"]
    why_not = ncu_budget.refusal(verdict.device, run_s, profiling_s)
    if not problem.trusted:  # ncu runs the problem in a plain process beside this one, not in the sandbox
        why_not = "Nsight Compute: not run for a problem from outside (it would run that problem outside the sandbox)"
    if why_not:
        verdict.profile = ncu_budget.with_note(verdict.profile, why_not)
        return profiling_s
    assert best.kernel_file is not None  # the caller passes only attempts with a kernel file
    verdict.profile, seconds = ncu_budget.profile_candidate(run.path(best.kernel_file), problem.path,
                                                            verdict.own_kernels, verdict.profile)
    run.save_verdict(best, verdict, best.verify_s or 0.0)
    return profiling_s + seconds


def critic(state: State, runtime: Runtime[Context]) -> dict:
    """Next steps for the coders; skipped when the run is about to stop anyway."""
    context, settings = runtime.context, settings_of(state)
    update: dict = {"phase": "critiqued", **_tick(state, context)}
    if stop_reason({**state, **update}):
        return update  # no model call for a critique nobody will read
    round_ = state.get("round", 0)
    best = best_of(state)
    critique: Critique = critique_round([a for a in attempts_of(state) if a.round == round_], best,
                                      facts_of(state), settings.target_speedup, settings.baseline)
    if settings.critic_model:
        record, plan = problem_of(state), plan_of(state)
        with listening(_listener(runtime, round_)):
            critique, turn = advise(critique, context.client(), record.name, record.source,
                                    plan.text if plan else "", best.code if best and best.status == "correct" else "")
        if turn is not None:
            key = turn_key("critic", f"r{round_}")
            critique.turn_file, critique.turn_sha256 = _run_dir(runtime).save_turn(key, turn)
            update["usage"] = [TurnUsage.of(key, round_, turn).model_dump()]
    _emit(runtime, RunEvent(kind="critiqued", round=round_, message="; ".join(critique.next_steps)))
    return update | {"critiques": list(state.get("critiques") or []) + [critique.model_dump(mode="json")],
                     **_tick({**state, **update}, context)}


def review_round(state: State, runtime: Runtime[Context]) -> dict:
    """Interactive, between rounds: the person adds a hint and goes on, or stops."""
    best = best_of(state)
    answer = Review.model_validate(interrupt({
        "kind": "round", "round": state.get("round", 0), "best": best.outcome() if best else None,
        "spent_s": state.get("spent_s", 0.0), "budget_s": settings_of(state).budget_s}))
    update: dict = {"phase": "round_reviewed", "stop_requested": answer.action == "stop"}
    if answer.hint:
        update["hints"] = list(state.get("hints") or []) + [answer.hint]
    return update | _tick(state, runtime.context)


def finalize(state: State, runtime: Runtime[Context]) -> dict:
    """Write the best kernel, result.json and report.md; the run is finished."""
    reason = stop_reason(state)
    if reason is None:
        raise ValueError("finalize reached while no stop condition holds")
    update = {"stop_reason": reason, "status": "finished", "phase": "finalized", **_tick(state, runtime.context)}
    summary = write_outputs(_run_dir(runtime), {**state, **update}, "finished", reason)
    _emit(runtime, RunEvent(kind="finished", round=state.get("round", 0), status=summary.status,
                            speedup=summary.best_speedup, message=reason))
    return update
