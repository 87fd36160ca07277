"""solve and bench when things break around them: the endpoint, the verifier's worker, the disk,
the checkpoint DB. Each ends in a clear one-line error or a recorded failure, never a crash.

SIGKILL of the orchestrator (resume from the checkpoint, nothing lost, no attempt verified
twice) is tests/graph/test_durability.py's.

A full disk is real here, not mocked: the CLI runs in a subprocess whose run dir is a 8 KiB
tmpfs (a mount namespace from bubblewrap, so no root needed: ENOSPC), or, where bubblewrap
can't make one, under an RLIMIT_FSIZE (the kernel refuses growth past it: EFBIG). The second
mechanism is also tested on its own, since it reaches the checkpoint DB first.
"""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelloop.agents.llm import make_chat_model
from kernelloop.cli import app
from kernelloop.evals.records import Mode
from kernelloop.evals.suite import resolve_suite, run_bench, scoring_work
from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import CheckpointError, open_checkpointer
from kernelloop.serve.runs import SolveError, resume, solve
from kernelloop.tools.verify.verifier import Verifier
from tests.fakes.openai_server import ErrorReply, FakeOpenAIServer, Hang, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier, coder_reply

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
EXAMPLE = ROOT / "examples" / "recorded_run"
NO_FACTS = {"analyze": lambda problem: None}
cli = CliRunner()


@pytest.fixture(autouse=True)
def no_live_endpoint(monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL", "KERNELLOOP_API_KEY", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def asks(text: str):
    return lambda messages: text in messages[-1]["content"]


def error_line(stderr: str) -> str:
    """The one-line error a command ended with. (On a non-terminal, the live view's last frame
    does not end its line, so the error follows it on the same line.)"""
    last = stderr.strip().splitlines()[-1]
    assert "error: " in last, stderr[-2000:]
    return last[last.index("error: "):]


# --------------------------------------------------------------------------- the endpoint


def test_an_endpoint_down_at_start_is_one_clear_error_before_any_run(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}/v1"
    started = time.monotonic()
    result = cli.invoke(app, ["solve", str(RELU_PROBLEM), "--base-url", url, "--model", "m", "--device", "cpu",
                              "--workspace", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert error_line(result.stderr).startswith(f"error: model endpoint {url} is unreachable (ConnectError")
    assert "Traceback" not in result.output + result.stderr
    assert time.monotonic() - started < 20  # no retries with backoff against a dead port
    assert not (tmp_path / "runs").exists()  # no thread was started
    with pytest.raises(SolveError, match="unreachable"):  # the Python API says the same
        solve(RELU_PROBLEM, base_url=url, model="m", workspace=tmp_path, verifier=ScriptedVerifier(), **NO_FACTS)


def test_500s_and_timeouts_mid_run_are_retried_then_recorded_as_failed_attempts(tmp_path):
    script = [
        ErrorReply(500, "overloaded", when=asks("You are planning")),
        ErrorReply(500, "overloaded", when=asks("You are planning")),  # the retry fails too: default plan
        ErrorReply(500, "overloaded", when=asks("candidate 1 of 2 in round 1")),
        Reply(coder_reply(FIXED_KERNEL), when=asks("candidate 1 of 2 in round 1")),  # the retry gets through
        Hang(3.0, when=asks("candidate 2 of 2 in round 1")),
        Hang(3.0, when=asks("candidate 2 of 2 in round 1")),  # both tries time out
    ]
    with FakeOpenAIServer(script) as server:
        client = make_chat_model(server.url, "fake-r1", timeout_s=0.5, max_retries=1)
        result = solve(RELU_PROBLEM, chat_client=client, verifier=ScriptedVerifier(), workspace=tmp_path,
                       candidates=2, thread_id="flaky", **NO_FACTS)
        assert server.unserved == 0
    assert (result.status, result.best_id, result.stop_reason) == ("correct", "r1c0", "target_met")
    record = json.loads((Path(result.run_dir) / "result.json").read_text())
    failed = next(a for a in record["attempt_list"] if a["id"] == "r1c1")
    assert failed["verdict"] is None
    assert "after 2 attempts" in failed["model_error"] and "no answer within the 0.5 s timeout" in failed["model_error"]
    with open_checkpointer(None, tmp_path) as saver:
        plan = build_graph(saver).get_state({"configurable": {"thread_id": "flaky"}}).values["plan"]
    assert plan["origin"] == "default" and "HTTP 500" in plan["model_error"] and PLAN_REPLY not in plan["text"]


# --------------------------------------------------------------------------- the verifier's worker

SLOW_RELU = (FIXTURES / "honest" / "relu_triton.py").read_text().replace(
    "        out = torch.empty_like(x)",
    "        spin = 0\n        for step in range(20_000_000):  # slow enough to be caught running\n"
    "            spin += step\n        out = torch.empty_like(x)", 1)


def kill_the_first_running_candidate(jobs_root: Path, verifier: Verifier, killed: list) -> None:
    """Watcher thread: SIGKILL the verifier's worker once a candidate job has begun to run."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = [d for d in jobs_root.glob("cand-*") if (d / "stderr.txt").is_file()]  # the child has begun
        if running and verifier._zygote is not None:
            time.sleep(0.3)
            verifier._zygote.proc.kill()  # the zygote (or the bubblewrap around it)
            killed.append(running[0].name)
            return
        time.sleep(0.05)


def test_a_worker_killed_mid_run_costs_one_attempt_and_the_bench_goes_on(tmp_path):
    problems, candidates = tmp_path / "problems", tmp_path / "candidates"
    problems.mkdir()
    candidates.mkdir()
    for name in ("relu_a", "relu_b"):
        shutil.copy(FIXTURES / "problems" / "relu.py", problems / f"{name}.py")
        (candidates / f"{name}.py").write_text(SLOW_RELU)
    verifier = Verifier(device="cpu", workspace=tmp_path / "ws", time_it=False)
    killed: list[str] = []
    watcher = threading.Thread(target=kill_the_first_running_candidate, daemon=True,
                               args=(verifier.root / "jobs", verifier, killed))
    watcher.start()
    result = run_bench(resolve_suite(str(problems)), Mode.candidates, scoring_work(lambda device: verifier), ["cpu"],
                       tmp_path / "out", candidates_dir=candidates, show_progress=False)
    watcher.join(timeout=1)
    assert killed, "the watcher never saw a candidate run"
    records = {json.loads(line)["problem"]: json.loads(line) for line in
               (tmp_path / "out" / "results.jsonl").read_text().splitlines()}
    statuses = sorted((r["status"], r["reason"]) for r in records.values())
    assert statuses[0][0] == "correct", statuses  # the other problem, on a fresh worker
    assert statuses[1][0] == "runtime_error" and "the sandbox worker died while the job ran" in statuses[1][1]
    assert result.ran == 2


# --------------------------------------------------------------------------- a full disk


def _tiny_tmpfs_works() -> bool:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    probe = subprocess.run([bwrap, "--dev-bind", "/", "/", "--size", "8192", "--tmpfs", "/mnt", "--", "true"],
                           capture_output=True, check=False)
    return probe.returncode == 0


TINY_TMPFS = _tiny_tmpfs_works()


def run_cli(argv: list[str], wrapper: list[str] = (),
            file_size_limit: int | None = None) -> subprocess.CompletedProcess:
    """`kernelloop ARGV` in a subprocess (a plain sandbox: no bubblewrap nested in the wrapper)."""
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "KERNELLOOP_SANDBOX": "plain",
           "HOME": str(Path.home())}
    limit = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))) \
        if file_size_limit else None
    command = [*wrapper, sys.executable, "-c", "from kernelloop.cli import app; app()", *argv]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=limit, check=False)


def example_solve(workspace: Path, thread: str) -> list[str]:
    return ["solve", str(EXAMPLE / "scale_bias_relu.py"), "--recorded", str(EXAMPLE / "turns.jsonl"),
            "--device", "cpu", "--candidates", "2", "--workspace", str(workspace), "--thread", thread]


def test_a_full_run_dir_is_one_clear_error_and_the_checkpoints_survive(tmp_path):
    workspace = tmp_path / "ws"
    (workspace / "runs").mkdir(parents=True)
    if TINY_TMPFS:  # ENOSPC: the run dir is an 8 KiB filesystem, the checkpoint DB is on the real disk
        done = run_cli(example_solve(workspace, "full"), wrapper=[shutil.which("bwrap"), "--dev-bind", "/", "/",
                                                                   "--size", "8192", "--tmpfs", str(workspace / "runs"),
                                                                   "--"])
        refused = "No space left on device"
    else:  # EFBIG: no file may grow past 64 KiB
        done = run_cli(example_solve(workspace, "full"), file_size_limit=64 << 10)
        refused = "disk I/O error"
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    error = error_line(done.stderr)
    assert error.startswith("error: ") and refused in error and "kernelloop runs resume full" in error, error
    with open_checkpointer(None, workspace) as saver:  # what was saved before the disk filled is readable
        assert build_graph(saver).get_state({"configurable": {"thread_id": "full"}}).values["settings"]


def test_a_file_size_limit_reaches_the_checkpoint_db_with_a_clear_error(tmp_path):
    done = run_cli(example_solve(tmp_path, "capped"), file_size_limit=64 << 10)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    error = error_line(done.stderr)
    assert error.startswith(f"error: {tmp_path / 'checkpoints.sqlite'}: can't save a checkpoint of thread capped")
    assert "is the disk full?" in error


# --------------------------------------------------------------------------- a corrupt checkpoint DB


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def two_threads(tmp_path) -> Path:
    """A workspace with two finished threads, A and B."""
    for thread in ("A", "B"):
        solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
              candidates=2, thread_id=thread, **NO_FACTS)
    return tmp_path


def test_one_corrupt_checkpoint_fails_its_thread_alone(two_threads):
    db = two_threads / "checkpoints.sqlite"
    with sqlite3.connect(db) as conn:
        latest = conn.execute("SELECT max(checkpoint_id) FROM checkpoints WHERE thread_id = 'A'").fetchone()[0]
        conn.execute("UPDATE checkpoints SET checkpoint = ? WHERE thread_id = 'A' AND checkpoint_id = ?",
                     (b"\x00\xffnot msgpack", latest))
    runs_before = digest(two_threads / "runs")
    result = cli.invoke(app, ["runs", "resume", "A", "--recorded", "--workspace", str(two_threads)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert error_line(result.stderr).startswith(f"error: {db}: a checkpoint of thread A can't be read")
    with pytest.raises(CheckpointError, match="thread A"):
        resume("A", chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=two_threads, **NO_FACTS)
    other = resume("B", chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=two_threads,
                   **NO_FACTS)
    assert (other.status, other.best_id) == ("correct", "r2c0")  # thread B reads and resumes as before
    after = digest(two_threads / "runs")
    assert {k: v for k, v in after.items() if k.startswith("A/")} == \
        {k: v for k, v in runs_before.items() if k.startswith("A/")}  # A's kernels and reports untouched


def test_a_corrupt_database_file_is_one_clear_error_and_the_run_dirs_survive(two_threads):
    db = two_threads / "checkpoints.sqlite"
    for leftover in two_threads.glob("checkpoints.sqlite-*"):  # WAL and shared-memory files
        leftover.unlink()
    db.write_bytes(b"this is not an SQLite file" * 400)
    runs_before = digest(two_threads / "runs")
    for argv in (["runs", "resume", "B", "--recorded"], ["solve", str(RELU_PROBLEM), "--recorded",
                                                        str(two_threads / "runs" / "A"), "--device", "cpu"]):
        result = cli.invoke(app, [*argv, "--workspace", str(two_threads)])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        error = error_line(result.stderr)
        assert error.startswith(f"error: {db}: the checkpoint database can't be opened (file is not a database)")
        assert str(two_threads / "runs") in error
    assert digest(two_threads / "runs") == runs_before  # every thread's kernels, verdicts and reports
    assert (two_threads / "runs" / "A" / "best_kernel.py").read_text() == FIXED_KERNEL
