"""The verifier node's journal: a node killed between two verifications redoes only the second."""

import pytest
from langgraph.runtime import ExecutionInfo, Runtime

from kernelloop.agents.records import Attempt
from kernelloop.graph import nodes
from kernelloop.graph.context import Context
from kernelloop.graph.state import RunSettings
from kernelloop.problem import Problem, sha256_text
from tests.graph.scripted import FIXED_KERNEL, RELU_PROBLEM, WRONG_KERNEL, ScriptedVerifier


class DiesAfterOne(ScriptedVerifier):
    """Verifies one candidate, then 'the process dies' (an exception stands in for SIGKILL)."""

    def verify(self, candidate, problem, time_left_s=None):
        if self.calls:
            raise SystemExit("killed")
        return super().verify(candidate, problem)


def runtime(tmp_path, verifier) -> Runtime:
    info = ExecutionInfo(checkpoint_id="c", checkpoint_ns="", task_id="t", thread_id="journal")
    return Runtime(context=Context(verifier=verifier, workspace=tmp_path), execution_info=info)


def round_state() -> dict:
    problem = Problem.from_file(RELU_PROBLEM)
    drafts = [Attempt(id=f"r1c{i}", round=1, index=i, backend="triton", code=code, code_sha256=sha256_text(code),
                      kernel_file=f"kernels/r1c{i}.py")
              for i, code in enumerate((WRONG_KERNEL, FIXED_KERNEL))]
    return {"problem": {"name": problem.name, "path": str(problem.path), "source": problem.source,
                        "sha256": problem.sha256},
            "settings": RunSettings(candidates=2).model_dump(), "round": 0, "attempts": [],
            "drafts": [d.model_dump(mode="json") for d in drafts]}


def test_a_verifier_node_killed_mid_round_does_not_verify_the_first_attempt_again(tmp_path):
    state = round_state()
    with pytest.raises(SystemExit):
        nodes.verifier(state, runtime(tmp_path, DiesAfterOne()))
    second = ScriptedVerifier()
    update = nodes.verifier(state, runtime(tmp_path, second))
    assert second.calls == ["r1c1"]
    assert [(a["id"], a["verdict"]["status"], a["verdict_reused"]) for a in update["attempts"]] == [
        ("r1c0", "incorrect", True), ("r1c1", "correct", False)]
    assert update["best_id"] == "r1c1" and update["round"] == 1


def test_changed_code_under_the_same_id_is_verified_again(tmp_path):
    state = round_state()
    nodes.verifier(state, runtime(tmp_path, ScriptedVerifier()))
    state["drafts"][0]["code"] = FIXED_KERNEL
    state["drafts"][0]["code_sha256"] = sha256_text(FIXED_KERNEL)
    again = ScriptedVerifier()
    nodes.verifier(state, runtime(tmp_path, again))
    assert again.calls == ["r1c0"]


class RecordsTimeLeft(ScriptedVerifier):
    def __init__(self):
        super().__init__()
        self.time_left: list[float | None] = []

    def verify(self, candidate, problem, time_left_s=None):
        self.time_left.append(time_left_s)
        return super().verify(candidate, problem)


def test_each_verification_gets_what_is_left_of_the_runs_budget(tmp_path):
    """Issue 29: `--start auto` on the CPU ran a starter to its own 180 s limit and overran a 240 s
    budget; the verifier now hands each verification the run's time left, and its job is cut there."""
    state = round_state()
    state["settings"] = RunSettings(candidates=2, budget_s=100.0).model_dump()
    state["spent_s"] = 70.0
    verifier = RecordsTimeLeft()
    nodes.verifier(state, runtime(tmp_path, verifier))
    assert len(verifier.time_left) == 2 and all(left is not None and 25.0 < left <= 30.0 for left in verifier.time_left)
