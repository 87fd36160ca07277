"""The compile stage on a GPU: a CUDA load_inline candidate built by nvcc in a CPU build job (no
GPU visible, the pool's arch list handed over), served to its GPU job without a rebuild, timed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status
from kernelloop.tools.verify.pool import LocalPool

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_a_cuda_candidate_builds_ahead_and_its_gpu_job_does_not_rebuild(tmp_path):
    candidate = Candidate.from_file(FIXTURES / "honest" / "relu_load_inline_cuda.py")
    with LocalPool(["cuda:0"], workspace=tmp_path, compile_workers=2, keep_jobs=True) as pool:
        assert pool._stage is not None and pool._stage.arch_list  # e.g. "9.0+PTX" on an H100
        verdict = pool.verify(candidate, Problem.from_file(FIXTURES / "problems" / "relu.py"))
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.cost_s["build_s"] > 0 and verdict.speedup is not None
    run_jobs = list((tmp_path / "verifier" / "cuda0" / "jobs").glob("cand-*"))
    assert run_jobs and not any(list(job.glob("cache/torch_extensions/*/.ninja_log")) for job in run_jobs)
