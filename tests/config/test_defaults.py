"""One source of defaults: Settings states kernelloop.config.defaults' budget, candidates, target and rounds;
the CLI, the API, MCP and the LangChain tool state the same caps and no default of their own (a
knob they are not given comes from the entry point's Settings: tests/config/test_settings_drift.py
follows each value from its source to each entry point). The graph's RunSettings and the warm
start (`start`) state kernelloop.config.defaults too.

Each entry point is read the way its users see it (a signature, a JSON schema, a click option),
so a value typed into any of them by hand makes this fail.
"""

from __future__ import annotations

import inspect

import anyio
import typer
from mcp import Client

from kernelloop.cli import app
from kernelloop.config import defaults
from kernelloop.config.settings import Settings
from kernelloop.config.units import parse_duration_s, parse_target
from kernelloop.graph.state import RunSettings
from kernelloop.serve.jobs import JobManager
from kernelloop.serve.langchain import solve_tool
from kernelloop.serve.mcp import build_server
from kernelloop.serve.requests import SolveRequest, SolveSettings
from kernelloop.serve.runs import FROM_SETTINGS, RunOptions, solve

EXPECTED = {"budget_s": (defaults.BUDGET_S, defaults.MAX_BUDGET_S),
            "candidates": (defaults.CANDIDATES, defaults.MAX_CANDIDATES),
            "target_speedup": (defaults.TARGET_SPEEDUP, None),
            "max_rounds": (defaults.MAX_ROUNDS, defaults.MAX_ROUNDS_LIMIT)}


def knobs(schema: dict, names: dict[str, str] | None = None) -> dict[str, tuple]:
    """(default, maximum) of each knob in a JSON schema; `names` maps our names to the schema's."""
    names = names or {}
    properties = schema["properties"]
    found = {}
    for knob in EXPECTED:
        field = properties[names.get(knob, knob)]
        maximum = field.get("maximum", next((o.get("maximum") for o in field.get("anyOf", []) if "maximum" in o), None))
        found[knob] = (field.get("default"), maximum)
    return found


def start_default(schema: dict):
    """The warm start's default in a JSON schema (null: from scratch), checked present."""
    assert "start" in schema["properties"] and "start_source" in schema["properties"]
    return schema["properties"]["start"].get("default")


UNSET = {knob: (None, cap) for knob, (_, cap) in EXPECTED.items()}  # the caps, and the default left to Settings


def test_the_request_models_and_the_config_file_state_the_defaults_and_caps():
    assert knobs(SolveSettings.model_json_schema()) == UNSET
    assert knobs(SolveRequest.model_json_schema()) == UNSET
    assert start_default(SolveSettings.model_json_schema()) == start_default(SolveRequest.model_json_schema()) \
        == defaults.START
    assert f"'{defaults.START_AUTO}'" in SolveSettings.model_fields["start"].description
    config = {"budget_s": "budget", "target_speedup": "target"}
    assert knobs(Settings.model_json_schema(), config) == EXPECTED
    assert SolveRequest.model_fields["backend"].default is None and Settings.model_fields["backend"].default == \
        defaults.BACKEND
    assert SolveRequest.model_fields["device"].default is None and Settings.model_fields["device"].default == \
        defaults.DEVICE


def test_the_api_and_the_graph_state_the_defaults():
    parameters = inspect.signature(solve).parameters
    assert {k: parameters[k].default for k in EXPECTED} == {"budget_s": None, "candidates": None, "max_rounds": None,
                                                             "target_speedup": FROM_SETTINGS}
    assert (parameters["device"].default, parameters["backend"].default) == (None, None)
    options = RunOptions.model_fields
    assert (options["baseline"].default, options["start"].default) == (defaults.BASELINE, defaults.START)
    settings = RunSettings()
    assert (settings.budget_s, settings.candidates, settings.target_speedup, settings.max_rounds) == tuple(
        v[0] for v in EXPECTED.values())
    assert (settings.device, settings.backend, settings.baseline) == (defaults.DEVICE, defaults.BACKEND,
                                                                      defaults.BASELINE)


def test_the_mcp_tool_states_the_defaults_and_caps(tmp_path):
    async def schema() -> dict:
        with JobManager(tmp_path) as manager:
            async with Client(build_server(manager)) as client:
                tools = (await client.list_tools()).tools
        return next(t.input_schema for t in tools if t.name == "start_optimization")

    found = anyio.run(schema)
    assert knobs(found) == UNSET
    assert found["properties"]["backend"].get("default") is None
    assert start_default(found) == defaults.START


def test_the_langchain_tool_states_the_defaults_and_caps(tmp_path):
    tool = solve_tool(workspace=tmp_path, chat_client=object())
    assert knobs(tool.args_schema.model_json_schema()) == UNSET
    assert start_default(tool.args_schema.model_json_schema()) == defaults.START


def test_the_cli_takes_its_defaults_from_the_settings_and_states_the_caps():
    command = typer.main.get_command(app)
    for name in ("solve", "bench"):
        params = {p.name: p for p in command.commands[name].params}
        assert params["budget"].default is None  # unset: the settings (env, files, defaults) decide
        assert "[default: 15m]" in params["budget"].help and parse_duration_s("15m") == defaults.BUDGET_S
    solve_params = {p.name: p for p in command.commands["solve"].params}
    assert solve_params["candidates"].max == defaults.MAX_CANDIDATES
    assert solve_params["max_rounds"].max == defaults.MAX_ROUNDS_LIMIT
    assert f"[default: {defaults.CANDIDATES}]" in solve_params["candidates"].help
    assert "[default: 1.2x]" in solve_params["target"].help and parse_target("1.2x") == defaults.TARGET_SPEEDUP
    assert solve_params["start"].default == defaults.START and f"'{defaults.START_AUTO}'" in solve_params["start"].help
    fork = {p.name: p for p in command.commands["runs"].commands["fork"].params}
    assert fork["candidates"].max == defaults.MAX_CANDIDATES
