"""A problem with workloads in the loop: the planner's, coders' and critic's prompts say which
workloads are judged, the critic names the workload a kernel failed or is slowest on, and the
run's target applies to the geometric mean (the verdict's headline speedup)."""

from __future__ import annotations

from pathlib import Path

from kernelloop.agents.coder import CoderBrief, coder_messages
from kernelloop.agents.critic import critique_round
from kernelloop.agents.planner import planner_messages, workloads_line
from kernelloop.agents.records import Attempt
from kernelloop.graph.routing import target_met
from kernelloop.records import Code, Status, Verdict, WorkloadResult

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"
WORKLOADS_SOURCE = (PROBLEMS / "rowsum_workloads.py").read_text()
PLAIN_SOURCE = (PROBLEMS / "rowsum.py").read_text()


def _attempt(verdict: Verdict) -> Attempt:
    return Attempt(id="r1c0", round=1, index=0, backend="triton", code="class ModelNew: ...", verdict=verdict)


def test_every_prompt_names_the_workloads_judged():
    line = workloads_line(WORKLOADS_SOURCE)
    assert "'cols_128', 'cols_3000'" in line and "geometric mean" in line
    plan = planner_messages("rowsum_workloads", WORKLOADS_SOURCE, None, "triton", "eager", 2.0)[0].content
    brief = CoderBrief(attempt_id="r1c0", round=1, index=0, candidates=1, backend="triton",
                       problem_name="rowsum_workloads", problem_source=WORKLOADS_SOURCE, plan="sum rows")
    coder = coder_messages(brief)[0].content
    assert line in plan and line in coder and "Don't hard-code one workload's sizes" in coder


def test_a_problem_without_workloads_gets_the_prompts_it_had():
    assert workloads_line(PLAIN_SOURCE) == ""
    plan = planner_messages("rowsum", PLAIN_SOURCE, None, "triton", "eager", 2.0)[0].content
    assert "workload" not in plan


def test_the_critic_names_the_workload_a_kernel_is_wrong_on():
    verdict = Verdict(status=Status.incorrect, code=Code.mismatch, rel_err=1.0,
                      reason="wrong on workload 'cols_3000': max_abs_err 40 (trial 4)",
                      workloads={"cols_128": WorkloadResult(name="cols_128", trials=3),
                                 "cols_3000": WorkloadResult(name="cols_3000", status=Status.incorrect, trials=3,
                                                             reason="max_abs_err 40")})
    critique = critique_round([_attempt(verdict)], None)
    fixes = critique.per_attempt["r1c0"]
    assert fixes[0].startswith("wrong on workload 'cols_3000' (right on 'cols_128')")
    assert "workload 'cols_3000'" in critique.findings[0]


def test_the_critic_names_the_slowest_workload_and_the_target_is_the_geometric_mean():
    verdict = Verdict(status=Status.correct, code=Code.correct, reason="correct on 7 input sets", speedup=1.5,
                      speedups={"eager": 1.5}, slowest_workload="cols_3000",
                      workloads={"cols_128": WorkloadResult(name="cols_128", speedup=2.25, speedups={"eager": 2.25}),
                                 "cols_3000": WorkloadResult(name="cols_3000", speedup=1.0, speedups={"eager": 1.0})})
    attempt = _attempt(verdict)
    fixes = critique_round([attempt], attempt, target=2.0).per_attempt["r1c0"]
    assert any(fix.startswith("slowest on workload 'cols_3000' (1x over eager") for fix in fixes)
    # 2.25x on one workload does not meet a 2x target: the geometric mean (1.5x) is what counts
    assert target_met(attempt, 2.0, "eager") is None
    assert target_met(attempt, 1.5, "eager") == "target_met"
