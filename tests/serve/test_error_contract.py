"""One error contract for every interface (issue 38, finding 5): the same bad call gets the same one line from the
MCP server and from the LangChain tools ("TOOL: what to fix", "did you mean" for a misspelt argument), and
`kernelloop verify --json` answers bad input with an error object on stdout."""

from __future__ import annotations

import json

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

from kernelloop.cli import app
from kernelloop.serve.jobs import JobManager
from kernelloop.serve.langchain import kernelloop_tools
from kernelloop.serve.mcp import build_server
from tests.graph.scripted import RELU_PROBLEM, ScriptedVerifier
from tests.serve.test_mcp import ScriptedPool

BAD_CALLS = [
    ("verify_kernel", {"problem_pth": str(RELU_PROBLEM), "candidate_source": "x"}),   # misspelt
    ("verify_kernel", {"problem_path": str(RELU_PROBLEM)}),                           # no candidate
    ("verify_kernel", {"problem_path": "/nonexistent/p.py", "candidate_source": "x"}),  # no such file
]


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def mcp_lines(tmp_path) -> list[str]:
    async def session(manager: JobManager) -> list[str]:
        async with Client(build_server(manager, "cpu")) as client:
            results = [await client.call_tool(name, arguments) for name, arguments in BAD_CALLS]
            assert all(result.is_error for result in results)
            return [result.content[0].text for result in results]

    with JobManager(tmp_path, pool_factory=ScriptedPool) as manager:
        return anyio.run(session, manager)


def langchain_lines(tmp_path) -> list[str]:
    tools = {tool.name: tool for tool in kernelloop_tools(verifier=ScriptedVerifier(), workspace=tmp_path)}
    lines = []
    for name, arguments in BAD_CALLS:
        message = tools[name].invoke({"type": "tool_call", "id": "1", "name": name, "args": arguments})
        assert message.status == "error"
        lines.append(message.content)
    return lines


def test_mcp_and_langchain_answer_bad_calls_with_the_same_line(tmp_path):
    mcp, langchain = mcp_lines(tmp_path / "mcp"), langchain_lines(tmp_path / "lc")
    assert mcp == langchain
    assert mcp[0] == "verify_kernel: unknown argument 'problem_pth'; did you mean 'problem_path'?"
    assert mcp[1] == "verify_kernel: give exactly one of candidate_path and candidate_source"
    assert all(line.startswith("verify_kernel: ") and "\n" not in line for line in mcp)
    assert not any("Error executing tool" in line for line in mcp)


def test_cli_json_errors_are_an_object_with_a_code_and_a_message(tmp_path):
    done = CliRunner().invoke(app, ["verify", str(tmp_path / "k.py"), "--problem", str(RELU_PROBLEM), "--json"])
    assert done.exit_code == 2 and done.stderr.startswith("error: ")
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert set(error) == {"code", "message"} and error["code"] == "usage"


def test_every_schema_says_what_a_call_requires(tmp_path):
    async def schemas(manager: JobManager) -> dict[str, dict]:
        async with Client(build_server(manager, "cpu")) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    with JobManager(tmp_path, pool_factory=ScriptedPool) as manager:
        listed = anyio.run(schemas, manager)
    problem = {"oneOf": [{"required": ["problem_path"]}, {"required": ["problem_source"]}]}
    candidate = {"oneOf": [{"required": ["candidate_path"]}, {"required": ["candidate_source"]}]}
    assert listed["verify_kernel"]["allOf"] == [problem, candidate]
    assert listed["start_optimization"]["allOf"] == [problem]
    assert listed["job_status"]["required"] == ["job_id"]
    verify, optimize = kernelloop_tools(verifier=ScriptedVerifier(), workspace=tmp_path)
    assert verify.get_input_schema().model_json_schema()["allOf"] == [problem, candidate]
    assert optimize.get_input_schema().model_json_schema()["allOf"] == [problem]
