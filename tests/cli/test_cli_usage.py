"""A newcomer's first commands: --version, completion, --help without torch, and every bad input a
one-line error (exit 2) that names the flag and the file, before anything heavy loads."""

from __future__ import annotations

import importlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import kernelloop
from kernelloop.cli import _live, app
from kernelloop.config import defaults
from kernelloop.graph.context import RunEvent

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "kernelloop" / "evals" / "problems" / "3_LayerNorm.py"
CANDIDATE = ROOT / "examples" / "candidates" / "3_LayerNorm.py"
cli = CliRunner()


@pytest.fixture(autouse=True)
def no_settings(monkeypatch, tmp_path):
    """No KERNELLOOP_* from the shell, and a directory without .env or kernelloop.toml."""
    for name in [n for n in os.environ if n.startswith("KERNELLOOP_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def run_without_torch(*args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, bool]:
    """The CLI in a fresh interpreter; also says whether torch got imported."""
    probe = ("import atexit, sys; atexit.register(lambda: print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', "
             "file=sys.stderr)); from kernelloop.cli import app; sys.argv = ['kernelloop', *sys.argv[1:]]; app()")
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("KERNELLOOP_")},
                               **(env or {})})
    return done, done.stderr.strip().endswith("\nTORCH") or done.stderr.strip() == "TORCH"


@pytest.mark.parametrize("args", [["--help"], ["solve", "--help"], ["bench", "--help"], ["verify"],
                                  ["solve", str(PROBLEM), "--budget", "soon"],
                                  ["bench", "x", "--device", "gpu"], ["verify", "/", "-p", str(PROBLEM)]])
def test_help_and_usage_errors_do_not_import_torch(args):
    done, torch_loaded = run_without_torch(*args)
    assert done.returncode in (0, 2), done.stderr
    assert not torch_loaded, done.stderr[-2000:]


def test_version_and_shell_completion():
    version = cli.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.strip() == f"kernelloop {kernelloop.__version__}"
    assert "--install-completion" in cli.invoke(app, ["--help"]).stdout
    done = subprocess.run([sys.executable, "-m", "kernelloop.cli"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "_KERNELLOOP_COMPLETE": "complete_bash", "COMP_WORDS": "kernelloop ver",
                               "COMP_CWORD": "1", "_TYPER_COMPLETE_ARGS": "kernelloop ver"})
    assert "verify" in done.stdout, (done.stdout, done.stderr)


def usage_error(*args: str) -> str:
    result = cli.invoke(app, list(args), env={"COLUMNS": "40"})
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines  # one line, never wrapped, however narrow the terminal
    return lines[0]


def test_a_directory_given_as_a_file_says_it_is_a_directory(tmp_path):
    assert usage_error("verify", str(tmp_path), "-p", str(PROBLEM)) == \
        f"error: CANDIDATE: {tmp_path}: is a directory, not a candidate file"
    assert "--problem: " in usage_error("verify", str(CANDIDATE), "-p", str(tmp_path))
    assert usage_error("solve", str(tmp_path)).endswith("is a directory, not a problem file")


def test_an_undecodable_file_names_the_argument_and_the_file(tmp_path):
    bad = tmp_path / "latin1.py"
    bad.write_bytes(b"# caf\xe9\nclass ModelNew: pass\n")
    line = usage_error("verify", str(bad), "-p", str(PROBLEM))
    assert line.startswith(f"error: CANDIDATE: {bad}: not UTF-8 text") and "0xe9" in line
    assert usage_error("verify", str(CANDIDATE), "-p", str(bad)).startswith(f"error: --problem: {bad}: not UTF-8")


def test_an_oversized_candidate_is_refused_with_its_size_and_the_limit(tmp_path):
    big = tmp_path / "big.py"
    big.write_text("#" * (defaults.MAX_SOURCE_BYTES + 1))
    line = usage_error("verify", str(big), "-p", str(PROBLEM))
    assert f"{defaults.MAX_SOURCE_BYTES + 1:,} bytes" in line and f"{defaults.MAX_SOURCE_BYTES:,}-byte limit" in line


def test_a_long_error_line_does_not_wrap(tmp_path):
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 6)
    deep.mkdir(parents=True)
    assert str(deep) in usage_error("verify", str(deep), "-p", str(PROBLEM))


@pytest.mark.parametrize("command", [["verify", str(CANDIDATE), "-p", str(PROBLEM)],
                                     ["solve", str(PROBLEM), "--recorded", str(ROOT / "examples" / "recorded_run")],
                                     ["bench", str(ROOT / "kernelloop" / "evals" / "problems"), "--candidates",
                                      str(ROOT / "examples" / "candidates")], ["mcp"]])
def test_cuda_n_is_a_device_everywhere(command):
    """On this CPU machine cuda:0 fails for want of a GPU, never as an unknown device."""
    line = usage_error(*command, "--device", "cuda:0")
    assert "torch sees 0 CUDA GPU(s)" in line and "must be" not in line
    assert "must be auto, cpu, cuda or cuda:N" in usage_error(*command, "--device", "gpu0")


def test_one_duration_grammar_in_solve_and_bench():
    # '1h 30m' is taken; what fails next is the missing endpoint / suite, not the budget.
    assert "endpoint" in usage_error("solve", str(PROBLEM), "--budget", "1h 30m", "--recorded", "nope.jsonl") \
        or "nope.jsonl" in usage_error("solve", str(PROBLEM), "--budget", "1h 30m", "--recorded", "nope.jsonl")
    assert "unknown suite" in usage_error("bench", "no-such-suite", "--budget", "1h 30m")
    assert "--budget: '1h 30x' is not a duration" in usage_error("bench", "no-such-suite", "--budget", "1h 30x")


def test_an_error_comes_before_any_live_view():
    result = cli.invoke(app, ["solve", str(PROBLEM), "--device", "cpu"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no model endpoint configured") and "kernelloop:" not in result.stderr


def test_the_live_view_ends_its_last_frame_with_a_newline(monkeypatch):
    screen = io.StringIO()
    monkeypatch.setattr(_live, "_screen", Console(file=screen, width=100))
    view = _live.LiveView()
    with view:
        assert screen.getvalue() == ""  # nothing drawn before the run's first report
        view.on_event(RunEvent(kind="verified", round=1, attempt_id="r1c0", status="correct"))
    assert "r1c0" in screen.getvalue() and screen.getvalue().endswith("\n")


def test_an_unreachable_ray_address_fails_in_seconds_with_one_line():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nothing listens there
    started = time.monotonic()
    line = usage_error("bench", str(ROOT / "kernelloop" / "evals" / "problems"), "--candidates",
                       str(ROOT / "examples" / "candidates"), "--ray", f"127.0.0.1:{port}")
    assert time.monotonic() - started < 30
    assert line.startswith(f"error: --ray 127.0.0.1:{port}: nothing answers there")


def test_the_public_api_is_plain():
    runs = importlib.import_module("kernelloop.serve.runs")  # importing the module must not turn the name into it
    assert callable(kernelloop.solve) and kernelloop.solve is runs.solve
    assert {"verify", "solve", "resume", "replay", "fork", "build_graph", "make_pool", "kernelloop_tools",
            "Problem", "Candidate", "Verdict", "SolveResult", "__version__"} <= set(dir(kernelloop))
    assert all(hasattr(kernelloop, name) for name in kernelloop.__all__)


@pytest.mark.slow
def test_verify_shows_its_phase_on_stderr_while_it_works(tmp_path):
    result = cli.invoke(app, ["verify", str(CANDIDATE), "-p", str(PROBLEM), "--device", "cpu",
                              "--workspace", str(tmp_path / "ws")])
    assert result.exit_code == 0, result.stderr
    phases = [line.removeprefix("verify: ") for line in result.stderr.splitlines()]
    assert phases[:3] == ["making the reference outputs", "compiling the candidate and making its first call",
                          "checking the candidate's outputs"], phases
    assert result.stdout.startswith("correct on cpu")  # stdout: the verdict alone
    quiet = cli.invoke(app, ["verify", str(CANDIDATE), "-p", str(PROBLEM), "--device", "cpu", "--no-progress",
                             "--json", "--workspace", str(tmp_path / "ws")])
    assert quiet.exit_code == 0 and quiet.stderr == ""
