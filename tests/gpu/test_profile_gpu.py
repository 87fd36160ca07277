"""`profile` on the H100: torch.profiler table and roofline in the verdict, ncu metrics for a Triton kernel."""

from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.tools.profile.ncu_run import run_ncu
from kernelloop.tools.verify.verifier import Verifier

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]
CANDIDATE = ROOT / "examples" / "candidates" / "12_Scale_BiasAdd_Tanh_Clamp.py"
PROBLEM = ROOT / "kernelloop" / "evals" / "problems" / "12_Scale_BiasAdd_Tanh_Clamp.py"


def test_profile_and_ncu_summary_for_a_triton_kernel(tmp_path):
    with Verifier(device="cuda", workspace=tmp_path) as verifier:
        verdict = verifier.verify(Candidate.from_file(CANDIDATE), Problem.from_file(PROBLEM))
    assert verdict.ok, verdict.reason
    assert verdict.profile is not None and verdict.profile.own_share > 0.5
    assert verdict.profile.roofline is not None and verdict.profile.roofline.floor_ms > 0
    report = run_ncu(CANDIDATE, PROBLEM, verdict.own_kernels)
    assert report.kernels, report.notes
    kernel = report.kernels[0]
    assert kernel.sol_memory_pct is not None and kernel.duration_ms is not None, kernel.brief()
