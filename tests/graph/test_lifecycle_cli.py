"""The lifecycle through the real CLI and the real CPU verifier: `solve --recorded` stopped by Ctrl-C, SIGTERM or
SIGKILL at a deterministic point (once the Nth model turn is saved), then `runs resume` as a user would type it
(the printed command for Ctrl-C and SIGTERM), must end as the uninterrupted run does; a fork of the resumed run then
writes its own files. tests/graph/test_lifecycle.py walks every checkpoint in process."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.graph.test_issue38 import PROBLEM, RECORDING, checkpoint_before_round_one, clean_env, kernelloop_cmd

SOLVE = ("solve", str(PROBLEM), "--recorded", str(RECORDING), "--device", "cpu", "--candidates", "2")


def ending(stdout: str) -> tuple:
    result = json.loads(stdout.strip().splitlines()[-1])
    return result["status"], result["best_id"], result["stop_reason"], result["attempts"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("whole")
    done = subprocess.run(kernelloop_cmd(*SOLVE, "--workspace", str(workspace), "--json"), env=clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return ending(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("how,turns_saved", [(signal.SIGINT, 1), (signal.SIGTERM, 3), (signal.SIGKILL, 1),
                                             (signal.SIGKILL, 3)])
def test_interrupt_then_resume_as_printed_ends_as_the_uninterrupted_run(tmp_path, uninterrupted, how, turns_saved,
                                                                         ctrl_c_reaches_children):
    workspace = tmp_path / "ws"
    run = subprocess.Popen(kernelloop_cmd(*SOLVE, "--workspace", str(workspace), "--thread", "T"), cwd=tmp_path,
                           env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=how == signal.SIGKILL)
    turns = workspace / "runs" / "T" / "turns"
    while not (turns.is_dir() and len(list(turns.glob("*.json"))) >= turns_saved):
        assert run.poll() is None, run.communicate()[1][-2000:]
        time.sleep(0.05)
    if how == signal.SIGKILL:
        os.killpg(run.pid, signal.SIGKILL)  # the whole job, its sandbox workers too: `kill -9` of a session
    else:
        run.send_signal(how)
    _, err = run.communicate(timeout=120)
    if how == signal.SIGKILL:
        assert run.returncode == -signal.SIGKILL
        command = f"kernelloop runs resume T --workspace {workspace}"
    else:
        assert run.returncode == 130, err[-2000:]
        command = err[err.index("Resume with:"):].splitlines()[1].strip()
        assert command == f"kernelloop runs resume T --workspace {workspace}"
    resumed = subprocess.run(kernelloop_cmd(*shlex.split(command)[1:], "--json"), cwd=tmp_path, env=clean_env(),
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert ending(resumed.stdout) == uninterrupted

    if (how, turns_saved) != (signal.SIGTERM, 3):
        return
    run_dir = workspace / "runs" / "T"
    report = (run_dir / "report.md").read_text()
    forked = subprocess.run(kernelloop_cmd("runs", "fork", "T", "--checkpoint", checkpoint_before_round_one(workspace, "T"),
                                           "--target", "2x", "--recorded", "--workspace", str(workspace), "--json"),
                            cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert forked.returncode == 0, forked.stderr[-3000:]
    branch = json.loads(forked.stdout.strip().splitlines()[-1])
    assert (run_dir / "report.md").read_text() == report
    assert "target: 2x over eager" in (Path(branch["outputs_dir"]) / "report.md").read_text()
