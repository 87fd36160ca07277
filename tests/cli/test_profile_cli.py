"""`kernelloop profile` without a GPU says so in one line (exit 2); with one, tests/gpu covers it."""

import subprocess
import sys

import pytest
import torch

from kernelloop.tools.profile.ncu_run import run_ncu


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_profile_without_gpu_is_a_clear_usage_error():
    done = subprocess.run([sys.executable, "-m", "kernelloop.cli.__main__", "profile", "examples/candidates/3_LayerNorm.py",
                           "--problem", "kernelloop/evals/problems/3_LayerNorm.py"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "needs a CUDA GPU" in done.stderr and "Traceback" not in done.stderr


def test_missing_ncu_degrades_to_a_note(monkeypatch, tmp_path):
    monkeypatch.setattr("kernelloop.tools.profile.ncu_run.ncu_available", lambda: (False, "ncu not found"))
    report = run_ncu(tmp_path / "c.py", tmp_path / "p.py", ["triton:k"])
    assert report.kernels == [] and report.notes == ["ncu not found"]


def test_ncu_profiles_a_bounded_number_of_launches(monkeypatch, tmp_path):
    """A candidate launching from a Python loop (thousands a forward) must not make ncu replay every launch."""
    seen = {}

    def fake_run(argv, **kwargs):
        seen["argv"] = argv
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr("kernelloop.tools.profile.ncu_run.ncu_available", lambda: (True, "ncu at /x/ncu"))
    monkeypatch.setattr("kernelloop.tools.profile.ncu_run.subprocess.run", fake_run)
    run_ncu(tmp_path / "c.py", tmp_path / "p.py", ["triton:k", "triton:j"])
    argv = seen["argv"]
    assert int(argv[argv.index("--launch-count") + 1]) <= 10
    assert argv[argv.index("--kernel-name") + 1] == "regex:k|j"


def test_what_runs_under_ncu_is_read_back_bounded(monkeypatch, tmp_path):
    """The candidate prints through ncu (a 300 MB line here) and runs in ncu's scratch dir: the
    parent reads a bounded tail of its output, never the whole of it into memory."""
    import resource

    flood = "import sys; sys.stdout.write('x' * 300_000_000); sys.stderr.write('y' * 300_000_000)"
    monkeypatch.setattr("kernelloop.tools.profile.ncu_run.ncu_available", lambda: (True, "ncu at /x/ncu"))
    monkeypatch.setattr("kernelloop.tools.profile.ncu_run.ncu_command",
                        lambda *args, **kwargs: [sys.executable, "-c", flood])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    report = run_ncu(tmp_path / "c.py", tmp_path / "p.py", ["triton:k"], timeout_s=120)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
    assert grown < 200 << 20, f"the parent's peak RSS grew {grown >> 20} MiB"
    assert report.kernels == [] and all(len(note) < 100_000 for note in report.notes)
