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
