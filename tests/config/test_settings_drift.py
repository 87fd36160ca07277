"""Drift: every setting reaches every entry point with the same value from each source.

For each setting (the knobs, the device, the workspace, the checkpoint URL, the job limits), each
source (a flag or argument, KERNELLOOP_* in the environment, .env, kernelloop.toml) and each entry
point (the CLI's solve, kernelloop.solve, kernelloop.verify, the MCP server's start_optimization,
the LangChain tool, the graph's input and context as LangGraph Server runs them), the value the
entry point hands to its work is captured where the work begins (run_solve, the verifier pool, the
Verifier) and must equal the value set. A source an entry point has no flag for is skipped for
that entry point alone (say, the job limits have no MCP argument: env and files still reach it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from typer.testing import CliRunner

import kernelloop
from kernelloop.cli import app
from kernelloop.serve import runs

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "examples" / "recorded_run" / "scale_bias_relu.py"
CANDIDATE = ROOT / "examples" / "recorded_run" / "scale_bias_relu.py"  # any file: the pool is a fake

# setting -> (the text a person writes, the value the work must get; a callable: of the working dir)
VALUES: dict[str, tuple[str, Any]] = {
    "budget": ("7m", 420.0),
    "candidates": ("3", 3),
    "target": ("1.7x", 1.7),
    "max_rounds": ("5", 5),
    "device": ("cpu", "cpu"),
    "home": ("ws-drift", lambda cwd: (cwd / "ws-drift").resolve()),
    "checkpoints": ("sqlite:///drift.db", "sqlite:///drift.db"),
    "compile_timeout": ("77", 77.0),
    "run_timeout": ("88", 88.0),
    # what a server's caller may choose: the working dir (where served_problem() puts PROBLEM) and one more
    "file_roots": (f".{os.pathsep}/srv/kl", f".{os.pathsep}/srv/kl"),
    "allow_caller_endpoints": ("true", True),
}
SOURCES = ["flag", "env", "dotenv", "toml"]


class Captured(Exception):
    """Raised where the work would begin, after the values were taken."""


def from_settings(chosen) -> dict[str, Any]:
    return {"budget": chosen.budget, "candidates": chosen.candidates, "target": chosen.target,
            "max_rounds": chosen.max_rounds, "device": str(chosen.device), "home": chosen.workspace.root,
            "checkpoints": chosen.checkpoints, "compile_timeout": chosen.compile_timeout,
            "run_timeout": chosen.run_timeout, "file_roots": chosen.file_roots,
            "allow_caller_endpoints": chosen.allow_caller_endpoints}


class FakePool:
    """A verifier pool that records how it was made (device, workspace, limits) and judges nothing."""

    device = "cpu"
    made: list[dict[str, Any]] = []

    def __init__(self, device, ray=None, *, workspace=None, compile_timeout_s=None, run_timeout_s=None, **_):
        FakePool.made.append({"device": str(device), "home": Path(workspace).resolve() if workspace else None,
                              "compile_timeout": compile_timeout_s, "run_timeout": run_timeout_s})

    def verify(self, candidate, problem, time_left_s=None):
        raise Captured

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --------------------------------------------------------------------------- the entry points
# Each takes the flags to pass (our setting names -> the raw text) and returns what reached the work.

def _solved(monkeypatch, call: Callable[[], Any]) -> dict[str, Any]:
    seen: list[Any] = []

    def fake_run_solve(problem, settings, options):
        seen.append(settings)
        raise Captured

    monkeypatch.setattr(runs, "run_solve", fake_run_solve)
    monkeypatch.setattr("kernelloop.serve.langchain.run_solve", fake_run_solve)
    call()
    assert seen, "run_solve was never reached"
    return from_settings(seen[-1])


CLI_FLAGS = {"budget": "--budget", "candidates": "--candidates", "target": "--target", "max_rounds": "--max-rounds",
             "device": "--device", "home": "--workspace", "checkpoints": "--checkpoints"}


def cli_solve(flags: dict[str, str], monkeypatch) -> dict[str, Any]:
    argv = ["solve", str(PROBLEM)] + [x for name, value in flags.items() for x in (CLI_FLAGS[name], value)]

    def call():
        result = CliRunner().invoke(app, argv)
        assert isinstance(result.exception, Captured), (result.exit_code, result.output, result.exception)
    return _solved(monkeypatch, call)


API_ARGS = {"budget": ("budget_s", float), "candidates": ("candidates", int), "target": ("target_speedup", str),
            "max_rounds": ("max_rounds", int), "device": ("device", str), "home": ("workspace", str),
            "checkpoints": ("checkpoint_url", str)}


def api_solve(flags: dict[str, str], monkeypatch) -> dict[str, Any]:
    args = {API_ARGS[n][0]: (420.0 if n == "budget" else API_ARGS[n][1](v)) for n, v in flags.items()}

    def call():
        with pytest.raises(Captured):
            kernelloop.solve(PROBLEM, chat_client=object(), **args)
    return _solved(monkeypatch, call)


TOOL_ARGS = {"budget": ("budget_s", lambda v: 420.0), "candidates": ("candidates", int),
             "target": ("target_speedup", lambda v: 1.7), "max_rounds": ("max_rounds", int)}
SERVER_FLAGS = {"device": "device", "home": "workspace"}  # `kernelloop mcp --device --workspace`


def served_problem() -> Path:
    """PROBLEM copied into the working dir: a server's caller names files only in the operator's dirs
    (file_roots; unset: the working dir)."""
    copy = Path.cwd() / PROBLEM.name
    shutil.copy(PROBLEM, copy)
    return copy


def mcp_start(flags: dict[str, str], monkeypatch) -> dict[str, Any]:
    from kernelloop.serve.mcp import build_server, open_manager

    args = {TOOL_ARGS[n][0]: TOOL_ARGS[n][1](v) for n, v in flags.items() if n in TOOL_ARGS}
    server_flags = {SERVER_FLAGS[n]: v for n, v in flags.items() if n in SERVER_FLAGS}
    FakePool.made.clear()
    seen: list[Any] = []

    def fake_run_solve(problem, settings, options):
        seen.append(settings)
        raise Captured

    monkeypatch.setattr(runs, "run_solve", fake_run_solve)

    async def session(manager) -> None:
        async with Client(build_server(manager)) as client:
            started = await client.call_tool("start_optimization", {"problem_path": str(served_problem()), **args})
            assert not started.is_error, started.content
            job_id = started.structured_content["job_id"]
        manager.wait(job_id, 60)

    with open_manager(pool_factory=FakePool, **server_flags) as manager:
        anyio.run(session, manager)
    found = from_settings(seen[-1])
    # the pool the job verifies on was made with the same device, workspace and limits
    assert FakePool.made and {k: FakePool.made[-1][k] for k in ("device", "home", "compile_timeout", "run_timeout")} \
        == {k: found[k] for k in ("device", "home", "compile_timeout", "run_timeout")}
    return found


LANGCHAIN_FLAGS = {"device": "device", "home": "workspace"}


def langchain_optimize(flags: dict[str, str], monkeypatch) -> dict[str, Any]:
    from kernelloop.serve.langchain import kernelloop_tools

    args = {TOOL_ARGS[n][0]: TOOL_ARGS[n][1](v) for n, v in flags.items() if n in TOOL_ARGS}
    made = {LANGCHAIN_FLAGS[n]: v for n, v in flags.items() if n in LANGCHAIN_FLAGS}

    def call():
        _, optimize = kernelloop_tools(chat_client=object(), **made)
        with pytest.raises(Captured):
            optimize.func(problem_path=str(served_problem()), **args)
    return _solved(monkeypatch, call)


def api_verify(flags: dict[str, str], monkeypatch) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if "device" in flags:
        args["device"] = flags["device"]
    if "home" in flags:
        args["workspace"] = flags["home"]
    FakePool.made.clear()
    monkeypatch.setattr("kernelloop.tools.verify.pool.make_pool", FakePool)
    with pytest.raises(Captured):
        kernelloop.verify(CANDIDATE, PROBLEM, **args)
    return FakePool.made[-1]


GRAPH_INPUT = {"budget": ("budget_s", lambda v: 420.0), "candidates": ("candidates", int),
               "target": ("target_speedup", lambda v: 1.7), "max_rounds": ("max_rounds", int),
               "device": ("device", str)}


def graph_server(flags: dict[str, str], monkeypatch) -> dict[str, Any]:
    """LangGraph Server: the run's input settings (the first node completes them from the Settings) and the
    context's verifier (built on first use)."""
    from kernelloop.graph.context import Context
    from kernelloop.graph.state import RunSettings

    given = {GRAPH_INPUT[n][0]: GRAPH_INPUT[n][1](v) for n, v in flags.items() if n in GRAPH_INPUT}
    settings = RunSettings.from_input(given)
    made: list[dict[str, Any]] = []

    class FakeVerifier:
        def __init__(self, device, workspace, compile_timeout_s, run_timeout_s):
            made.append({"device": str(device), "home": Path(workspace).resolve(),
                         "compile_timeout": compile_timeout_s, "run_timeout": run_timeout_s})

    monkeypatch.setattr("kernelloop.tools.verify.verifier.Verifier", FakeVerifier)
    context = Context(device=flags.get("device"), workspace=flags.get("home"))
    context.get_verifier()
    return {"budget": settings.budget_s, "candidates": settings.candidates, "target": settings.target_speedup,
            "max_rounds": settings.max_rounds, **made[-1]}


ENTRY_POINTS: dict[str, tuple[Callable[..., dict[str, Any]], set[str], set[str]]] = {
    # name: (entry point, the settings it has a flag for, the settings it hands on)
    "cli_solve": (cli_solve, set(CLI_FLAGS), set(VALUES)),
    "api_solve": (api_solve, set(API_ARGS), set(VALUES)),
    "api_verify": (api_verify, {"device", "home"}, {"device", "home", "compile_timeout", "run_timeout"}),
    "mcp": (mcp_start, set(TOOL_ARGS) | set(SERVER_FLAGS), set(VALUES)),
    "langchain": (langchain_optimize, set(TOOL_ARGS) | set(LANGCHAIN_FLAGS), set(VALUES)),
    "graph": (graph_server, set(GRAPH_INPUT) | {"home"}, {"budget", "candidates", "target", "max_rounds", "device",
                                                         "home", "compile_timeout", "run_timeout"}),
}


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("KERNELLOOP_")]:
        monkeypatch.delenv(name)
    # an endpoint for the entry points that check one before they start (never called: run_solve is captured)
    monkeypatch.setenv("KERNELLOOP_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("KERNELLOOP_MODEL", "drift")
    monkeypatch.chdir(tmp_path)


def _set(source: str, setting: str, text: str, tmp_path: Path, monkeypatch) -> dict[str, str]:
    if source == "env":
        monkeypatch.setenv(f"KERNELLOOP_{setting.upper()}", text)
    elif source == "dotenv":
        (tmp_path / ".env").write_text(f"KERNELLOOP_{setting.upper()}={text}\n")
    elif source == "toml":
        (tmp_path / "kernelloop.toml").write_text(f"{setting} = {text if text.isdigit() else repr(text)}\n")
    return {setting: text} if source == "flag" else {}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
@pytest.mark.parametrize("source", SOURCES)
def test_every_setting_reaches_every_entry_point_from_every_source(entry, source, tmp_path, monkeypatch):
    call, has_flag, hands_on = ENTRY_POINTS[entry]
    checked = 0
    for setting, (text, expected) in VALUES.items():
        if setting not in hands_on or (source == "flag" and setting not in has_flag):
            continue
        for leftover in (tmp_path / ".env", tmp_path / "kernelloop.toml"):
            leftover.unlink(missing_ok=True)
        with monkeypatch.context() as scoped:
            flags = _set(source, setting, text, tmp_path, scoped)
            found = call(flags, scoped)
        want = expected(tmp_path) if callable(expected) else expected
        assert found[setting] == want, f"{setting} from {source} reached {entry} as {found[setting]!r}, not {want!r}"
        checked += 1
    assert checked, "nothing was checked"
