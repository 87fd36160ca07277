"""review35: the operator's own settings files, named by a server's caller.

The operator keeps its endpoint key where the settings read it: a `.env` in the server's working dir
(pydantic-settings reads `./.env`, architecture.md "Settings"). With `file_roots` unset, the dirs a caller
may name files in are that same working dir (`Settings.caller_file_roots`), and `serve/requests.confined`
refuses only what lies outside the roots or inside the workspace: `./.env` and `./kernelloop.toml` are
neither. A warm start is not checked to be a kernel (`starts._from_file` reads any text), and the planner
sends the start's text to the endpoint. So with `allow_caller_endpoints` on, `start_optimization(start=".env",
base_url=<the caller's listener>)` hands the server's key to the caller inside the prompt, though that
endpoint is promised "no key at all" (`serve/requests.caller_endpoint`). The sandbox masks these files from
jobs (isolation.py); the parent reading them for a caller is the hole.

What a correct server must do: never read its own settings files for a caller (refuse them in `confined`, like
the workspace), or at least never send a start that is not a kernel (no ModelNew) to any endpoint."""

from __future__ import annotations

import shutil

import anyio
import pytest
from mcp import Client

from kernelloop.serve.jobs import JobManager
from kernelloop.serve.mcp import build_server
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM
from tests.serve.test_mcp import ScriptedPool, asks

KEY = "sk-operator-dotenv-secret-7f3a"


def _script():
    return [Reply(PLAN_REPLY, when=asks("You are planning")),
            Reply("```python\n" + FIXED_KERNEL + "\n```", when=lambda messages: True)]


@pytest.fixture
def operator_dir(tmp_path, monkeypatch):
    """The operator runs the server from its project dir, its key in ./.env there, file_roots unset."""
    for name in ("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", "KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_HOME",
                 "KERNELLOOP_API_KEY", "KERNELLOOP_FILE_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    (project / ".env").write_text(f"KERNELLOOP_API_KEY={KEY}\n")
    shutil.copy(RELU_PROBLEM, project / "relu.py")
    monkeypatch.chdir(project)
    return project


def _start(manager: JobManager, arguments: dict) -> tuple[bool, str]:
    async def session() -> tuple[bool, str]:
        async with Client(build_server(manager, "cpu")) as client:
            result = await client.call_tool("start_optimization", {"candidates": 1, "budget_s": 60, "max_rounds": 1,
                                                                   **arguments})
            if not result.is_error:
                manager.wait(result.structured_content["job_id"], 60)
            return result.is_error, result.content[0].text
    return anyio.run(session)


def test_a_callers_endpoint_never_gets_the_operators_dotenv_as_a_start(operator_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", "true")
    with FakeOpenAIServer(_script()) as callers:
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            assert manager.settings.api_key.get_secret_value() == KEY  # the key came from ./.env
            _start(manager, {"problem_path": str(operator_dir / "relu.py"), "start": ".env",
                             "base_url": callers.url, "model": "fake-r1"})
        seen = "".join(str(request.body) for request in callers.requests) + \
            str([request.headers for request in callers.requests])
    assert KEY not in seen, "the caller's endpoint got the operator's key (./.env sent as the start kernel)"


def test_the_callers_endpoint_gets_no_bearer_key_from_dotenv(operator_dir, tmp_path, monkeypatch):
    """The twin that holds: with the key only in ./.env and a plain start, the caller's endpoint sees no key."""
    monkeypatch.setenv("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", "true")
    with FakeOpenAIServer(_script()) as callers:
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            failed, message = _start(manager, {"problem_path": str(operator_dir / "relu.py"),
                                               "base_url": callers.url, "model": "fake-r1"})
        assert not failed, message
        assert callers.requests, "the run never called the caller's endpoint"
        seen = "".join(str(request.body) for request in callers.requests) + \
            str([request.headers for request in callers.requests])
    assert KEY not in seen
