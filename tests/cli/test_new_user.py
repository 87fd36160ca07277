"""What a new user met on every surface from a fresh clone (issue 29), one test per finding.

Finding 2 (settings honoured at one entry point only) is tests/config/test_settings_drift.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
from io import StringIO
from pathlib import Path

import pytest
from pydantic import ValidationError
from rich.console import Console
from typer.testing import CliRunner

from kernelloop.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
RELU = ROOT / "tests" / "fixtures" / "problems" / "relu.py"
cli = CliRunner()


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    for name in [n for n in os.environ if n.startswith("KERNELLOOP_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


# 1. Bad config: one line, exit 2, doctor included; an unknown key is named, with "did you mean".
@pytest.mark.parametrize("toml, says", [
    ('candidates = "lots"', "candidates (from kernelloop.toml"),
    ("candidates = ", "not TOML"),
    ("candidate = 3", "unknown setting 'candidate'; did you mean 'candidates'?")])
@pytest.mark.parametrize("command", [["doctor"], ["solve", str(RELU)], ["runs", "list"], ["verify", "k.py", "-p", "p.py"]])
def test_a_bad_config_is_one_line_and_exit_2_in_every_command(tmp_path, toml, says, command):
    (tmp_path / "kernelloop.toml").write_text(toml + "\n")
    result = cli.invoke(app, command)
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and says in result.stderr and "Traceback" not in result.output


def test_a_misspelt_environment_setting_is_named_too(monkeypatch):
    monkeypatch.setenv("KERNELLOOP_CANDIDATE", "3")
    result = cli.invoke(app, ["runs", "list"])
    assert result.exit_code == 2 and "did you mean KERNELLOOP_CANDIDATES?" in result.stderr


# 3. Source text everywhere.
def test_problems_and_candidates_come_from_source_text():
    from kernelloop import Candidate, Problem
    from kernelloop.errors import ProblemError

    source = RELU.read_text()
    problem = Problem.from_source(source, name="relu")
    assert (problem.name, problem.source, problem.trusted) == ("relu", source, True)
    assert Problem.from_source(source, trusted=False).trusted is False  # a problem from outside stays sandboxed
    assert Candidate.from_source("class ModelNew: pass\n").source == "class ModelNew: pass\n"
    with pytest.raises(ProblemError, match="syntax error"):
        Problem.from_source("class Model(:\n")


def test_verify_takes_source_text_as_kernelbench_users_pass_it():
    import kernelloop
    from tests.graph.scripted import FIXED_KERNEL

    verdict = kernelloop.verify(FIXED_KERNEL, RELU.read_text(), device="cpu")  # (new_src, ref_src)
    assert verdict.status.value == "correct", verdict.reason


# 4. Typed graph input: a form in Studio, the hash computed, a typo an error, no internal context fields.
def test_the_graph_input_is_typed_and_checked():
    from kernelloop.graph.build import build_graph
    from kernelloop.graph.state import ProblemRecord, RunSettings

    record = ProblemRecord(path=str(RELU))
    assert record.name == "relu" and record.source == RELU.read_text() and len(record.sha256) == 64
    with pytest.raises(ValidationError, match="does not match"):
        ProblemRecord(source=RELU.read_text(), sha256="nope")
    with pytest.raises(ValidationError, match="candidtes"):
        RunSettings.from_input({"candidtes": 3})
    graph = build_graph()
    schema = graph.get_input_jsonschema()
    problem = schema["$defs"]["ProblemRecord"]
    assert {"path", "source"} <= set(problem["properties"]) and problem["additionalProperties"] is False
    assert "session_started_at" not in json.dumps(graph.get_context_jsonschema())


# 5. Help text as written, with the defaults.
def test_help_keeps_its_brackets_and_shows_the_defaults():
    bench = cli.invoke(app, ["bench", "--help"], env={"COLUMNS": "300"}).output
    assert "kernelloop[ray]" in bench
    solve = cli.invoke(app, ["solve", "--help"], env={"COLUMNS": "300"}).output
    for shown in ("[default: 15m]", "[default: 4]", "[default: 1.2x]"):
        assert shown in solve


# 6. A plain resume asks for the turns the run had not reached without speaking of a recording.
def test_a_resume_does_not_speak_of_a_recording(caplog):
    from kernelloop.agents.turns import KeyedReplayChatClient, Message, ModelTurn, RecordedTurn

    class Live:
        model_name = "live"

        def complete_keyed(self, key, messages):
            return ModelTurn(content="answer", model="live")

    own = [RecordedTurn(key="planner/plan", turn=ModelTurn(content="plan", model="m"))]
    client = KeyedReplayChatClient(own, fallback=Live(), own_thread=True)
    with caplog.at_level(logging.INFO):
        turn = client.complete_keyed("coder/r2c0", [Message(role="user", content="write it")])
    assert turn.content == "answer" and client.live_keys == ["coder/r2c0"]
    assert "recording" not in caplog.text and "was not answered before the run stopped" in caplog.text


# 8. Reasoning streams into the live view; something is on screen at once.
def test_solve_streams_the_reasoning_and_shows_itself_at_once(monkeypatch):
    from kernelloop.cli import _live
    from kernelloop.serve import runs

    seen = []

    def fake_run_solve(problem, settings, options):
        seen.append(options)
        raise KeyboardInterrupt  # the CLI's Ctrl-C path: exits 130 with nothing run

    monkeypatch.setattr(runs, "run_solve", fake_run_solve)
    monkeypatch.setattr("os._exit", lambda code: (_ for _ in ()).throw(SystemExit(code)))
    cli.invoke(app, ["solve", str(RELU), "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
    assert seen and seen[0].stream_reasoning is True
    screen = StringIO()
    monkeypatch.setattr(_live, "_screen", Console(file=screen, force_terminal=True, width=120))
    with _live.LiveView():
        drawn = screen.getvalue()
    assert "starting" in drawn  # before any event of the run


# 9. Agent-facing replies: brief by default, no secret arguments, unknown arguments refused.
def test_agent_replies_are_brief_and_strict(tmp_path):
    from kernelloop.records import Code, Status, Verdict
    from kernelloop.serve.jobs import JobStatus
    from kernelloop.serve.langchain import kernelloop_tools

    verdict = Verdict(status=Status.correct, reason="correct on 4 input sets", code=Code.correct, device="cpu",
                      cost_s={f"phase_{i}": 0.1 for i in range(40)}, feedback="fine")
    status = JobStatus(job_id="verify-1", kind="verify", state="succeeded", problem="relu", created_at=0.0,
                       verdict=verdict)
    brief = status.for_agent().model_dump_json()
    detail = status.for_agent(detail=True).model_dump_json()
    assert "cost_s" not in brief and len(brief) < 500 and "cost_s" in detail and len(detail) > 1000
    verify_kernel, optimize_kernel = kernelloop_tools(workspace=tmp_path, chat_client=object())
    reply = optimize_kernel.invoke({"problem_path": str(RELU), "candidate": 3})
    assert "candidate" in reply and "\n" not in reply.strip()
    assert "api_key" not in optimize_kernel.args and "api_key" not in verify_kernel.args


# 10. Honest weak results.
def test_no_best_kernel_when_nothing_is_correct(tmp_path):
    from kernelloop.agents.records import Attempt
    from kernelloop.graph.report import write_outputs
    from kernelloop.graph.rundir import RunDir
    from kernelloop.graph.state import RunSettings
    from kernelloop.records import Code, Status, Verdict

    wrong = Attempt(id="r1c0", round=1, index=0, backend="triton", code="class ModelNew: pass\n",
                    verdict=Verdict(status=Status.incorrect, reason="wrong", code=Code.mismatch))
    state = {"problem": {"name": "relu", "source": "x"},
             "settings": RunSettings().model_dump(), "attempts": [wrong.model_dump(mode="json")], "best_id": "r1c0"}
    run = RunDir(tmp_path, "t")
    (run.root).mkdir(parents=True)
    summary = write_outputs(run, state, "finished", "budget_spent")
    assert summary.best_kernel is None and not run.path("best_kernel.py").exists()


def test_fast_p_is_null_where_nothing_was_timed():
    from kernelloop.evals.metrics import Outcome, baseline_metrics

    metrics = baseline_metrics([Outcome(correct=True, speedup=None)])
    assert metrics.fast_p["0"] == 1.0 and metrics.fast_p["1"] is None and metrics.timed == 0


def test_the_readme_installs_torch_for_the_cpu_from_its_own_index():
    install = next(line for line in README.splitlines() if "pip install" in line and "kernelloop solve" in line)
    assert "--index-url https://download.pytorch.org/whl/cpu" in install or \
        "--extra-index-url https://download.pytorch.org/whl/cpu" in install


def test_the_readme_subgraph_snippet_runs_as_written(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    snippet = next(b for b in blocks if "add_node(\"kernelloop\", build_graph())" in b)
    monkeypatch.chdir(ROOT)  # the snippet's paths are a source checkout's
    monkeypatch.setenv("KERNELLOOP_HOME", str(tmp_path))
    namespace: dict = {}
    exec(compile(snippet, "README.md", "exec"), namespace)  # noqa: S102 - the README's own code, as a user runs it
    assert namespace["out"]["stop_reason"] and namespace["out"]["best_id"]
