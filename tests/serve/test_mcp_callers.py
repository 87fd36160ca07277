"""Whose job is whose on the MCP server (kernelloop/serve/callers.py), driven by the SDK's own clients: a caller
lists, polls and cancels the jobs it started and gets the same one line for another caller's job as for an id
that never was; over a pipe (in process, both protocol eras) a caller is its client's run, over streamable HTTP its
session, and a caller without either (stateless HTTP) is anonymous: its job is owned by its id and never listed.
Also what a caller sees of the operator's endpoint, and of its own hints."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import anyio
import pytest
import uvicorn
from mcp import Client

from kernelloop.config import defaults
from kernelloop.serve.jobs import JobManager
from kernelloop.serve.mcp import build_server
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, coder_reply
from tests.serve.test_mcp import ScriptedPool, asks

NOBODYS = "verify-" + "0" * 32  # a well-formed id no job has
VERIFY = {"problem_source": RELU_PROBLEM.read_text(), "candidate_source": FIXED_KERNEL, "wait_s": 0}


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)


def held_pool(release: threading.Event) -> type[ScriptedPool]:
    """A pool whose verifications wait for `release`, so a job is still running while others try it."""

    class Held(ScriptedPool):
        def verify(self, candidate, problem, time_left_s=None):
            release.wait(30)
            return super().verify(candidate, problem, time_left_s)

    return Held


def text(result) -> str:
    return result.content[0].text


def same_line(refused, unknown, job_id: str) -> bool:
    """Both are errors whose one line is the same once each names its own id."""
    return refused.is_error and unknown.is_error and text(refused).replace(job_id, "ID") == \
        text(unknown).replace(NOBODYS, "ID")


@pytest.mark.parametrize("mode", ["auto", "legacy"])  # the 2026-07-28 per-request envelope, and the handshake
def test_a_caller_has_its_own_jobs_and_another_callers_are_as_unknown_as_none(tmp_path, mode):
    release = threading.Event()

    async def callers(server) -> dict:
        async with Client(server, mode=mode) as alice, Client(server, mode=mode) as mallory:
            job_id = (await alice.call_tool("verify_kernel", VERIFY)).structured_content["job_id"]
            seen = {"job_id": job_id,
                    "alice_lists": (await alice.call_tool("list_jobs", {})).structured_content["jobs"],
                    "mallory_lists": (await mallory.call_tool("list_jobs", {"detail": True})).structured_content,
                    "read": await mallory.call_tool("job_status", {"job_id": job_id, "detail": True}),
                    "read_unknown": await mallory.call_tool("job_status", {"job_id": NOBODYS}),
                    "cancel": await mallory.call_tool("cancel_job", {"job_id": job_id}),
                    "cancel_unknown": await mallory.call_tool("cancel_job", {"job_id": NOBODYS})}
            seen["after"] = (await alice.call_tool("job_status", {"job_id": job_id})).structured_content
            seen["own_cancel"] = (await alice.call_tool("cancel_job", {"job_id": job_id})).structured_content
            release.set()
            seen["ended"] = (await alice.call_tool("job_status", {"job_id": job_id, "wait_s": 10})).structured_content
            return seen

    with JobManager(tmp_path / "ws", pool_factory=held_pool(release)) as manager:
        seen = anyio.run(callers, build_server(manager, "cpu"))
    job_id = seen["job_id"]
    assert [job["job_id"] for job in seen["alice_lists"]] == [job_id]
    assert seen["mallory_lists"] == {"jobs": []}
    assert same_line(seen["read"], seen["read_unknown"], job_id), (text(seen["read"]), text(seen["read_unknown"]))
    assert text(seen["read"]).startswith(f"job_status: no job {job_id!r}")
    assert same_line(seen["cancel"], seen["cancel_unknown"], job_id)
    assert seen["after"]["state"] == "running"  # mallory's cancel reached nothing
    assert seen["own_cancel"]["state"] == "cancelling" and seen["ended"]["state"] == "cancelled"


def test_a_server_that_cannot_tell_its_callers_apart_lists_no_one_and_reads_by_id(tmp_path):
    """Served as on HTTP (one run for every client) but asked over a pipe, with no session: every caller is
    anonymous, never one shared caller, so no list shows a job and its id alone reads it."""

    async def callers(server) -> tuple[str, dict, dict, dict]:
        async with Client(server) as alice, Client(server) as bob:
            job_id = (await alice.call_tool("verify_kernel", {**VERIFY, "wait_s": 5})).structured_content["job_id"]
            return (job_id, (await alice.call_tool("list_jobs", {})).structured_content,
                    (await bob.call_tool("list_jobs", {})).structured_content,
                    (await alice.call_tool("job_status", {"job_id": job_id})).structured_content)

    with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
        job_id, alice_lists, bob_lists, read = anyio.run(callers, build_server(manager, "cpu", one_client_per_run=False))
    assert alice_lists == bob_lists == {"jobs": []}
    assert read["job_id"] == job_id and read["state"] == "succeeded"


@pytest.fixture
def http_server(tmp_path) -> Iterator[str]:
    """The MCP server as `kernelloop mcp --transport http` serves it, in this process (scripted verdicts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
        app = build_server(manager, "cpu", one_client_per_run=False).streamable_http_app()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True
            thread.join(30)


def test_over_http_a_caller_is_its_session_and_a_stateless_caller_is_anonymous(http_server):
    async def callers() -> dict:
        async with Client(http_server, mode="legacy") as alice, Client(http_server, mode="legacy") as mallory, \
                Client(http_server) as stateless:  # auto: this SDK speaks the 2026-07-28 single exchanges
            job_id = (await alice.call_tool("verify_kernel", {**VERIFY, "wait_s": 5})).structured_content["job_id"]
            anonymous_id = (await stateless.call_tool("verify_kernel", {**VERIFY, "wait_s": 5})).structured_content["job_id"]
            return {"job_id": job_id, "anonymous_id": anonymous_id,
                    "alice_lists": (await alice.call_tool("list_jobs", {})).structured_content["jobs"],
                    "alice_reads": (await alice.call_tool("job_status", {"job_id": job_id})).structured_content,
                    "mallory_lists": (await mallory.call_tool("list_jobs", {})).structured_content["jobs"],
                    "mallory_reads": await mallory.call_tool("job_status", {"job_id": job_id}),
                    "stateless_lists": (await stateless.call_tool("list_jobs", {})).structured_content["jobs"],
                    "stateless_reads": await stateless.call_tool("job_status", {"job_id": job_id}),
                    "stateless_own": (await stateless.call_tool("job_status", {"job_id": anonymous_id})).structured_content,
                    "unknown": await mallory.call_tool("job_status", {"job_id": NOBODYS})}

    seen = anyio.run(callers)
    job_id = seen["job_id"]
    assert [job["job_id"] for job in seen["alice_lists"]] == [job_id]  # the anonymous job is nobody's to list
    assert seen["alice_reads"]["state"] == "succeeded"
    assert seen["mallory_lists"] == [] and same_line(seen["mallory_reads"], seen["unknown"], job_id)
    assert seen["stateless_lists"] == [] and same_line(seen["stateless_reads"], seen["unknown"], job_id)
    assert seen["stateless_own"]["job_id"] == seen["anonymous_id"]  # its id, a 128-bit secret, reads it
    assert len(seen["anonymous_id"].removeprefix("verify-")) == 32


# --------------------------------------------------------------------------- the operator's endpoint

SECRET = "sk-callers-OPERATOR-9876543210"


def test_no_answer_shows_the_credentials_in_the_operators_endpoint_url(tmp_path, monkeypatch):
    """The endpoint carries its credential in the URL's userinfo (HTTP basic auth to a gateway): the run uses
    it, and every answer (start, status brief and detailed, the list) shows scheme, host, port and path only."""
    script = [Reply(PLAN_REPLY, when=asks("You are planning")),
              Reply(coder_reply(FIXED_KERNEL), when=asks("candidate 1 of 1 in round 1"))]

    async def session(fake: FakeOpenAIServer) -> list[dict]:
        with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
            async with Client(build_server(manager, "cpu")) as client:
                started = (await client.call_tool("start_optimization", {"problem_path": str(RELU_PROBLEM),
                                                                        "candidates": 1})).structured_content
                answers, status = [started], started
                deadline = time.monotonic() + 120
                while status["state"] not in ("succeeded", "failed", "cancelled") and time.monotonic() < deadline:
                    status = (await client.call_tool("job_status", {"job_id": started["job_id"], "wait_s": 5,
                                                                    "detail": True})).structured_content
                    answers.append(status)
                answers.append((await client.call_tool("job_status", {"job_id": started["job_id"]})).structured_content)
                answers.append((await client.call_tool("list_jobs", {"detail": True})).structured_content)
                return answers

    with FakeOpenAIServer(script, model="fake-r1") as fake:
        endpoint = fake.url.replace("http://", f"http://operator:{SECRET}@")
        monkeypatch.setenv("KERNELLOOP_BASE_URL", endpoint)
        monkeypatch.setenv("KERNELLOOP_MODEL", fake.model)
        answers = anyio.run(session, fake)
        assert fake.chat_requests  # the run went to the endpoint, credentials and all
    ended = answers[-2]
    assert ended["state"] == "succeeded", ended["error"]
    assert ended["summary"]["base_url"] == fake.url  # what the caller is told: where, never how to get in
    assert all(SECRET not in json.dumps(answer) for answer in answers)


# --------------------------------------------------------------------------- a caller's hints


def test_hints_over_their_bound_are_one_line_naming_the_limit_and_the_schema_says_it(tmp_path):
    async def session(manager: JobManager) -> tuple[dict, list[str]]:
        async with Client(build_server(manager, "cpu")) as client:
            tool = next(t for t in (await client.list_tools()).tools if t.name == "start_optimization")
            calls = [{"hints": ["h"] * (defaults.MAX_HINTS + 1)},
                     {"hints": ["h" * (defaults.MAX_HINTS_BYTES // 2 + 1)] * 2}]
            results = [await client.call_tool("start_optimization", {"problem_path": str(RELU_PROBLEM),
                                                                     "model": "m", **call}) for call in calls]
            assert all(result.is_error for result in results)
            return tool.input_schema["properties"]["hints"], [text(result) for result in results]

    with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
        schema, lines = anyio.run(session, manager)
        assert manager.jobs() == []
    assert any(option.get("maxItems") == defaults.MAX_HINTS for option in schema["anyOf"])
    assert lines[0].startswith("start_optimization: hints: ") and f"at most {defaults.MAX_HINTS} items" in lines[0]
    assert lines[1].startswith("start_optimization: hints: ")
    assert f"over the {defaults.MAX_HINTS_BYTES:,}-byte limit for hints" in lines[1]
    assert all("\n" not in line and "hhhh" not in line for line in lines)  # never the hints themselves
