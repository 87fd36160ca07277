"""The local pool on every GPU of one host, without Ray: the same verdicts as on one GPU, every GPU
takes work, and verified candidates per minute with 1 vs all GPUs is printed (measured, not
asserted: benchmarks/pool_throughput.py records it). Needs two GPUs or more."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status
from kernelloop.tools.verify.pool import LocalPool, WorkerStats

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs or more")]
ROOT = Path(__file__).resolve().parents[2]
NAMES = ["1_GELUTanh", "2_SoftmaxIrregular", "3_LayerNorm", "4_RMSNorm", "5_MeanReduceDim1", "10_SwiGLU",
         "12_Scale_BiasAdd_Tanh_Clamp", "9_ResidualAdd_LayerNorm"]


def pairs() -> list[tuple[Candidate, Problem]]:
    return [(Candidate.from_file(ROOT / "examples" / "candidates" / f"{name}.py"),
             Problem.from_file(ROOT / "kernelloop" / "evals" / "problems" / f"{name}.py")) for name in NAMES]


def run_all(devices: list[str], workspace: Path) -> tuple[list[Status], float, list[WorkerStats]]:
    """Verify every pair with as many callers as workers; (statuses in order, seconds, per-worker stats)."""
    jobs = pairs()
    with LocalPool(devices, workspace=workspace) as pool, ThreadPoolExecutor(max_workers=pool.size) as callers:
        started = time.perf_counter()
        verdicts = list(callers.map(lambda pair: pool.verify(*pair), jobs))
        elapsed_s = time.perf_counter() - started
        stats = pool.stats()
    return [v.status for v in verdicts], elapsed_s, stats


def test_all_gpus_give_the_same_verdicts_and_share_the_work(tmp_path):
    every = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    one_statuses, one_s, _ = run_all(every[:1], tmp_path / "one")
    all_statuses, all_s, stats = run_all(every, tmp_path / "all")
    assert one_statuses == all_statuses == [Status.correct] * len(NAMES)
    assert all(s.served >= 1 for s in stats), stats
    per_minute = {1: 60 * len(NAMES) / one_s, len(every): 60 * len(NAMES) / all_s}
    print("\nverified candidates per minute (cold pools): " +
          ", ".join(f"{gpus} GPU(s) {rate:.1f}" for gpus, rate in per_minute.items()) +
          f"; per GPU served {[s.served for s in stats]}")
