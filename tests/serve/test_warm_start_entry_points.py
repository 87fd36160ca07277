"""Warm starts at every entry point: `--start auto` picks the family's starter (or says in one line
that there is none), a start file that can't be read is a one-line usage error before anything
starts, and the MCP and LangChain tools take `start` / `start_source`."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from langchain_core.messages import ToolMessage
from mcp import Client

from kernelloop.evals.attention import attention_problems
from kernelloop.problem import ProblemError
from kernelloop.serve.jobs import JobManager
from kernelloop.serve.langchain import solve_tool
from kernelloop.serve.mcp import build_server
from kernelloop.serve.runs import SolveResult
from kernelloop.starts import ATTENTION_STARTERS, resolve_start, starter_for
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import (
    FIXED_KERNEL,
    PLAN_REPLY,
    RELU_PROBLEM,
    WRONG_KERNEL,
    ScriptedChatClient,
    ScriptedVerifier,
    coder_reply,
)
from tests.graph.test_cli import kernelloop
from tests.serve.test_mcp import ScriptedPool

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)


def asks(text: str):
    return lambda messages: text in messages[-1]["content"]


def test_start_auto_picks_each_attention_problems_hand_written_starter():
    names = [p.name for p in attention_problems()]
    assert len(names) == 10 and ATTENTION_STARTERS == ROOT / "examples" / "attention_candidates"
    for name in names:
        record = resolve_start("auto", name)
        starter = ROOT / "examples" / "attention_candidates" / f"{name}.py"
        assert starter_for(name) == starter
        assert (record.choice, record.path, record.source) == ("auto", str(starter), starter.read_text())
        assert record.line.startswith(str(starter))


def test_start_auto_without_a_starter_says_so_in_one_line_and_starts_from_scratch():
    record = resolve_start("auto", "relu")
    assert not record.has_kernel and record.path is None and "\n" not in record.line
    assert record.line.startswith("start auto: no starter kernel for relu") and record.line.endswith(
        "starting from scratch")
    assert starter_for("3_LayerNorm") is None  # a shipped problem outside the attention family


def test_a_start_file_that_cannot_be_read_is_a_one_line_problem_error(tmp_path):
    (tmp_path / "latin1.py").write_bytes(b"# caf\xe9\nclass ModelNew: pass\n")
    with pytest.raises(ProblemError, match="no such kernel file"):
        resolve_start(tmp_path / "nope.py", "relu")
    with pytest.raises(ProblemError, match="not UTF-8 text"):
        resolve_start(str(tmp_path / "latin1.py"), "relu")
    with pytest.raises(ProblemError, match="is a directory"):
        resolve_start(tmp_path, "relu")


def test_cli_start_errors_are_one_line_before_anything_starts(tmp_path):
    bad = tmp_path / "latin1.py"
    bad.write_bytes(b"\xff\xfe not text")
    for start, expected in ((tmp_path / "nope.py", "no such kernel file"), (bad, "not UTF-8 text")):
        # no endpoint is configured: the start is checked first, so its error is the one shown
        done = kernelloop("solve", RELU_PROBLEM, "--start", start, "--workspace", tmp_path / "ws")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"error: --start: {start}: {expected}")
    assert not (tmp_path / "ws" / "runs").exists()


def test_cli_start_auto_with_no_starter_warns_in_one_line_and_goes_on(tmp_path):
    done = kernelloop("solve", RELU_PROBLEM, "--start", "auto", "--workspace", tmp_path)
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("warning: start auto: no starter kernel for relu") and lines[0].endswith("from scratch")
    assert done.returncode == 2 and "KERNELLOOP_BASE_URL" in lines[1]  # it went on, to the missing endpoint
    attention = kernelloop("solve", ROOT / "kernelloop" / "evals" / "problems" / "attention" / "1_causal_mask.py",
                           "--start", "auto", "--workspace", tmp_path)
    assert attention.returncode == 2 and "warning" not in attention.stderr  # its starter was found
    assert attention.stderr.startswith("error: no model endpoint configured")


def call(tool, **args) -> ToolMessage:
    return tool.invoke({"type": "tool_call", "id": "call-1", "name": tool.name, "args": args})


def test_langchain_optimize_kernel_takes_a_start_kernel_as_text_or_a_file(tmp_path):
    client = ScriptedChatClient()
    tool = solve_tool(verifier=ScriptedVerifier(speedup=1.5), workspace=tmp_path / "ws", chat_client=client)
    message = call(tool, problem_path=str(RELU_PROBLEM), start_source=FIXED_KERNEL)
    result = message.artifact
    assert isinstance(result, SolveResult) and (result.best_id, result.attempts, result.stop_reason) == (
        "r0c0", 1, "target_met")  # a start that already meets the target: no coder was asked
    assert json.loads(message.content)["start"] == "a kernel given as text" and client.calls == ["planner/plan"]

    missing = call(tool, problem_path=str(RELU_PROBLEM), start=str(tmp_path / "nope.py"))
    assert missing.status == "error" and "no such kernel file" in missing.content and "\n" not in missing.content
    both = call(tool, problem_path=str(RELU_PROBLEM), start="auto", start_source=FIXED_KERNEL)
    assert both.status == "error" and "at most one of start and start_source" in both.content


def test_mcp_start_optimization_begins_from_the_start_kernel(tmp_path):
    start = tmp_path / "start.py"
    start.write_text(WRONG_KERNEL)
    script = [Reply(PLAN_REPLY, when=asks("You are planning")),
              Reply(coder_reply(FIXED_KERNEL), when=asks("The kernel this run starts from (r0c0: incorrect"))]

    async def session(url: str) -> tuple[dict, str]:
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            async with Client(build_server(manager, "cpu")) as client:
                bad = await client.call_tool("start_optimization", {"problem_path": str(RELU_PROBLEM),
                                                                    "start": str(tmp_path / "nope.py")})
                assert bad.is_error and manager.jobs() == []
                started = (await client.call_tool("start_optimization", {
                    "problem_path": str(RELU_PROBLEM), "candidates": 1, "start": str(start), "base_url": url,
                    "model": "fake-r1"})).structured_content
                status = started
                while status["state"] not in ("succeeded", "failed", "cancelled"):
                    status = (await client.call_tool("job_status", {"job_id": started["job_id"],
                                                                    "wait_s": 5})).structured_content
                return status, bad.content[0].text

    with FakeOpenAIServer(script) as fake:
        ended, error = anyio.run(session, fake.url)
        assert fake.unserved == 0
    assert "no such kernel file" in error and "\n" not in error
    assert ended["state"] == "succeeded", ended["error"]
    summary = ended["summary"]
    assert (summary["best_id"], summary["attempts"], summary["start"]) == ("r1c0", 2, str(start))
    assert (Path(summary["run_dir"]) / "kernels" / "r0c0.py").read_text() == WRONG_KERNEL
