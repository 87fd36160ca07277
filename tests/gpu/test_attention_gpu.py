"""The attention problems at their realistic shapes on a GPU: the compiled FlexAttention baseline
agrees with the eager reference, and the reference stays within a modest memory budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from kernelloop.evals.attention import FLEX_BASELINE, attention_problems
from kernelloop.evals.problems.attention import _common as attn
from kernelloop.problem import import_source
from kernelloop.tools.verify.compare import compare_one

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

PROBLEMS = {p.name: p for p in attention_problems()}
REFERENCE_PEAK_LIMIT_BYTES = 12 << 30  # far under 80 GB, so the verifier's processes fit beside it


def load(name: str):
    module = PROBLEMS[name].module
    sys.modules.setdefault(module.__name__, module)  # torch.compile re-imports a score_mod's module by name
    return module


def on_gpu(inputs):
    return [x.cuda() for x in inputs]


@pytest.fixture(autouse=True)
def fresh_dynamo_cache():
    """One process runs every variant, but the verifier forks one per problem: without a reset,
    the shared compiled flex_attention reaches Dynamo's recompile limit (8) and later tests
    would silently run it unfused."""
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@torch.no_grad()
def test_compiled_flex_attention_matches_the_reference_at_the_realistic_shape(name):
    module = load(name)
    torch.manual_seed(0)
    inputs = on_gpu(module.get_inputs())
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    reference = module.Model().cuda()(*inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    assert peak < REFERENCE_PEAK_LIMIT_BYTES, f"reference peaked at {peak / 2**30:.1f} GiB"

    baseline = module.get_baselines()[FLEX_BASELINE]().cuda()
    comparison = compare_one(baseline(*inputs), reference, 0, module.TOLERANCE)
    assert comparison.ok, comparison.reason

    # fresh inputs (a new document layout where there is one) still agree: no stale block mask
    torch.manual_seed(1)
    fresh = on_gpu(module.get_inputs())
    comparison = compare_one(baseline(*fresh), module.Model().cuda()(*fresh), 0, module.TOLERANCE)
    assert comparison.ok, f"fresh inputs: {comparison.reason}"
    if not module.VARIANT.mask_reads_inputs:
        assert len(baseline._static_masks) <= 1  # a position-only mask is built once per length


@pytest.mark.parametrize("name", ["1_causal_mask", "2_document_mask"])
@torch.no_grad()
def test_flex_attention_handles_the_irregular_input_variant(name):
    module = load(name)
    torch.manual_seed(2)
    [variant] = module.get_input_variants()
    inputs = on_gpu(variant)
    comparison = compare_one(module.get_baselines()[FLEX_BASELINE]().cuda()(*inputs),
                             module.Model().cuda()(*inputs), 0, module.TOLERANCE)
    assert comparison.ok, comparison.reason
    assert inputs[0].shape[2] == attn.IRREGULAR.seq_len


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "attention_candidates"


@pytest.mark.parametrize("name", ["1_causal_mask", "5_full_mask"])
@torch.no_grad()
def test_example_candidates_are_correct_in_bf16_at_the_realistic_shape(name):
    module = load(name)
    candidate = import_source(EXAMPLES / f"{name}.py", f"example_{name}")
    torch.manual_seed(3)
    inputs = on_gpu(module.get_inputs())
    comparison = compare_one(candidate.ModelNew()(*inputs), module.Model().cuda()(*inputs), 0, module.TOLERANCE)
    assert comparison.ok, comparison.reason
