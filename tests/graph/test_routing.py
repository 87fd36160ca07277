"""Routing is a pure function of the state: hand-built states in, destinations out."""

import pytest
from langgraph.types import Send

from kernelloop.agents.planner import Plan
from kernelloop.agents.records import Attempt, Critique
from kernelloop.graph import routing
from kernelloop.graph.state import RunSettings, rank_best
from kernelloop.records import Status, TimingStats, Verdict

TIMED = {"candidate": TimingStats(name="candidate", median_ms=1.0, iqr_ms=0.1, min_ms=0.9, mean_ms=1.0, samples=9)}


def attempt(id_: str, status: Status | None, speedup: float | None = None, rel_err: float | None = None,
            code: str = "class ModelNew: pass", model_error: str | None = None, timed: bool = True) -> Attempt:
    round_, index = (int(part) for part in id_[1:].split("c"))
    verdict = None if status is None else Verdict(
        status=status, reason="correct" if status is Status.correct else "mismatch", rel_err=rel_err,
        speedup=speedup, speedups={"eager": speedup} if speedup else {},
        timings=TIMED if (status is Status.correct and timed) else {})
    return Attempt(id=id_, round=round_, index=index, backend="triton", code=code if not model_error else "",
                   verdict=verdict, model_error=model_error)


def state(attempts=(), phase="critiqued", round_=1, critiques=(), **settings) -> dict:
    attempts = list(attempts)
    best = rank_best(attempts, settings.get("baseline", "eager"))
    return {"problem": {"name": "relu", "path": "relu.py", "source": "class Model: ..."},
            "settings": RunSettings(candidates=2, **settings).model_dump(),
            "plan": Plan(text="one kernel").model_dump(mode="json"), "round": round_, "phase": phase,
            "attempts": [a.model_dump(mode="json") for a in attempts], "best_id": best.id if best else None,
            "critiques": [c.model_dump(mode="json") for c in critiques], "hints": ["use BLOCK=256"], "spent_s": 10.0}


def test_target_met_stops():
    s = state([attempt("r1c0", Status.correct, speedup=1.3)], target_speedup=1.2)
    assert routing.stop_reason(s) == "target_met"
    assert routing.after_critic(s) == "finalize"


def test_correct_but_slower_than_the_target_goes_on_to_another_round():
    s = state([attempt("r1c0", Status.correct, speedup=1.1), attempt("r1c1", Status.incorrect)], target_speedup=1.2)
    assert routing.stop_reason(s) is None
    sends = routing.after_critic(s)
    assert [send.arg["attempt_id"] for send in sends] == ["r2c0", "r2c1"]
    assert all(isinstance(send, Send) and send.node == "coder" for send in sends)


def test_correct_where_speed_cannot_be_measured_stops_as_unmeasured():
    s = state([attempt("r1c0", Status.correct, timed=False)], target_speedup=1.2)
    assert routing.stop_reason(s) == "correct_unmeasured"


def test_no_target_stops_at_the_first_correct_kernel():
    assert routing.stop_reason(state([attempt("r1c0", Status.correct, timed=False)], target_speedup=None)) == "target_met"


def test_target_against_a_named_baseline():
    a = attempt("r1c0", Status.correct, speedup=2.0)
    a.verdict.speedups["compile"] = 1.1
    assert routing.stop_reason(state([a], target_speedup=1.2, baseline="compile")) is None
    assert routing.stop_reason(state([a], target_speedup=1.2, baseline="eager")) == "target_met"


@pytest.mark.parametrize("changes, reason", [
    ({"spent_s": 901.0}, "budget_spent"),
    ({"round": 3}, "rounds_exhausted"),
    ({"stop_requested": True}, "stopped_by_user"),
])
def test_stop_conditions(changes, reason):
    s = state([attempt("r1c0", Status.incorrect)], max_rounds=3, budget_s=900) | changes
    assert routing.stop_reason(s) == reason


def test_a_round_where_every_model_call_failed_stops():
    s = state([attempt("r1c0", None, model_error="LLMError: 503"), attempt("r1c1", None, model_error="LLMError: 503")])
    assert routing.stop_reason(s) == "model_unavailable"
    partly = state([attempt("r1c0", None, model_error="LLMError: 503"), attempt("r1c1", Status.incorrect)])
    assert routing.stop_reason(partly) is None


def test_interactive_runs_go_to_the_review_between_rounds():
    s = state([attempt("r1c0", Status.incorrect)], interactive=True)
    assert routing.after_critic(s) == "review_round"
    assert routing.after_round_review(s | {"phase": "round_reviewed", "stop_requested": True}) == "finalize"
    assert len(routing.after_round_review(s | {"phase": "round_reviewed"})) == 2


def test_routers_raise_on_a_state_they_do_not_expect():
    with pytest.raises(ValueError, match="after_critic reached in phase 'verified'"):
        routing.after_critic(state(phase="verified"))
    with pytest.raises(ValueError, match="after_plan_review"):
        routing.after_plan_review(state(phase="critiqued"))
    with pytest.raises(ValueError, match="no plan"):
        routing.coder_briefs(state(phase="critiqued") | {"plan": None})


def test_briefs_carry_each_lineage_its_own_previous_attempt_best_hints_and_critique():
    critique = Critique(round=1, per_attempt={"r1c1": ["fix the mask"]}, next_steps=["start from r1c0"])
    s = state([attempt("r1c0", Status.correct, speedup=1.1, code="BEST"), attempt("r1c1", Status.incorrect,
                                                                                  code="MINE")],
              critiques=[critique], target_speedup=2.0)
    first, second = routing.coder_briefs(s)
    assert (first.attempt_id, first.round, first.index) == ("r2c0", 2, 0)
    assert first.best is None  # its own previous attempt is the best: shown once, as `previous`
    assert first.previous.code == "BEST"
    assert second.best.code == "BEST" and second.previous.code == "MINE"
    assert second.critique.splitlines() == ["- fix the mask", "- start from r1c0"]
    assert second.hints == ["use BLOCK=256"]
    assert [o.id for o in second.others] == ["r1c0"] and second.others[0].code == ""


def test_rank_best_prefers_correct_and_fast_then_the_closest_failure():
    slow, fast = attempt("r1c0", Status.correct, speedup=1.1), attempt("r1c1", Status.correct, speedup=1.4)
    unmeasured = attempt("r2c0", Status.correct, timed=False)
    close, far = attempt("r2c1", Status.incorrect, rel_err=0.01), attempt("r3c0", Status.incorrect, rel_err=0.9)
    assert rank_best([slow, unmeasured, fast, close]).id == "r1c1"
    assert rank_best([unmeasured, close]).id == "r2c0"
    assert rank_best([far, close, attempt("r3c1", Status.compile_error)]).id == "r2c1"
    assert rank_best([attempt("r1c0", None, model_error="down")]) is None
