"""Who a server trusts with what (issue 35 f): an MCP caller or an agent given the LangChain tools
chooses its problem and kernels, never where the server's key goes or which of the server's files
are read. start_optimization(base_url=<the caller's listener>, start=<a root-only file>) made the
planner send `Authorization: Bearer <KERNELLOOP_API_KEY>` and that file's text to the caller. Each
case has its honest twin: the configured endpoint still gets its key, a file in the operator's dirs
is still read."""

from __future__ import annotations

import shutil

import anyio
import pytest
from mcp import Client

from kernelloop.serve.jobs import JobManager
from kernelloop.serve.langchain import verify_tool
from kernelloop.serve.mcp import build_server
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, ScriptedVerifier, coder_reply
from tests.serve.test_langchain_tool import call
from tests.serve.test_mcp import ScriptedPool, asks

KEY = "sk-operator-secret"


@pytest.fixture
def operator(tmp_path, monkeypatch):
    """The operator's settings: its own endpoint and key, files only under tmp_path/allowed, the defaults else."""
    for name in ("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", "KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    monkeypatch.setenv("KERNELLOOP_FILE_ROOTS", str(allowed))
    monkeypatch.setenv("KERNELLOOP_API_KEY", KEY)
    shutil.copy(RELU_PROBLEM, allowed / "relu.py")
    (tmp_path / "secret.py").write_text(FIXED_KERNEL.replace("import torch", "import torch  # ROOT-ONLY TEXT"))
    return allowed


def _script():
    return [Reply(PLAN_REPLY, when=asks("You are planning")),
            Reply(coder_reply(FIXED_KERNEL), when=asks("candidate 1 of 1 in round 1"))]


def _start(manager: JobManager, arguments: dict) -> tuple[bool, str]:
    async def session() -> tuple[bool, str]:
        async with Client(build_server(manager, "cpu")) as client:
            result = await client.call_tool("start_optimization", {"candidates": 1, "budget_s": 120, **arguments})
            if not result.is_error:
                manager.wait(result.structured_content["job_id"], 60)
            return result.is_error, result.content[0].text
    return anyio.run(session)


def _texts(fake: FakeOpenAIServer) -> str:
    return "".join(str(request.body) for request in fake.chat_requests)


def test_a_callers_endpoint_gets_nothing_and_the_servers_gets_its_key(operator, tmp_path, monkeypatch):
    with FakeOpenAIServer(_script(), api_key=KEY) as configured, FakeOpenAIServer(_script()) as callers:
        monkeypatch.setenv("KERNELLOOP_BASE_URL", configured.url)
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            refused, message = _start(manager, {"problem_path": str(operator / "relu.py"), "base_url": callers.url,
                                                "model": "fake-r1"})
            assert refused and "allow_caller_endpoints" in message and manager.jobs() == []
            assert callers.requests == []
            failed, _ = _start(manager, {"problem_path": str(operator / "relu.py"), "model": "fake-r1"})
        assert not failed and configured.chat_requests
        assert {r.headers.get("authorization") for r in configured.chat_requests} == {f"Bearer {KEY}"}


def test_with_caller_endpoints_allowed_the_callers_endpoint_gets_no_key(operator, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", "true")
    with FakeOpenAIServer(_script()) as callers:
        monkeypatch.setenv("KERNELLOOP_BASE_URL", "http://127.0.0.1:9/v1")
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            failed, message = _start(manager, {"problem_path": str(operator / "relu.py"), "base_url": callers.url,
                                               "model": "fake-r1"})
        assert not failed, message
        assert callers.chat_requests and KEY not in str([r.headers for r in callers.requests])


@pytest.mark.parametrize("field", ["start", "problem_path", "link_start", "workspace_start"])
def test_a_file_outside_the_operators_dirs_is_refused_before_anything_reads_it(operator, tmp_path, monkeypatch, field):
    with FakeOpenAIServer(_script()) as configured:
        monkeypatch.setenv("KERNELLOOP_BASE_URL", configured.url)
        arguments = {"problem_path": str(operator / "relu.py"), "model": "fake-r1"}
        if field == "start":
            arguments["start"] = str(tmp_path / "secret.py")
        elif field == "problem_path":
            arguments["problem_path"] = str(tmp_path / "secret.py")
        elif field == "link_start":  # a link in the allowed dir, to a file outside it: resolved first
            (operator / "link.py").symlink_to(tmp_path / "secret.py")
            arguments["start"] = str(operator / "link.py")
        else:  # the server's own workspace, even under an allowed dir
            monkeypatch.setenv("KERNELLOOP_FILE_ROOTS", str(tmp_path))
            (tmp_path / "ws").mkdir()
            shutil.copy(tmp_path / "secret.py", tmp_path / "ws" / "kept.py")
            arguments["start"] = str(tmp_path / "ws" / "kept.py")
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            refused, message = _start(manager, arguments)
            assert refused and manager.jobs() == [], message
        assert "ROOT-ONLY" not in _texts(configured) and configured.requests == []
        assert "outside the dirs" in message or "workspace" in message


def test_a_start_file_in_the_operators_dirs_is_read(operator, tmp_path, monkeypatch):
    shutil.copy(tmp_path / "secret.py", operator / "start.py")
    script = [Reply(PLAN_REPLY, when=asks("You are planning")),
              Reply(coder_reply(FIXED_KERNEL), when=asks("The kernel this run starts from"))]
    with FakeOpenAIServer(script) as configured:
        monkeypatch.setenv("KERNELLOOP_BASE_URL", configured.url)
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            failed, message = _start(manager, {"problem_path": str(operator / "relu.py"), "start": str(operator / "start.py"),
                                               "model": "fake-r1"})
        assert not failed, message
        assert "ROOT-ONLY" in _texts(configured)  # the operator's dirs: read, and sent to the operator's endpoint


def test_the_langchain_tools_keep_to_the_same_dirs(operator, tmp_path):
    tool = verify_tool(verifier=ScriptedVerifier(), workspace=tmp_path / "ws")
    outside = call(tool, problem_path=str(operator / "relu.py"), candidate_path=str(tmp_path / "secret.py"))
    assert outside.status == "error" and "outside the dirs" in outside.content
    shutil.copy(tmp_path / "secret.py", operator / "candidate.py")
    inside = call(tool, problem_path=str(operator / "relu.py"), candidate_path=str(operator / "candidate.py"))
    assert inside.status == "success", inside.content
