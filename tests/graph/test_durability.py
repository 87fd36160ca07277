"""A run killed with SIGKILL (or stopped with Ctrl-C) resumes from its last checkpoint: nothing
done is lost or redone, and no attempt is verified twice. The run happens in a subprocess
(tests/graph/_solve_entry.py) with a scripted model that sleeps on one round-2 coder."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ENTRY = Path(__file__).with_name("_solve_entry.py")
ROOT = ENTRY.parents[2]


def start(workspace: Path, thread: str, logs: Path, delays: str = "", resume: bool = False) -> subprocess.Popen:
    env = dict(os.environ, KERNELLOOP_TEST_DELAYS=delays, KERNELLOOP_TEST_VERIFY_LOG=str(logs / "verify.log"),
               KERNELLOOP_TEST_MODEL_LOG=str(logs / "model.log"))
    argv = [sys.executable, str(ENTRY), str(workspace), thread] + (["--resume"] if resume else [])
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def wait_for(condition, what: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def saved_drafts_at_latest_checkpoint(workspace: Path, thread: str) -> int:
    """Coder writes the checkpointer holds for the superstep in progress (LangGraph's pending writes)."""
    db = workspace / "checkpoints.sqlite"
    if not db.is_file():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            latest = conn.execute("SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = ?",
                                  (thread,)).fetchone()[0]
            return conn.execute("SELECT count(*) FROM writes WHERE thread_id = ? AND checkpoint_id = ? "
                                "AND channel = 'drafts'", (thread, latest)).fetchone()[0]
        except sqlite3.OperationalError:  # the file exists but the saver hasn't made all its tables yet
            return 0


def attempts(workspace: Path, thread: str) -> list[tuple]:
    record = json.loads((workspace / "runs" / thread / "result.json").read_text())
    return [(a["id"], a["verdict"]["status"], a["code_sha256"]) for a in record["attempt_list"]]


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_equals_an_uninterrupted_run(tmp_path):
    killed, clean = tmp_path / "killed", tmp_path / "clean"
    killed_logs, clean_logs = tmp_path / "killed-logs", tmp_path / "clean-logs"
    for folder in (killed, clean, killed_logs, clean_logs):
        folder.mkdir()

    run = start(killed, "t", killed_logs, delays="coder/r2c1=120")
    # Round 1 verified, and round 2's fast coder (r2c0) saved while r2c1 still "thinks".
    wait_for(lambda: len(lines(killed_logs / "verify.log")) == 2, "round 1 to be verified")
    wait_for(lambda: saved_drafts_at_latest_checkpoint(killed, "t") == 1, "coder r2c0's write to be saved")
    # r2c1 runs beside r2c0; on a busy machine it may not have reached the model yet, and the test is of a kill mid-call.
    wait_for(lambda: "coder/r2c1" in lines(killed_logs / "model.log"), "coder r2c1 to be asking the model")
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    assert run.returncode == -signal.SIGKILL
    assert not (killed / "runs" / "t" / "result.json").exists()

    resumed = finish(start(killed, "t", killed_logs, resume=True))
    uninterrupted = finish(start(clean, "t", clean_logs))

    keys = ("status", "best_id", "best_speedup", "attempts", "rounds", "stop_reason", "run_status")
    assert {k: resumed[k] for k in keys} == {k: uninterrupted[k] for k in keys}
    assert attempts(killed, "t") == attempts(clean, "t")
    verified = [line.split()[0] for line in lines(killed_logs / "verify.log")]
    assert sorted(verified) == ["r1c0", "r1c1", "r2c0", "r2c1"]  # each exactly once, across both processes
    model_calls = lines(killed_logs / "model.log")
    assert model_calls.count("coder/r2c0") == 1  # its saved write was not redone
    assert model_calls.count("coder/r2c1") == 2  # killed mid-call, so asked again
    assert model_calls.count("planner/plan") == 1


@pytest.mark.slow
def test_ctrl_c_writes_the_best_so_far_and_the_thread_resumes(tmp_path, ctrl_c_reaches_children):
    logs = tmp_path / "logs"
    logs.mkdir()
    run = start(tmp_path, "t", logs, delays="coder/r2c1=8")
    wait_for(lambda: saved_drafts_at_latest_checkpoint(tmp_path, "t") == 1 and
             len(lines(logs / "verify.log")) == 2, "round 2 to be under way")
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    partial = json.loads((tmp_path / "runs" / "t" / "result.json").read_text())
    assert (partial["run_status"], partial["stop_reason"], partial["attempts"]) == ("interrupted", "interrupted", 2)
    # the best so far (round 1's, incorrect) is kept with the run; a failure is written as no best kernel
    assert partial["best_id"] and (tmp_path / "runs" / "t" / "kernels" / f"{partial['best_id']}.py").is_file()
    assert partial["best_kernel"] is None and not (tmp_path / "runs" / "t" / "best_kernel.py").exists()

    resumed = finish(start(tmp_path, "t", logs, resume=True))
    assert (resumed["status"], resumed["stop_reason"], resumed["attempts"]) == ("correct", "target_met", 4)
    assert sorted(line.split()[0] for line in lines(logs / "verify.log")) == ["r1c0", "r1c1", "r2c0", "r2c1"]
