"""The training suite on a GPU: its causal attention starter judged forward and backward on the real
problem's three workloads, and timed (forward) against eager, torch.compile and FlexAttention."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]


def test_the_causal_attention_starter_is_right_on_every_workload_and_timed(tmp_path):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cuda", workspace=tmp_path) as verifier:
        verdict = verifier.verify(Candidate.from_file(ROOT / "examples" / "training_candidates" / "8_CausalAttention.py"),
                                  Problem.from_file(ROOT / "kernelloop" / "evals" / "problems" / "training" / "8_CausalAttention.py"))
    assert verdict.status is Status.correct, verdict.reason
    assert set(verdict.workloads) == {"seq_2048", "seq_8192", "seq_1000"}, verdict.workloads
    for name, result in verdict.workloads.items():
        assert result.speedups.get("eager") and result.speedups.get("flex_attention"), (name, result.speedups)
    print({name: result.speedups for name, result in verdict.workloads.items()})
