"""The LangChain tools as an agent calls them (a ToolCall in, a ToolMessage out): JSON content for
the model, the typed result as the artifact, bad input as a one-line error message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import ToolMessage

from kernelloop.records import Status, Verdict
from kernelloop.serve.langchain import kernelloop_tools, solve_tool, verify_tool
from kernelloop.serve.runs import SolveResult
from tests.graph.scripted import FIXED_KERNEL, RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)


def call(tool, **args) -> ToolMessage:
    return tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


def test_verify_tool_runs_the_real_verifier(tmp_path):
    tool = verify_tool(device="cpu", workspace=tmp_path)
    message = call(tool, problem_path=str(RELU_PROBLEM), candidate_path=str(FIXTURES / "honest" / "relu_triton.py"))
    assert message.status == "success"
    assert json.loads(message.content)["status"] == "correct"
    assert isinstance(message.artifact, Verdict) and message.artifact.status is Status.correct
    assert message.artifact.device == "cpu" and message.artifact.trials >= 3


def test_verify_tool_with_a_shared_verifier_and_source_text(tmp_path):
    shared = ScriptedVerifier()
    tool = verify_tool(verifier=shared, workspace=tmp_path)
    message = call(tool, problem_source=RELU_PROBLEM.read_text(), problem_name="relu", candidate_source=FIXED_KERNEL)
    assert message.artifact.status is Status.correct and len(shared.calls) == 1
    assert (tmp_path / "jobs" / "inputs").is_dir()  # the problem text was written under the workspace


def test_bad_input_comes_back_as_a_one_line_error(tmp_path):
    tool = verify_tool(verifier=ScriptedVerifier(), workspace=tmp_path)
    message = call(tool, problem_path=str(RELU_PROBLEM))
    assert message.status == "error" and "exactly one of candidate_path and candidate_source" in message.content
    optimize = solve_tool(workspace=tmp_path)
    message = call(optimize, problem_path=str(RELU_PROBLEM))
    assert message.status == "error" and "KERNELLOOP_BASE_URL" in message.content
    assert "\n" not in message.content
    invalid = call(optimize, problem_path=str(RELU_PROBLEM), candidates=0)
    assert invalid.status == "error" and invalid.content.startswith("optimize_kernel: candidates: ")  # as MCP says it


def test_optimize_tool_runs_the_loop(tmp_path):
    verify, optimize = kernelloop_tools(verifier=ScriptedVerifier(), workspace=tmp_path,
                                        chat_client=ScriptedChatClient())
    assert (verify.name, optimize.name) == ("verify_kernel", "optimize_kernel")
    message = call(optimize, problem_path=str(RELU_PROBLEM), candidates=2, budget_s=120)
    summary = json.loads(message.content)
    result = message.artifact
    assert isinstance(result, SolveResult) and (result.status, result.best_id) == ("correct", "r2c0")
    assert summary["thread_id"] == result.thread_id and summary["stop_reason"] == "target_met"
    assert Path(result.best_kernel).read_text() == FIXED_KERNEL


def test_verify_tool_reports_each_workload_of_a_problem_with_workloads(tmp_path):
    """The tools pass the verdict through: a problem with get_workloads answers with its workloads,
    brief or whole, and a kernel wrong on one names it."""
    problem = FIXTURES / "problems" / "rowsum_workloads.py"
    tool = verify_tool(device="cpu", workspace=tmp_path)
    message = call(tool, problem_path=str(problem), candidate_path=str(FIXTURES / "cheats" / "rowsum_fixed_128_cols.py"))
    brief = json.loads(message.content)
    assert brief["status"] == "incorrect" and "workload 'cols_3000'" in brief["reason"]
    assert {name: result["status"] for name, result in brief["workloads"].items()} == {
        "cols_128": "correct", "cols_3000": "incorrect"}
    assert set(message.artifact.workloads) == {"cols_128", "cols_3000"}
    whole = call(tool, problem_source=problem.read_text(), problem_name="rowsum_workloads", detail=True,
                 candidate_path=str(FIXTURES / "honest" / "rowsum_any_shape_triton.py"))
    verdict = json.loads(whole.content)
    assert verdict["status"] == "correct" and set(verdict["workloads"]) == {"cols_128", "cols_3000"}
    plain = call(tool, problem_path=str(RELU_PROBLEM), candidate_path=str(FIXTURES / "honest" / "relu_triton.py"))
    assert "workloads" not in json.loads(plain.content)  # a problem without: the brief it always had


class GatewayChatClient(ScriptedChatClient):
    """A scripted model that says its endpoint is a gateway whose credential rides in the URL."""

    openai_api_base = "https://operator:sk-langchain-SECRET@gateway.internal/v1?api-key=sk-langchain-SECRET"


def test_the_agent_reads_the_endpoint_without_its_credentials_and_python_gets_it_whole(tmp_path):
    _, optimize = kernelloop_tools(verifier=ScriptedVerifier(), workspace=tmp_path, chat_client=GatewayChatClient())
    message = call(optimize, problem_path=str(RELU_PROBLEM), candidates=2, budget_s=120)
    assert json.loads(message.content)["base_url"] == "https://gateway.internal/v1"
    assert "sk-langchain-SECRET" not in message.content
    assert message.artifact.base_url == GatewayChatClient.openai_api_base  # the operator's own code: as configured
