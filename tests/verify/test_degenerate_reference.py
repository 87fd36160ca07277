"""A reference that is zero up to round-off (KernelBench level 2 #41's shape, in small) on the CPU:
an honest kernel with its own round-off is correct, and so is one of zeros; both verdicts say the
reference was degenerate, so neither reads as a win."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ZEROS = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zeros_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), dtype=tl.float32), mask=offsets < n)


class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()

    def forward(self, x):
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        zeros_kernel[(1,)](out, out.numel(), BLOCK=64)
        return out
'''


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("ws"), time_it=False) as shared:
        yield shared


@pytest.mark.parametrize("candidate", [Candidate.from_file(FIXTURES / "honest" / "groupnorm_mean_triton.py"),
                                       Candidate(source=ZEROS)], ids=["honest", "zeros"])
def test_a_round_off_reference_is_judged_by_atol_and_the_verdict_says_so(verifier, candidate):
    verdict = verifier.verify(candidate, Problem.from_file(FIXTURES / "problems" / "groupnorm_mean.py"))
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.degenerate_outputs == [0]
    assert any(w.startswith("degenerate reference (output 0: its error against float64") for w in verdict.warnings)
    assert not verdict.win
