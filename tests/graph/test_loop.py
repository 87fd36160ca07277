"""The whole loop with a scripted model and a scripted verifier: plan, code, verify, critique, repeat."""

import json
import threading
import time
from pathlib import Path

from kernelloop.agents.turns import ModelTurn
from kernelloop.serve.runs import solve
from tests.graph.scripted import FIXED_KERNEL, RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier, default_script

NO_FACTS = {"analyze": lambda problem: None}


def test_the_loop_fixes_the_wrong_kernel_after_the_critique_and_keeps_it_as_best(tmp_path):
    client, verifier = ScriptedChatClient(), ScriptedVerifier(speedup=1.5)
    result = solve(RELU_PROBLEM, chat_client=client, verifier=verifier, workspace=tmp_path, candidates=2,
                   target_speedup=1.2, **NO_FACTS)
    assert (result.status, result.best_id, result.best_speedup) == ("correct", "r2c0", 1.5)
    assert (result.stop_reason, result.run_status, result.attempts, result.rounds) == ("target_met", "finished", 4, 2)
    assert Path(result.best_kernel).read_text() == FIXED_KERNEL
    assert verifier.calls == ["r1c0", "r1c1", "r2c0", "r2c1"]
    assert sorted(client.calls) == ["coder/r1c0", "coder/r1c1", "coder/r2c0", "coder/r2c1", "planner/plan"]
    record = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert [a["verdict"]["status"] for a in record["attempt_list"]] == ["incorrect"] * 2 + ["correct"] * 2
    assert "| r2c0 | correct | 1.5x |" in (Path(result.run_dir) / "report.md").read_text()


def test_round_two_prompts_carry_the_failed_code_the_verifier_feedback_and_the_critique(tmp_path):
    client = ScriptedChatClient()
    solve(RELU_PROBLEM, chat_client=client, verifier=ScriptedVerifier(), workspace=tmp_path, candidates=2, **NO_FACTS)
    first, second = client.prompts["coder/r1c0"], client.prompts["coder/r2c0"]
    assert "Your previous attempt" not in first and "## Strategy" in first
    assert "Your previous attempt (r1c0: incorrect: mismatch" in second
    assert "tl.minimum(x, 0.0)" in second
    assert "negative inputs came out unchanged" in second
    assert "the result is wrong, not imprecise" in second


def test_a_reply_that_does_not_parse_is_judged_without_the_verifier(tmp_path):
    def script(key, prompt):
        if key == "coder/r1c0":
            return ModelTurn(content="```python\nimport torch\nclass ModelNew(nn.Module:\n", finish_reason="length")
        return default_script(key, prompt)

    verifier = ScriptedVerifier()
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(script), verifier=verifier, workspace=tmp_path,
                   candidates=2, **NO_FACTS)
    assert "r1c0" not in verifier.calls
    first = json.loads((Path(result.run_dir) / "result.json").read_text())["attempt_list"][0]
    assert first["verdict"]["status"] == "compile_error"
    assert first["extract_error"].startswith("the reply was cut off inside the code")
    assert first["verdict"]["device"] == "not-run"


def test_a_dead_endpoint_gives_a_default_plan_and_ends_the_run_as_model_unavailable(tmp_path):
    def script(key, prompt):
        raise ConnectionError("endpoint down")

    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(script), verifier=ScriptedVerifier(),
                   workspace=tmp_path, candidates=2, **NO_FACTS)
    assert (result.status, result.stop_reason, result.best_kernel) == ("no_attempt", "model_unavailable", None)
    record = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert [a["model_error"] for a in record["attempt_list"]] == ["ConnectionError: endpoint down"] * 2
    assert "## Strategy" in (Path(result.run_dir) / "report.md").read_text()  # the default plan


def test_rounds_exhausted_still_writes_the_closest_attempt(tmp_path):
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
                   candidates=2, max_rounds=1, **NO_FACTS)
    assert (result.status, result.stop_reason, result.best_id) == ("incorrect", "rounds_exhausted", "r1c0")
    # the closest attempt is kept with the run, but a failure is no best kernel to use
    assert result.best_kernel is None and not (Path(result.run_dir) / "best_kernel.py").exists()
    assert "tl.minimum" in (Path(result.run_dir) / "kernels" / "r1c0.py").read_text()


def test_the_budget_stops_the_run_after_the_round_that_spent_it(tmp_path):
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(delays_s={"coder/r1c0": 0.3}),
                   verifier=ScriptedVerifier(), workspace=tmp_path, candidates=2, budget_s=0.2, **NO_FACTS)
    assert (result.stop_reason, result.rounds) == ("budget_spent", 1)
    assert result.spent_s >= 0.3


def test_the_critic_can_ask_the_model_and_its_advice_reaches_the_coders(tmp_path):
    client = ScriptedChatClient()
    solve(RELU_PROBLEM, chat_client=client, verifier=ScriptedVerifier(), workspace=tmp_path, candidates=1,
          critic_model=True, **NO_FACTS)
    assert "critic/r1" in client.calls
    assert "Use tl.maximum, not tl.minimum." in client.prompts["coder/r2c0"]
    assert "critic/r2" not in client.calls  # no critique once the run stops


class PoolLikeVerifier(ScriptedVerifier):
    """A scripted verifier that says it has two workers and records how many verifications overlap."""

    size = 2

    def __init__(self):
        super().__init__(speedup=1.5)
        self.in_flight = self.most_in_flight = 0
        self.lock = threading.Lock()

    def verify(self, candidate, problem, time_left_s=None):
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.3)  # long enough that two drafts of one round overlap when run together
        try:
            return super().verify(candidate, problem)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_a_round_is_verified_concurrently_up_to_the_pool_size(tmp_path):
    verifier = PoolLikeVerifier()
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=verifier, workspace=tmp_path,
                   candidates=2, target_speedup=1.2, **NO_FACTS)
    assert verifier.most_in_flight == 2
    assert (result.status, result.best_id, result.attempts) == ("correct", "r2c0", 4)


class CompileStagePoolVerifier(PoolLikeVerifier):
    """One device, and a compile stage of one build slot ahead of it (pool.parallel_callers)."""

    size = 1
    parallel_callers = 2


def test_a_pool_with_a_compile_stage_takes_a_round_beyond_its_devices(tmp_path):
    verifier = CompileStagePoolVerifier()
    solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=verifier, workspace=tmp_path,
          candidates=2, target_speedup=1.2, **NO_FACTS)
    assert verifier.most_in_flight == 2


class TooGoodVerifier(ScriptedVerifier):
    """Correct kernels come back with the verifier's 'too good to be true' mark."""

    def verify(self, candidate, problem, time_left_s=None):
        verdict = super().verify(candidate, problem)
        if verdict.ok:
            verdict.suspicious.append("speedup 40.0x over eager is above 10x: check it by hand")
        return verdict


def test_the_run_report_lists_suspicious_speedups(tmp_path):
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=TooGoodVerifier(speedup=40.0),
                   workspace=tmp_path, candidates=2, target_speedup=1.2, **NO_FACTS)
    report = (Path(result.run_dir) / "report.md").read_text()
    assert "## Suspicious results (check by hand)" in report and "- r2c0: speedup 40.0x" in report
