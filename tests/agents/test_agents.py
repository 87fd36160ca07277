"""Planner, coder and critic on their own: prompts, parsing, the critic's rules."""

import json
from pathlib import Path

import jinja2
import pytest

from kernelloop.agents.coder import CoderBrief, coder_messages, write_candidate
from kernelloop.agents.critic import critique_round
from kernelloop.agents.planner import ReferenceFacts, parse_plan, planner_messages, reference_facts
from kernelloop.agents.prompts import render
from kernelloop.agents.records import Attempt
from kernelloop.agents.turns import KeyedReplayChatClient, RecordedTurn, ReplayExhausted
from kernelloop.problem import Problem
from kernelloop.records import Code, Status, Verdict
from kernelloop.tools.verify.speed import judge_speed
from tests.graph.scripted import RELU_PROBLEM, ScriptedChatClient, default_script

SPEED_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "speed"
BRIEF = CoderBrief(attempt_id="r1c0", round=1, index=0, candidates=2, backend="triton", problem_name="relu",
                   problem_source="class Model: ...", plan="one pass")


def test_a_template_value_left_out_is_an_error_not_a_hole_in_the_prompt():
    with pytest.raises(jinja2.UndefinedError):
        render("coder.j2", index=0)


def test_the_coder_prompt_names_the_backend_asked_for():
    assert "@triton.jit" in coder_messages(BRIEF)[0].content
    cuda = coder_messages(BRIEF.model_copy(update={"backend": "cuda"}))[0].content
    assert "load_inline" in cuda and "@triton.jit" not in cuda


def test_the_planner_reads_backend_and_expected_speedup_and_sees_the_roofline():
    plan = parse_plan("## Strategy\nfuse\n## Backend\n**CUDA**\n## Expected speedup\nabout 1.8x over eager", "triton")
    assert (plan.backend, plan.expected_speedup) == ("cuda", 1.8)
    assert parse_plan("no sections at all", "triton").backend == "triton"
    facts = ReferenceFacts(flops=2e9, bytes_moved=4e6, peak_tflops=100.0, peak_gbps=2000.0, roofline_ms=0.02,
                           device="H100")
    prompt = planner_messages("mm", "class Model: ...", facts, "triton", "eager", 1.2)[0].content
    assert "roofline: compute-bound on H100" in prompt and "roofline floor: 0.02 ms" in prompt


def test_reference_facts_count_flops_and_bytes_without_running_the_reference():
    facts = reference_facts(Problem.from_file(RELU_PROBLEM), "NVIDIA H100 80GB HBM3")
    assert facts.flops == 0 and facts.bytes_moved == 2 * 37 * 129 * 4
    assert facts.bound == "memory" and facts.roofline_ms > 0


def test_write_candidate_records_a_failed_model_call_on_the_attempt():
    def down(key, prompt):
        raise TimeoutError("no answer within 600 s")

    attempt, turn = write_candidate(BRIEF, ScriptedChatClient(down))
    assert turn is None and attempt.status == "no_candidate"
    assert attempt.model_error == "TimeoutError: no answer within 600 s"


def test_a_recording_without_the_turn_is_an_error_not_a_model_failure():
    replay = KeyedReplayChatClient([RecordedTurn(key="planner/plan", turn=default_script("planner/plan", ""))])
    with pytest.raises(ReplayExhausted, match="no model turn for coder/r1c0"):
        write_candidate(BRIEF, replay)


def verdict_attempt(id_, verdict):
    return Attempt(id=id_, round=1, index=int(id_[-1]), backend="triton", code="x", verdict=verdict)


def test_the_critic_names_the_fix_for_each_kind_of_failure():
    attempts = [
        verdict_attempt("r1c0", Verdict(status=Status.incorrect, reason="mismatch", code=Code.mismatch, rel_err=0.002,
                                        max_abs_err=0.03)),
        verdict_attempt("r1c1", Verdict(status=Status.rejected, reason="try/except around the launch",
                                        code=Code.try_except)),
        verdict_attempt("r1c2", Verdict(status=Status.runtime_error, reason="crashed with SIGSEGV", code=Code.crashed)),
        verdict_attempt("r1c3", Verdict(status=Status.compile_error, reason="compile: triton failed",
                                        code=Code.compile_failed,
                                        stderr_tail="...\nCompilationError: arange's range must be a power of 2")),
    ]
    critique = critique_round(attempts, best=attempts[0])
    steps = {key: " ".join(value) for key, value in critique.per_attempt.items()}
    assert "accumulate in float32" in steps["r1c0"]
    assert "remove the try/except" in steps["r1c1"]
    assert "mask every load/store" in steps["r1c2"]
    assert "arange's range must be a power of 2" in steps["r1c3"]
    assert critique.next_steps == ["no attempt is correct yet: get correctness first; r1c0 came closest"]


def test_the_critic_branches_on_the_code_not_on_the_words_of_the_reason():
    """A reason that reads like another failure does not mislead it: the code decides."""
    misleading = verdict_attempt("r1c0", Verdict(status=Status.rejected, code=Code.writes_to_inputs,
                                                 reason="try/except, monkeypatch and out of memory"))
    steps = " ".join(critique_round([misleading], best=None).per_attempt["r1c0"])
    assert "never into the inputs" in steps and "remove the try/except" not in steps


def test_the_critic_reads_speed_roofline_and_profile_of_a_correct_kernel():
    """The profile is the one production makes: judge_speed on a measurement recorded on an H100."""
    measurement = json.loads((SPEED_FIXTURES / "honest.json").read_text())
    measurement.pop("recorded")
    judged = judge_speed(measurement)
    fast = verdict_attempt("r1c0", Verdict(status=Status.correct, reason="correct", code=Code.correct, device="cuda",
                                           speedup=0.9, timings=judged.timings, profile=judged.profile.model_dump(),
                                           library_ops=["aten::relu"]))
    critique = critique_round([fast], best=fast, target=1.2)
    text = " ".join(critique.per_attempt["r1c0"])
    for expected in ("0.9x over eager, target 1.2x", "memory-bound", "of H100 SXM's memory bandwidth",
                     "kernels by device time: own relu_kernel 100%", "host/device: a call takes",
                     "GPU NVIDIA H100 80GB HBM3: SM clock 1980-1980 MHz, not throttled",
                     "Nsight Compute: not run for this candidate", "still runs aten::relu in torch"):
        assert expected in text
    assert critique.bound == "memory"
    assert "start from the best kernel (r1c0" in critique.next_steps[0]


def test_turn_latency_and_tokens_land_on_the_attempt():
    def timed(key, prompt):
        turn = default_script(key, prompt)
        return turn.model_copy(update={"latency_s": 42.0, "completion_tokens": 900})

    attempt, _ = write_candidate(BRIEF, ScriptedChatClient(timed))
    assert (attempt.model_s, attempt.completion_tokens, attempt.status) == (42.0, 900, "unverified")


def _incorrect_with_facts(index: int) -> Verdict:
    from kernelloop.records import Localisation
    from kernelloop.tools.verify.localise import describe

    loc = Localisation(output=0, trial=1, shape=[48, 1000], numel=48000, bad=23472 + index, rows=48, rows_bad=48,
                       columns=1000, columns_bad=531, reruns=2, unwritten=23424, unwritten_kind="row_tail",
                       unwritten_region="columns 512-999 (of 1000) were never written, in every row",
                       relation_kind="row_factor", relation="the wrong elements are off by a constant factor per row")
    reason = f"nan: output 0 has 23424 values whose NaN/inf does not match (trial {index})"
    feedback = reason + "\n\nWhere it is wrong:\n" + "\n".join(f"- {line}" for line in describe(loc))
    return Verdict(status=Status.incorrect, code=Code.nonfinite, reason=reason, feedback=feedback, localisation=loc)


def test_the_coder_prompt_shows_each_fact_once_and_its_size_stays_bounded():
    """The verifier's 'Where it is wrong' bullets are not repeated under 'What to do next', and round
    after round the prompt does not grow: feedback and review are cut to their budgets."""
    from kernelloop.agents.coder import CRITIQUE_CHARS, FEEDBACK_CHARS, PriorAttempt

    sizes = []
    for round_ in range(1, 6):
        attempt = verdict_attempt(f"r{round_}c0", _incorrect_with_facts(round_))
        critique = critique_round([attempt], best=attempt)
        brief = BRIEF.model_copy(update={
            "round": round_ + 1, "previous": PriorAttempt.of(attempt.model_copy(update={"code": "x = 1\n" * 20}), "eager"),
            "critique": critique.for_coder(attempt.id) + "\n" + "- padding of a long review\n" * 500})
        prompt = coder_messages(brief)[0].content
        bullets = [line for line in prompt.splitlines() if line.startswith("- ")]
        repeated = {line for line in bullets if bullets.count(line) > 1}
        assert not repeated - {"- padding of a long review"}, repeated
        assert "never written: columns 512-999" in prompt and "covers only part of the row" in prompt
        sizes.append(len(prompt))
    fixed = len(coder_messages(BRIEF)[0].content) + len("x = 1\n" * 20)
    assert max(sizes) <= fixed + FEEDBACK_CHARS + CRITIQUE_CHARS + 600  # the headings and the outcome line
    assert max(sizes) - min(sizes) < 50  # round 6's prompt is round 2's size
