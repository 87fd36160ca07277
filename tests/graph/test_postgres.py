"""The Postgres checkpointer against a real PostgreSQL server this module starts (the machine's binaries,
else pgserver's from the dev extra): a solve, a resume after SIGKILL, two processes listing the same threads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import open_checkpointer, thread_ids
from kernelloop.serve.runs import solve
from tests.graph.postgres import binaries, postgres_server
from tests.graph.scripted import RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier

pytest.importorskip("langgraph.checkpoint.postgres", reason="needs the postgres extra")
BIN = binaries()
pytestmark = pytest.mark.skipif(BIN is None, reason="no PostgreSQL binaries (machine or pgserver)")
ENTRY = Path(__file__).with_name("_solve_entry.py")
ROOT = ENTRY.parents[2]


@pytest.fixture(scope="module")
def pg_url():
    with postgres_server(BIN) as url:
        yield url


def entry(workspace: Path, thread: str, url: str, logs: Path, delays: str = "", resume: bool = False):
    env = dict(os.environ, KERNELLOOP_TEST_CHECKPOINTS=url, KERNELLOOP_TEST_DELAYS=delays,
               KERNELLOOP_TEST_VERIFY_LOG=str(logs / "verify.log"), KERNELLOOP_TEST_MODEL_LOG=str(logs / "model.log"))
    argv = [sys.executable, str(ENTRY), str(workspace), thread] + (["--resume"] if resume else [])
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def test_a_solve_checkpoints_to_postgres(tmp_path, pg_url):
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
                   candidates=2, thread_id="pg-solve", checkpoint_url=pg_url, analyze=lambda problem: None)
    assert (result.status, result.best_id, result.stop_reason) == ("correct", "r2c0", "target_met")
    with open_checkpointer(pg_url, tmp_path) as saver:
        assert "pg-solve" in thread_ids(saver)
        history = list(build_graph(saver).get_state_history({"configurable": {"thread_id": "pg-solve"}}))
    assert history[0].values["status"] == "finished" and len(history) > 8  # every step, read back from Postgres


@pytest.mark.slow
def test_resume_after_sigkill_then_two_processes_list_the_same_threads(tmp_path, pg_url):
    logs = tmp_path / "logs"
    logs.mkdir()
    run = entry(tmp_path, "pg-killed", pg_url, logs, delays="coder/r2c1=120")
    deadline = time.monotonic() + 180
    while len(lines(logs / "verify.log")) < 2 or lines(logs / "model.log").count("coder/r2c1") < 1:
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-2000:]
        time.sleep(0.2)
    run.send_signal(signal.SIGKILL)  # round 1 verified; round 2's slow coder is mid-call
    run.wait(timeout=30)

    out, err = entry(tmp_path, "pg-killed", pg_url, logs, resume=True).communicate(timeout=300)
    resumed = json.loads(out.strip().splitlines()[-1]) if out.strip() else pytest.fail(err[-3000:])
    assert (resumed["status"], resumed["stop_reason"], resumed["attempts"]) == ("correct", "target_met", 4)
    assert sorted(line.split()[0] for line in lines(logs / "verify.log")) == ["r1c0", "r1c1", "r2c0", "r2c1"]
    assert lines(logs / "model.log").count("planner/plan") == 1  # the plan came back from Postgres

    solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
          candidates=1, thread_id="pg-other", checkpoint_url=pg_url, analyze=lambda problem: None)
    argv = [sys.executable, "-m", "kernelloop.cli", "runs", "list", "--checkpoints", pg_url, "--workspace",
            str(tmp_path), "--json"]

    def listing(_: int) -> set[str]:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return {row["thread_id"] for row in json.loads(done.stdout.strip().splitlines()[-1])}

    with ThreadPoolExecutor(2) as pool:  # two processes reading the same database at once
        first, second = pool.map(listing, range(2))
    assert first == second and {"pg-killed", "pg-other"} <= first
