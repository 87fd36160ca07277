"""A BACKWARD problem in the loop: the planner's, coders' and critic's prompts say the backward is
judged, and the critic names the gradient a kernel got wrong or has none of."""

from __future__ import annotations

from pathlib import Path

from kernelloop.agents.coder import CoderBrief, coder_messages
from kernelloop.agents.critic import critique_round
from kernelloop.agents.planner import backward_line, planner_messages
from kernelloop.agents.records import Attempt
from kernelloop.records import Code, Localisation, Status, Verdict

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"
BACKWARD_SOURCE = (PROBLEMS / "silu_backward.py").read_text()
PLAIN_SOURCE = (PROBLEMS / "relu.py").read_text()


def _attempt(verdict: Verdict) -> Attempt:
    return Attempt(id="r1c0", round=1, index=0, backend="triton", code="class ModelNew: ...", verdict=verdict)


def test_every_prompt_says_the_backward_is_judged():
    line = backward_line(BACKWARD_SOURCE)
    assert "backward is judged" in line and "torch.autograd.Function" in line and "Only the forward is timed" in line
    plan = planner_messages("silu_backward", BACKWARD_SOURCE, None, "triton", "eager", 2.0)[0].content
    brief = CoderBrief(attempt_id="r1c0", round=1, index=0, candidates=1, backend="triton",
                       problem_name="silu_backward", problem_source=BACKWARD_SOURCE, plan="one kernel each way")
    assert line in plan and line in coder_messages(brief)[0].content


def test_a_problem_without_backward_gets_the_prompts_it_had():
    assert backward_line(PLAIN_SOURCE) == ""
    assert "backward" not in planner_messages("relu", PLAIN_SOURCE, None, "triton", "eager", 2.0)[0].content


def test_the_critic_names_the_gradient_that_failed():
    wrong = Verdict(status=Status.incorrect, code=Code.wrong_gradient, rel_err=0.2,
                    reason="backward: mismatch: gradient of affine.bias max_abs_err=2 (trial 1)",
                    localisation=Localisation(gradient="affine.bias", trial=1, shape=[129], numel=129, bad=129))
    fixes = critique_round([_attempt(wrong)], None).per_attempt["r1c0"]
    assert fixes[0].startswith("the forward is right but the gradient of affine.bias is wrong")
    assert any("gradient of affine.bias (shape (129,))" in fix for fix in fixes)
    missing = Verdict(status=Status.incorrect, code=Code.no_gradient,
                      reason="backward: gradient of input 0: the candidate computed none (trial 1)")
    fixes = critique_round([_attempt(missing)], None).per_attempt["r1c0"]
    assert fixes[0].startswith("the gradient of input 0 is missing") and "torch.autograd.Function" in fixes[0]
