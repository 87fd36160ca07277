"""The attention problems on the CPU, at a tiny shape (the realistic one is never built here).

FlexAttention runs unfused here (compiled=False): it evaluates the same score_mod / mask_mod
the fused kernel would, so agreement with the eager reference checks each variant's wiring.
The compiled baseline at the realistic shapes is tests/gpu/test_attention_gpu.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from kernelloop.evals.attention import FLEX_BASELINE, attention_problems, variant_label
from kernelloop.evals.problems.attention import _common as attn
from kernelloop.tools.verify.compare import compare_one
from kernelloop.tools.verify.static_check import first_violation

PROBLEMS = {p.name: p for p in attention_problems()}
VARIANTS = ["causal mask", "document mask", "relative bias", "alibi bias", "full mask", "tanh softcap"]


def load(name: str):
    """The problem's module, importable by name: torch's tracer (used by FlexAttention even
    unfused) re-imports the module of a score_mod's globals by its __name__."""
    module = PROBLEMS[name].module
    sys.modules.setdefault(module.__name__, module)
    return module


def flex(module, *inputs):
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        return module.get_baselines()[FLEX_BASELINE](compiled=False)(*inputs)


def test_the_suite_has_the_six_variants_and_two_long_sequences():
    names = sorted(PROBLEMS, key=lambda n: PROBLEMS[n].number)
    assert [variant_label(n) for n in names] == VARIANTS + [
        "causal mask long", "document mask long"]
    for name, problem in PROBLEMS.items():
        module = load(name)
        assert set(problem.extras) == {"get_baselines", "TOLERANCE", "get_input_variants"}, name
        assert issubclass(module.get_baselines()[FLEX_BASELINE], attn.FlexAttentionBaseline)
        assert module.SHAPE.seq_len >= 4096 and module.SHAPE.head_dim == 64


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_reference_and_flex_attention_agree_at_a_tiny_shape(name):
    module = load(name)
    torch.manual_seed(0)
    inputs = module.get_inputs(attn.TINY)
    reference = module.Model()(*inputs)
    assert reference.shape == (2, 2, 200, 16) and reference.dtype == torch.bfloat16
    comparison = compare_one(flex(module, *inputs), reference, 0, module.TOLERANCE)
    assert comparison.ok, comparison.reason
    assert comparison.rel_err < 0.5 * module.TOLERANCE["bfloat16"]["rel"]


@pytest.mark.parametrize("name", [n for n in sorted(PROBLEMS) if "full" not in n])
def test_each_variant_changes_the_output_beyond_the_tolerance(name):
    """A kernel that skipped the mask or the mod would fail verification."""
    module = load(name)
    torch.manual_seed(1)
    inputs = module.get_inputs(attn.TINY)
    plain = attn.eager_attention(*inputs[:3])
    assert not compare_one(plain, module.Model()(*inputs), 0, module.TOLERANCE).ok


def test_chunked_reference_equals_one_chunk():
    module = load("4_alibi_bias")
    torch.manual_seed(2)
    q, k, v = module.get_inputs(attn.TINY)
    score_mod, _ = module.mods(q)
    whole = attn.eager_attention(q, k, v, score_mod)
    chunked = attn.eager_attention(q, k, v, score_mod, chunk_elements=2 * 2 * 200 * 7)  # 7 rows per chunk
    torch.testing.assert_close(chunked, whole, atol=0, rtol=0)
    assert chunked.shape == whole.shape


def test_document_mask_attends_within_documents_only():
    module = load("2_document_mask")
    ids = torch.tensor([[0, 0, 1, 1, 1]], dtype=torch.int32)
    q = torch.zeros(1, 1, 5, 4, dtype=torch.bfloat16)  # equal scores: uniform over allowed keys
    v = torch.arange(5, dtype=torch.bfloat16).view(1, 1, 5, 1).expand(1, 1, 5, 4).contiguous()
    out = module.Model()(q, q, v, ids)
    assert out[0, 0, :, 0].tolist() == [0.5, 0.5, 3.0, 3.0, 3.0]  # means of positions {0,1} and {2,3,4}


def test_causal_mask_by_hand():
    module = load("1_causal_mask")
    q = torch.zeros(1, 1, 4, 2, dtype=torch.bfloat16)
    v = torch.arange(4, dtype=torch.bfloat16).view(1, 1, 4, 1).expand(1, 1, 4, 2).contiguous()
    assert module.Model()(q, q, v)[0, 0, :, 0].tolist() == [0.0, 0.5, 1.0, 1.5]


def test_alibi_slopes_and_relative_bias_lookup_by_hand():
    alibi = load("4_alibi_bias")
    score_mod, _ = alibi.mods(torch.zeros(1, 16, 1, 1))
    zero = torch.tensor(0.0)
    # head 0 of 16: slope 2 ** -0.5; distance 3
    assert score_mod(zero, 0, torch.tensor(0), torch.tensor(5), torch.tensor(2)).item() == pytest.approx(-3 * 2 ** -0.5)
    relative = load("3_relative_bias")
    bias = torch.arange(2 * 7 - 1, dtype=torch.float32).view(1, -1)  # one head, S = 7
    score_mod, _ = relative.mods(torch.zeros(1, 1, 7, 1), bias)
    # offset kv - q = -2 -> entry 6 - 2 = 4
    assert score_mod(zero, 0, torch.tensor(0), torch.tensor(5), torch.tensor(3)).item() == 4.0


def test_extra_inputs_are_fresh_with_the_seed_and_well_formed():
    module = load("2_document_mask")
    torch.manual_seed(3)
    *_, ids_a = module.get_inputs(attn.TINY)
    torch.manual_seed(4)
    *_, ids_b = module.get_inputs(attn.TINY)
    assert ids_a.dtype == torch.int32 and ids_a.shape == (2, 200)
    assert bool((ids_a.diff(dim=-1) >= 0).all()) and int(ids_a[:, 0].max()) == 0
    assert not torch.equal(ids_a, ids_b)  # a kernel can't hard-code the layout
    *_, table = load("3_relative_bias").get_inputs(attn.TINY)
    assert table.shape == (2, 399) and table.dtype == torch.bfloat16


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_the_realistic_shape_fits_an_80_gb_gpu(name):
    """Inputs plus one query chunk's scores stay far below 80 GB (computed, never allocated here)."""
    shape = load(name).SHAPE
    qkv_bytes = 3 * 2 * shape.batch * shape.heads * shape.seq_len * shape.head_dim
    assert attn.memory_per_chunk_bytes(shape) + 4 * qkv_bytes < 8 << 30


def test_input_variants_use_an_irregular_length():
    module = load("5_full_mask")
    [variant] = module.get_input_variants()
    assert variant[0].shape == (1, 4, 1000, 64) and 1000 % 128 != 0


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "attention_candidates"
_RUN_EXAMPLE = """
import sys
import torch
from kernelloop.problem import import_source
from kernelloop.evals.problems.attention import _common as attn
from kernelloop.tools.verify.compare import compare_one
candidate = import_source(__import__("pathlib").Path(sys.argv[1]), "candidate")
causal = sys.argv[2] == "causal"
torch.manual_seed(0)
q, k, v = (torch.randn(2, 2, 200, 16) for _ in range(3))
mask = (lambda b, h, q_idx, kv_idx: q_idx >= kv_idx) if causal else None
result = compare_one(candidate.ModelNew()(q, k, v), attn.eager_attention(q, k, v, mask_mod=mask), 0)
print("OK" if result.ok else result.reason)
"""


@pytest.mark.parametrize(("name", "kind"), [("1_causal_mask", "causal"), ("5_full_mask", "full")])
def test_example_candidates_compute_attention_under_the_interpreter(name, kind):
    """float32 here: the Triton interpreter multiplies bf16 bit patterns in tl.dot (triton#11584);
    the examples' bf16 path runs on the GPU (tests/gpu/test_attention_gpu.py)."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _RUN_EXAMPLE, str(EXAMPLES / f"{name}.py"), kind],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.stdout.strip().splitlines()[-1:] == ["OK"], done.stdout + done.stderr[-2000:]
    assert first_violation((EXAMPLES / f"{name}.py").read_text()) is None
