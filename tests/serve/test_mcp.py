"""The MCP server, driven by the MCP SDK's own client: over stdio (`kernelloop mcp`, a real
subprocess) it lists its tools, verifies a shipped candidate, and runs an optimization job against
the local fake OpenAI-compatible server to completion, every call answering within seconds; over
streamable HTTP it serves the same tools. In process: bad input is a one-line tool error, and a
cancelled job stops at the next safe point."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from kernelloop.cli._app import app
from kernelloop.serve.jobs import JobManager, SolveRequest
from kernelloop.serve.mcp import MAX_WAIT_S, build_server
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, WRONG_KERNEL, ScriptedVerifier, coder_reply

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PROBLEM = ROOT / "kernelloop" / "evals" / "problems" / "3_LayerNorm.py"
SHIPPED_CANDIDATE = ROOT / "examples" / "candidates" / "3_LayerNorm.py"
TOOLS = {"verify_kernel", "profile_kernel", "start_optimization", "job_status", "cancel_job", "list_jobs"}
PROMPT_CALL_S = MAX_WAIT_S + 5.0  # the most any tool call may take: its wait, plus transport and start-up


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)


def asks(text: str):
    return lambda messages: text in messages[-1]["content"]


class Timed:
    """Calls tools and remembers the slowest call."""

    def __init__(self, client: Client):
        self.client, self.slowest_s = client, 0.0

    async def __call__(self, name: str, **arguments) -> dict:
        started = time.monotonic()
        result = await self.client.call_tool(name, arguments)
        self.slowest_s = max(self.slowest_s, time.monotonic() - started)
        assert not result.is_error, result.content[0].text
        return result.structured_content

    async def until_finished(self, job_id: str, limit_s: float = 150.0) -> dict:
        deadline = time.monotonic() + limit_s
        status = await self("job_status", job_id=job_id)
        while status["state"] not in ("succeeded", "failed", "cancelled") and time.monotonic() < deadline:
            status = await self("job_status", job_id=job_id, wait_s=MAX_WAIT_S)
        return status


def test_stdio_server_verifies_and_runs_a_job_to_completion(tmp_path):
    script = [Reply(PLAN_REPLY, reasoning="memory-bound", when=asks("You are planning")),
              Reply(coder_reply(FIXED_KERNEL), reasoning="tl.maximum", when=asks("candidate 1 of 1 in round 1"))]
    def params(fake: FakeOpenAIServer) -> StdioServerParameters:
        # The endpoint is the server's (its operator's settings), and its key goes to it alone.
        env = {**os.environ, "KERNELLOOP_BASE_URL": fake.url, "KERNELLOOP_API_KEY": "sk-operator"}
        env.pop("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", None)
        return StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env, args=[
            "-m", "kernelloop.cli", "mcp", "--device", "cpu", "--workspace", str(tmp_path / "ws")])

    async def session(fake: FakeOpenAIServer) -> tuple[list, dict, dict, dict, float]:
        async with Client(params(fake)) as client:
            listed = (await client.list_tools()).tools
            call = Timed(client)
            verify = await call("verify_kernel", problem_path=str(SHIPPED_PROBLEM),
                                candidate_path=str(SHIPPED_CANDIDATE), wait_s=5)
            verified = await call.until_finished(verify["job_id"])
            verified["detailed"] = (await call("job_status", job_id=verify["job_id"], detail=True))["verdict"]
            started = await call("start_optimization", problem_path=str(RELU_PROBLEM), candidates=1,
                                 target_speedup="none", budget_s=300, base_url=fake.url, model=fake.model)
            finished = await call.until_finished(started["job_id"])
            return listed, verified, started, finished, call.slowest_s

    with FakeOpenAIServer(script, model="fake-r1", api_key="sk-operator") as fake:
        listed, verified, started, finished, slowest_s = anyio.run(session, fake)
        assert fake.unserved == 0
        assert {r.headers.get("authorization") for r in fake.chat_requests} == {"Bearer sk-operator"}

    assert {tool.name for tool in listed} == TOOLS
    assert all(tool.output_schema and tool.output_schema["type"] == "object" for tool in listed)
    assert verified["state"] == "succeeded" and verified["verdict"]["status"] == "correct"
    # brief by default (what an agent acts on), the whole verdict with detail
    assert set(verified["verdict"]) == {"status", "code", "speedup", "reason", "feedback"}
    assert verified["detailed"]["device"] == "cpu" and verified["detailed"]["trials"] >= 3
    assert started["state"] in ("queued", "running") and started["thread_id"].startswith("relu-")
    assert finished["state"] == "succeeded", finished["error"]
    assert finished["summary"]["status"] == "correct" and finished["summary"]["attempts"] == 1
    assert finished["summary"]["model"] == "fake-r1" and "tl.maximum(x, 0.0)" in finished["best_kernel"]
    assert Path(finished["summary"]["best_kernel"]).read_text() == FIXED_KERNEL
    assert slowest_s < PROMPT_CALL_S


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_streamable_http_serves_the_same_tools(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    server = subprocess.Popen([sys.executable, "-m", "kernelloop.cli", "mcp", "--transport", "http", "--port",
                               str(port), "--device", "cpu", "--workspace", str(tmp_path)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    async def session() -> tuple[set[str], dict, str]:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            jobs = (await client.call_tool("list_jobs", {})).structured_content
            missing = await client.call_tool("job_status", {"job_id": "solve-nope"})
            return names, jobs, missing.content[0].text if missing.is_error else ""

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        names, jobs, missing = anyio.run(session)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert names == TOOLS
    assert jobs == {"jobs": []}
    assert "no job 'solve-nope'" in missing


class ScriptedPool:
    """The pool interface over ScriptedVerifier: no sandbox, verdicts by the kernel's op."""

    device = "cpu"

    def __init__(self, *args, **kwargs):
        self.verifier = ScriptedVerifier()
        self.closed = False

    def verify(self, candidate, problem, time_left_s=None):
        return self.verifier.verify(candidate, problem)

    def close(self):
        self.closed = True


def test_bad_input_is_a_one_line_tool_error(tmp_path):
    async def session(manager: JobManager) -> list[str]:
        async with Client(build_server(manager, "cpu")) as client:
            calls = [("start_optimization", {"problem_path": str(RELU_PROBLEM)}),
                     ("verify_kernel", {"problem_path": str(RELU_PROBLEM)}),
                     ("verify_kernel", {"problem_path": str(tmp_path / "nope.py"), "candidate_source": "x"}),
                     ("verify_kernel", {"problem_source": "x = (", "problem_name": "../up",
                                        "candidate_source": "x"}),
                     ("start_optimization", {"problem_path": str(RELU_PROBLEM), "device": "tpu",
                                             "base_url": "http://127.0.0.1:9/v1", "model": "m"}),
                     # a secret is never a tool argument, and a misspelt argument is never dropped
                     ("start_optimization", {"problem_path": str(RELU_PROBLEM), "api_key": "sk-secret",
                                             "base_url": "http://127.0.0.1:9/v1", "model": "m"}),
                     ("start_optimization", {"problem_path": str(RELU_PROBLEM), "candidate": 3,
                                             "base_url": "http://127.0.0.1:9/v1", "model": "m"})]
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            assert all(result.is_error for result in results)
            return [result.content[0].text for result in results]

    with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
        messages = anyio.run(session, manager)
        assert manager.jobs() == []
    assert "KERNELLOOP_BASE_URL" in messages[0]
    assert "exactly one of candidate_path and candidate_source" in messages[1]
    assert "no such problem file" in messages[2]
    assert "bad problem_name '../up'" in messages[3]
    assert "'tpu' is not a device" in messages[4]
    assert "unknown argument 'api_key'" in messages[5] and "sk-secret" not in messages[5]
    assert "unknown argument 'candidate'; did you mean 'candidates'?" in messages[6]
    assert all("\n" not in message for message in messages)


BROKEN_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("the reference ran out of memory (simulated)")


def get_inputs():
    return [torch.randn(37, 129)]


def get_init_inputs():
    return []
'''


def test_a_reference_that_fails_is_a_verdict_saying_so_not_a_failed_job(tmp_path):
    """A problem whose Model raises in forward: verify_kernel answers with a verdict that blames
    the problem (and problem_error), and the server goes on to verify the next candidate."""
    candidate = ROOT / "tests" / "fixtures" / "honest" / "relu_triton.py"

    async def session(manager: JobManager) -> tuple[dict, dict]:
        async with Client(build_server(manager, "cpu")) as client:
            call = Timed(client)
            started = await call("verify_kernel", problem_source=BROKEN_REFERENCE, problem_name="broken",
                                 candidate_path=str(candidate), wait_s=0)
            broken = await call.until_finished(started["job_id"], limit_s=120)
            started = await call("verify_kernel", problem_path=str(RELU_PROBLEM), candidate_path=str(candidate),
                                 wait_s=0)
            return broken, await call.until_finished(started["job_id"], limit_s=120)

    with JobManager(tmp_path) as manager:
        broken, relu = anyio.run(session, manager)
    assert broken["state"] == "succeeded" and broken["error"] is None
    verdict = broken["verdict"]
    assert verdict["status"] == "runtime_error" and verdict["reason"].startswith("problem error: ")
    assert "the reference failed" in verdict["reason"] and "ran out of memory (simulated)" in verdict["reason"]
    assert "not the candidate's fault" in verdict["feedback"]
    assert "ran out of memory (simulated)" in broken["problem_error"] and "\n" not in broken["problem_error"]
    assert relu["state"] == "succeeded" and relu["verdict"]["status"] == "correct" and relu["problem_error"] is None


def test_mcp_command_with_a_bad_device_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["mcp", "--device", "tpu", "--workspace", str(tmp_path)])
    assert result.exit_code == 2 and "--device must be auto, cpu, cuda or cuda:N, not 'tpu'" in result.output


def last_kind(manager: JobManager, job_id: str) -> str | None:
    event = manager.status(job_id).last_event
    return event.kind if event else None


def test_cancel_stops_a_run_at_the_next_safe_point(tmp_path):
    script = [Reply(PLAN_REPLY, when=asks("You are planning")),
              Reply(coder_reply(WRONG_KERNEL), delay_s=2.0, when=asks("candidate 1 of 2 in round 1")),
              Reply(coder_reply(WRONG_KERNEL), delay_s=2.0, when=asks("candidate 2 of 2 in round 1")),
              Reply(coder_reply(FIXED_KERNEL), when=asks("in round 2")),
              Reply(coder_reply(FIXED_KERNEL), when=asks("in round 2"))]
    with FakeOpenAIServer(script) as fake, JobManager(tmp_path, pool_factory=ScriptedPool) as manager:
        job = manager.start_solve(SolveRequest(problem_path=str(RELU_PROBLEM), candidates=2,
                                               base_url=fake.url, model=fake.model))
        deadline = time.monotonic() + 30
        while last_kind(manager, job.job_id) != "coding" and time.monotonic() < deadline:
            time.sleep(0.05)
        asked = time.monotonic()
        cancelling = manager.cancel(job.job_id)
        answered_s = time.monotonic() - asked
        ended = manager.wait(job.job_id, 30)
        stopped_s = time.monotonic() - asked
        chat_requests = len(fake.chat_requests)
    assert cancelling.state == "cancelling" and answered_s < 1.0
    assert ended.state == "cancelled" and stopped_s < 15
    assert chat_requests == 3  # the plan and round 1's two coders; round 2 never started
    assert ended.summary is not None and ended.summary.attempts == 0
    assert (Path(ended.summary.run_dir) / "result.json").is_file()


def test_jobs_outlive_the_server_and_progress_goes_out_as_notifications(tmp_path):
    """A solve job is a checkpointed thread: a new server over the same workspace still finds it by its id."""
    from kernelloop import __version__

    script = [Reply(PLAN_REPLY, when=asks("You are planning")),
              Reply(coder_reply(FIXED_KERNEL), delay_s=0.5, when=asks("candidate 1 of 1 in round 1"))]
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    async def first_server(url: str) -> dict:
        with JobManager(tmp_path, pool_factory=ScriptedPool) as manager:
            async with Client(build_server(manager)) as client:
                assert (client.server_info.name, client.server_info.version) == ("kernelloop", __version__)
                started = await Timed(client)("start_optimization", problem_path=str(RELU_PROBLEM), candidates=1,
                                              base_url=url, model="fake-r1")
                status = started
                while status["state"] not in ("succeeded", "failed", "cancelled"):
                    result = await client.call_tool("job_status", {"job_id": started["job_id"], "wait_s": 5},
                                                    progress_callback=on_progress)
                    status = result.structured_content
                return status

    async def second_server(job_id: str) -> tuple[dict, dict]:
        with JobManager(tmp_path, pool_factory=ScriptedPool) as manager:  # a restart: an empty job table
            async with Client(build_server(manager)) as client:
                call = Timed(client)
                return await call("job_status", job_id=job_id), await call("list_jobs")

    with FakeOpenAIServer(script) as fake:
        ended = anyio.run(first_server, fake.url)
    assert ended["state"] == "succeeded" and ended["summary"]["best_id"] == "r1c0"
    assert progress and any("r1c0" in (message or "") for _, message in progress)  # the attempt's own events
    assert [done for done, _ in progress] == sorted(done for done, _ in progress)  # steps only go forward

    again, listed = anyio.run(second_server, ended["job_id"])
    assert (again["state"], again["thread_id"], again["summary"]["best_id"]) == ("succeeded", ended["thread_id"],
                                                                                "r1c0")
    assert again["best_kernel"] == FIXED_KERNEL
    # the caller that started it went away with the first server: its id finds it, no list shows it to anyone
    assert listed["jobs"] == []
