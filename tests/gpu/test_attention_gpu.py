"""The attention problems at their realistic shapes on a GPU: the compiled FlexAttention baseline
and SDPA agree with the eager reference, the reference stays within a modest memory budget, and
the hand-written starter kernels are correct in bf16."""

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


@pytest.mark.parametrize("name", sorted(PROBLEMS))
@torch.no_grad()
def test_starter_kernels_are_correct_in_bf16_at_the_realistic_shape_and_on_the_variant(name):
    """The bf16 tensor-core path (the CPU tests run the interpreter's float32 one), at the
    realistic shape and at the irregular input variant."""
    module = load(name)
    candidate = import_source(EXAMPLES / f"{name}.py", f"starter_{name}")
    torch.manual_seed(3)
    [variant] = module.get_input_variants()
    for inputs in (on_gpu(module.get_inputs()), on_gpu(variant)):
        comparison = compare_one(candidate.ModelNew()(*inputs), module.Model().cuda()(*inputs), 0, module.TOLERANCE)
        assert comparison.ok, f"S={inputs[0].shape[2]}: {comparison.reason}"


@pytest.mark.parametrize("name", ["1_causal_mask", "5_full_mask"])
@torch.no_grad()
def test_sdpa_baselines_run_and_agree_with_the_reference(name):
    module = load(name)
    baselines = module.get_baselines()
    assert "sdpa_flash" in baselines  # the flash backend runs bf16, head_dim 64 on every GPU the suite targets
    torch.manual_seed(4)
    inputs = on_gpu(module.get_inputs())
    reference = module.Model().cuda()(*inputs)
    for sdpa in set(baselines) - {FLEX_BASELINE}:
        comparison = compare_one(baselines[sdpa]()(*inputs), reference, 0, module.TOLERANCE)
        assert comparison.ok, f"{sdpa}: {comparison.reason}"
