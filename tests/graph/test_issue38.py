"""Issue 38's findings, each as a test that failed before the run lifecycle was made one state machine.

1. Ctrl-C of `solve --recorded`, then the printed `runs resume`: it answered "no model endpoint configured".
2. A recording that can't answer (a fork's hint changed the prompt) was a 60-line traceback and a dead branch.
3. A fork overwrote its parent's report.md, best_kernel.py and result.json.
4. solve accepted a recording of another problem.
5. `verify --json` on bad input printed nothing on stdout.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelloop.cli import app
from kernelloop.graph.rundir import load_recording, read_recording
from kernelloop.serve.runs import fork, resume, solve
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.test_example import EXAMPLE, ColumnBiasVerifier

PROBLEM, RECORDING = EXAMPLE / "scale_bias_relu.py", EXAMPLE / "turns.jsonl"
COMMON = {"verifier": ColumnBiasVerifier(), "analyze": lambda problem: None}
VENV_BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
cli = CliRunner()


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")}
    return env | {"PYTHONPATH": str(REPO), "COLUMNS": "200"}


def kernelloop_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelloop.cli", *args]


def checkpoint_before_round_one(workspace: Path, thread: str) -> str:
    """The checkpoint where the plan is reviewed and round 1's coders are next (a fork there changes their prompt)."""
    from kernelloop.graph.build import build_graph
    from kernelloop.graph.checkpoint import open_checkpointer

    with open_checkpointer(None, workspace) as saver:
        history = list(build_graph(saver).get_state_history({"configurable": {"thread_id": thread}}))
    return next(s.config["configurable"]["checkpoint_id"] for s in history
                if s.values.get("phase") == "plan_reviewed" and "coder" in s.next)


@pytest.mark.slow
def test_1_the_printed_resume_of_an_interrupted_recorded_solve_finishes_it(tmp_path, ctrl_c_reaches_children):
    """Ctrl-C at a deterministic point (once round 1's two coder turns are saved), then the command as printed."""
    workspace = tmp_path / "ws"
    solve_cmd = subprocess.Popen(
        kernelloop_cmd("solve", str(PROBLEM), "--recorded", str(RECORDING), "--device", "cpu", "--candidates", "2",
                       "--workspace", str(workspace), "--thread", "T"),
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    turns = workspace / "runs" / "T" / "turns"
    while not (turns.is_dir() and len(list(turns.glob("coder-r1*.json"))) == 2):
        assert solve_cmd.poll() is None, solve_cmd.communicate()[1][-2000:]
        time.sleep(0.05)
    solve_cmd.send_signal(signal.SIGINT)
    _, err = solve_cmd.communicate(timeout=120)
    assert solve_cmd.returncode == 130, err[-2000:]
    printed = err[err.index("Resume with:"):].splitlines()[1].strip()
    assert printed == f"kernelloop runs resume T --workspace {workspace}"
    resumed = subprocess.run(kernelloop_cmd(*shlex.split(printed)[1:], "--json"), cwd=tmp_path, env=clean_env(),
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    result = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert (result["status"], result["best_id"], result["stop_reason"]) == ("correct", "r2c0", "correct_unmeasured")


def test_1_resume_takes_the_same_model_sources_as_solve():
    help_text = cli.invoke(app, ["runs", "resume", "--help"], env={"COLUMNS": "200"}).output
    for flag in ("--recorded", "--recording", "--base-url", "--model", "--stop-at-recording-end"):
        assert flag in help_text


def test_2_a_recording_that_cannot_answer_is_one_line_and_the_branch_stays_resumable(tmp_path):
    solve(PROBLEM, recorded=RECORDING, candidates=2, device="cpu", workspace=tmp_path, thread_id="T", **COMMON)
    checkpoint = checkpoint_before_round_one(tmp_path, "T")
    failed = cli.invoke(app, ["runs", "fork", "T", "--checkpoint", checkpoint, "--hint", "use a persistent grid",
                              "--recorded", "--workspace", str(tmp_path)], env={"COLUMNS": "200"})
    assert failed.exit_code == 2, failed.output
    lines = [line for line in failed.stderr.splitlines() if "error" in line.lower()]  # the rest: the live view
    assert len(lines) == 1 and "Traceback" not in failed.output and lines[0].startswith("error: "), failed.stderr
    assert "prompt of coder/r1c" in lines[0] and "--base-url URL --model NAME" in lines[0]
    assert "--stop-at-recording-end" in lines[0]
    # not a dead branch: the branch is the thread's latest checkpoint, and a live model finishes it
    replies = {t.key: t.turn.content for t in read_recording(RECORDING)}
    script = [Reply(replies["coder/r2c0"])]  # every live call gets the fixed kernel
    with FakeOpenAIServer(script) as server:
        result = resume("T", workspace=tmp_path, base_url=server.url, model=server.model, **COMMON)
        assert server.chat_requests
    assert result.status == "correct" and result.branch == "fork1"
    assert (tmp_path / "runs" / "T" / "branches" / "fork1" / "report.md").is_file()


def test_3_a_fork_writes_its_own_files_and_leaves_its_parents(tmp_path):
    solve(PROBLEM, recorded=RECORDING, candidates=2, device="cpu", workspace=tmp_path, thread_id="T", **COMMON)
    run = tmp_path / "runs" / "T"
    before = {name: (run / name).read_text() for name in ("report.md", "result.json", "best_kernel.py")}
    checkpoint = checkpoint_before_round_one(tmp_path, "T")
    branch = fork("T", checkpoint, changes={"target_speedup": 2.0}, workspace=tmp_path, recorded=True, **COMMON)
    assert {name: (run / name).read_text() for name in before} == before
    assert "target: 1.2x over eager" in (run / "report.md").read_text()
    assert "target: 2x over eager" in (run / "branches" / branch.branch / "report.md").read_text()
    shown = cli.invoke(app, ["runs", "show", "T", "--workspace", str(tmp_path), "--json"])
    files = json.loads(shown.stdout.strip().splitlines()[-1])["branch_files"]
    assert files == {"": ["best_kernel.py", "result.json", "report.md"],
                     branch.branch: ["best_kernel.py", "result.json", "report.md"]}


def test_4_solve_refuses_a_recording_of_another_problem_in_one_line(tmp_path):
    other = REPO / "kernelloop" / "evals" / "problems" / "3_LayerNorm.py"
    refused = cli.invoke(app, ["solve", str(other), "--recorded", str(RECORDING), "--device", "cpu",
                               "--workspace", str(tmp_path), "--json"], env={"COLUMNS": "200"})
    assert refused.exit_code == 2, refused.output
    error = json.loads(refused.stdout.strip().splitlines()[-1])["error"]
    assert "scale_bias_relu" in error["message"] and "3_LayerNorm" in error["message"]
    assert refused.stderr.strip().startswith("error: ") and len(refused.stderr.strip().splitlines()) == 1


def test_4_recordings_made_before_headers_still_load():
    old = load_recording(REPO / "tests" / "fixtures" / "recordings" / "before_headers.jsonl")
    assert old.header is None and [t.key for t in old.turns] == [t.key for t in read_recording(RECORDING)]


def test_5_verify_json_on_bad_input_prints_an_error_object(tmp_path):
    done = cli.invoke(app, ["verify", str(tmp_path / "missing.py"), "--problem", str(PROBLEM), "--json"])
    assert done.exit_code == 2
    error = json.loads(done.stdout.strip().splitlines()[-1])["error"]
    assert error["code"] == "usage" and "missing.py" in error["message"]


def test_5_a_wrong_shape_verdict_prints_no_error_numbers(capsys):
    from kernelloop.cli.verify_cmd import print_verdict
    from kernelloop.records import Code, Status, Verdict

    print_verdict(Verdict(status=Status.incorrect, code=Code.wrong_type, reason="output shape (4, 8), expected (8, 4)",
                          max_abs_err=0.0, rel_err=0.0))
    shown = capsys.readouterr().out
    assert "expected (8, 4)" in shown and "max_abs_err" not in shown


def test_5_python_errors_name_python_arguments():
    import kernelloop
    from kernelloop.config.settings import ConfigError

    with pytest.raises(ConfigError, match=r"^argument device=: 'gpu' is not a device") as raised:
        kernelloop.verify(str(PROBLEM), str(PROBLEM), device="gpu")
    assert "--device" not in str(raised.value)


def test_5_solve_result_lists_its_attempts_and_keeps_their_count(tmp_path):
    result = solve(PROBLEM, recorded=RECORDING, candidates=2, device="cpu", workspace=tmp_path, **COMMON)
    assert [a.id for a in result.attempt_list] == ["r1c0", "r1c1", "r2c0", "r2c1"] and result.attempts == 4
    assert "attempt_list" not in result.model_dump()  # JSON answers keep the count only
