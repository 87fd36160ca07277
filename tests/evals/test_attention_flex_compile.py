"""The compiled FlexAttention baseline on the CPU, called the way the verifier times it.

measure.baseline_callables builds the baseline once, calls it once on input set 0 (the
compile), then rotates over a few input sets of the same shapes. Every later call must
reuse that one compiled, fused kernel: a recompile (or a fallback to unfused flex_attention,
which materialises the scores) would time compilation or eager code, not FlexAttention.
Inductor's CPU backend compiles flex_attention to one C++ template kernel, so this runs
without a GPU; the realistic shapes are tests/gpu/test_attention_gpu.py.
"""

from __future__ import annotations

import sys

import pytest
import torch
from torch._dynamo.utils import counters

from kernelloop.evals.attention import FLEX_BASELINE, attention_problems
from kernelloop.evals.problems.attention import _common as attn
from kernelloop.tools.verify.compare import compare_one

pytestmark = pytest.mark.slow  # compiles each variant once: about 5 to 25 s each on a cold cache

PROBLEMS = {p.name: p for p in attention_problems()}
ROUNDS = 2  # rotations over the input sets after the compiling call
N_SETS = 3  # as many as the verifier's timing rounds rotate over


def load(name: str):
    module = PROBLEMS[name].module
    sys.modules.setdefault(module.__name__, module)  # torch.compile re-imports a score_mod's module by name
    return module


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@torch.no_grad()
def test_rotating_inputs_reuse_the_one_compiled_kernel(name):
    module = load(name)
    torch.manual_seed(0)
    sets = [module.get_inputs(getattr(module, "TEST_SHAPE", attn.TINY)) for _ in range(N_SETS)]
    # A fresh Dynamo cache per variant: the module-level compiled flex_attention is shared by
    # all ten, and that many entries would reach Dynamo's recompile limit within this one process.
    torch._dynamo.reset()
    counters.clear()
    baseline = module.get_baselines()[FLEX_BASELINE]()
    baseline(*sets[0])
    frames = dict(counters["frames"])
    assert frames and frames.get("ok") == frames.get("total"), frames
    assert counters["inductor"]["cpp_templated_kernel_counter"] >= 1, "flex_attention was not fused"
    assert not counters["graph_break"], dict(counters["graph_break"])

    with torch._dynamo.config.patch(error_on_recompile=True):
        outputs = [baseline(*sets[i]) for _ in range(ROUNDS) for i in range(N_SETS)]
    assert dict(counters["frames"]) == frames, "a later call compiled again"
    assert not counters["graph_break"], dict(counters["graph_break"])

    # the last rotation read the current inputs (nothing stale), within the problem's tolerance
    for i, out in enumerate(outputs[-N_SETS:]):
        comparison = compare_one(out, module.Model()(*sets[i]), 0, module.TOLERANCE)
        assert comparison.ok, f"input set {i}: {comparison.reason}"
