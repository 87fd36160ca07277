"""The attention problems on the CPU, at a tiny shape (the realistic one is never built here).

FlexAttention runs unfused here (compiled=False): it evaluates the same score_mod / mask_mod
the fused kernel would, so agreement with the eager reference checks each variant's wiring.
The compiled baseline at the realistic shapes is tests/gpu/test_attention_gpu.py.
"""

from __future__ import annotations

import sys
import warnings

import pytest
import torch

from kernelloop.evals.attention import FLEX_BASELINE, attention_problems, variant_label
from kernelloop.evals.problems.attention import _common as attn
from kernelloop.tools.verify.compare import compare_one

PROBLEMS = {p.name: p for p in attention_problems()}
VARIANTS = ["causal mask", "document mask", "relative positional", "alibi bias", "full mask", "tanh softcap"]
MORE = ["causal mask long", "document mask long", "learned relative bias", "neighborhood 2d"]


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


def tiny_inputs(module):
    """Inputs at the problem's CPU test shape (the neighborhood's grid needs more tokens than TINY)."""
    return module.get_inputs(getattr(module, "TEST_SHAPE", attn.TINY))


def test_the_suite_has_the_six_reference_variants_then_the_others():
    names = sorted(PROBLEMS, key=lambda n: PROBLEMS[n].number)
    assert [variant_label(n) for n in names] == VARIANTS + MORE
    for name, problem in PROBLEMS.items():
        module = load(name)
        assert set(problem.extras) == {"get_baselines", "TOLERANCE", "get_input_variants"}, name
        assert issubclass(module.get_baselines()[FLEX_BASELINE], attn.FlexAttentionBaseline)
        assert module.SHAPE.seq_len >= 4096 and module.SHAPE.head_dim == 64


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_reference_and_flex_attention_agree_at_a_tiny_shape(name):
    module = load(name)
    torch.manual_seed(0)
    inputs = tiny_inputs(module)
    reference = module.Model()(*inputs)
    assert reference.shape == inputs[0].shape and reference.dtype == torch.bfloat16
    comparison = compare_one(flex(module, *inputs), reference, 0, module.TOLERANCE)
    assert comparison.ok, comparison.reason
    assert comparison.rel_err < 0.5 * module.TOLERANCE["bfloat16"]["rel"]


@pytest.mark.parametrize("name", [n for n in sorted(PROBLEMS) if "full" not in n])
def test_each_variant_changes_the_output_beyond_the_tolerance(name):
    """A kernel that skipped the mask or the mod would fail verification."""
    module = load(name)
    torch.manual_seed(1)
    inputs = tiny_inputs(module)
    plain = attn.eager_attention(*inputs[:3])
    assert not compare_one(plain, module.Model()(*inputs), 0, module.TOLERANCE).ok


def test_chunked_reference_equals_one_chunk():
    module = load("4_alibi_bias")
    torch.manual_seed(2)
    q, k, v = module.get_inputs(attn.TINY)
    score_mod, _ = module.mods(q)
    whole = attn.eager_attention(q, k, v, score_mod)
    by_rows = attn.eager_attention(q, k, v, score_mod, chunk_elements=2 * 200 * 7)  # one head, 7 rows a chunk
    by_heads = attn.eager_attention(q, k, v, score_mod, chunk_elements=2 * 200 * 200)  # one head a chunk
    assert attn.chunking(attn.TINY, 2 * 200 * 7) == (1, 7) and attn.chunking(attn.TINY, 2 * 200 * 200) == (1, 200)
    for chunked in (by_rows, by_heads):  # alibi reads h and the positions: each chunk must see its own
        torch.testing.assert_close(chunked, whole, atol=0, rtol=0)


def test_every_realistic_shape_is_chunked_by_whole_heads():
    """Whole heads keep every chunk's positions the same, so torch.compile makes one kernel for them."""
    for name in PROBLEMS:
        shape = load(name).SHAPE
        head_step, rows = attn.chunking(shape)
        assert rows == shape.seq_len and shape.heads % head_step == 0, name


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


def test_alibi_slopes_and_learned_relative_bias_lookup_by_hand():
    alibi = load("4_alibi_bias")
    score_mod, _ = alibi.mods(torch.zeros(1, 16, 1, 1))
    zero = torch.tensor(0.0)
    # head 0 of 16: slope 2 ** -0.5; distance 3
    assert score_mod(zero, 0, torch.tensor(0), torch.tensor(5), torch.tensor(2)).item() == pytest.approx(-3 * 2 ** -0.5)
    relative = load("9_learned_relative_bias")
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
    *_, table = load("9_learned_relative_bias").get_inputs(attn.TINY)
    assert table.shape == (2, 399) and table.dtype == torch.bfloat16


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_the_realistic_shape_fits_an_80_gb_gpu(name):
    """Inputs plus one query chunk's scores stay far below 80 GB (computed, never allocated here)."""
    shape = load(name).SHAPE
    qkv_bytes = 3 * 2 * shape.batch * shape.heads * shape.seq_len * shape.head_dim
    assert attn.memory_per_chunk_bytes(shape) + 4 * qkv_bytes < 8 << 30


def test_input_variants_use_an_irregular_length():
    for name in PROBLEMS:
        [variant] = load(name).get_input_variants()
        assert variant[0].shape[2] % 64 != 0, name


def test_relative_positional_adds_the_signed_distance_computed_not_gathered():
    module = load("3_relative_positional")
    score_mod, mask_mod = module.mods(torch.zeros(1, 1, 7, 1))
    assert mask_mod is None
    zero = torch.tensor(0.0)
    assert score_mod(zero, 0, 0, torch.tensor(5), torch.tensor(2)).item() == 3.0
    assert score_mod(zero, 0, 0, torch.tensor(2), torch.tensor(5)).item() == -3.0
    assert len(module.get_inputs(attn.TINY)) == 3  # no table among the inputs


def _natten_window_start(index: int, length: int, kernel: int, dilation: int) -> int:
    """NATTEN's get_window_start (its CPU/CUDA reference), as an independent oracle."""
    radius = kernel // 2
    if dilation <= 1:
        return max(index - radius, 0) + (index + radius >= length) * (length - index - radius - 1)
    start = index - radius * dilation
    if start < 0:
        return index % dilation
    if index + radius * dilation >= length:
        residue = index % dilation
        whole = length // dilation * dilation
        rest = length - whole
        if residue < rest:
            return length - rest + residue - 2 * radius * dilation
        return whole + residue - kernel * dilation
    return start


@pytest.mark.parametrize("width", [28, 36])
def test_neighborhood_mask_is_natten_dilated_windows_per_head(width):
    module = load("10_neighborhood_2d")
    kernel, seq = module.KERNEL_SIZE, width * width
    _, mask_mod = module.mods(torch.zeros(1, 1, seq, 1))
    positions = torch.arange(seq)
    for head in range(4):
        dilation = 1 + head % module.DILATIONS
        mask = mask_mod(0, torch.tensor(head), positions.view(-1, 1), positions.view(1, -1))
        expected = torch.zeros(seq, seq, dtype=torch.bool)
        for query in range(seq):
            row, col = divmod(query, width)
            rows = [_natten_window_start(row, width, kernel, dilation) + i * dilation for i in range(kernel)]
            cols = [_natten_window_start(col, width, kernel, dilation) + i * dilation for i in range(kernel)]
            expected[query, [r * width + c for r in rows for c in cols]] = True
        assert torch.equal(mask, expected), f"dilation {dilation}"
        assert (mask.sum(dim=1) == kernel * kernel).all()  # every query has a full window


def test_neighborhood_grid_must_be_square_and_wide_enough():
    module = load("10_neighborhood_2d")
    assert module.grid_width(4096) == 64 and module.grid_width(module.TEST_SHAPE.seq_len) == 28
    for bad in (1000, 27 * 27):
        with pytest.raises(ValueError):
            module.grid_width(bad)


def test_flex_block_masks_are_per_head_where_the_mask_reads_the_head():
    """With H=None FlexAttention would reuse head 0's blocks for every head and skip blocks other
    dilations need: each head's block mask must cover its dense mask."""
    module = load("10_neighborhood_2d")
    q = torch.zeros(module.TEST_SHAPE.batch, module.TEST_SHAPE.heads, module.TEST_SHAPE.seq_len, 16)
    _, mask_mod = module.mods(q)
    baseline = module.get_baselines()[FLEX_BASELINE](compiled=False)
    block_mask = baseline._block_mask(mask_mod, q, q)
    assert block_mask.shape[1] == q.shape[1]
    blocks = block_mask.to_dense()[0].bool()  # (H, q blocks, kv blocks): blocks computed at all
    positions = torch.arange(q.shape[2])
    size = block_mask.BLOCK_SIZE[0]
    for head in range(q.shape[1]):
        dense = mask_mod(0, torch.tensor(head), positions.view(-1, 1), positions.view(1, -1))
        needed = torch.zeros_like(blocks[head])
        for i, j in dense.nonzero().tolist():
            needed[i // size, j // size] = True
        assert torch.equal(blocks[head] | needed, blocks[head]), f"head {head} misses blocks it needs"
    assert not torch.equal(blocks[0], blocks[3])  # dilation 1 and 4 need different blocks
    assert len(baseline._static_masks) == 1


@pytest.mark.parametrize(("name", "causal"), [("1_causal_mask", True), ("5_full_mask", False),
                                               ("7_causal_mask_long", True)])
def test_sdpa_baselines_where_sdpa_computes_the_variant(name, causal, monkeypatch):
    module = load(name)
    monkeypatch.setattr(attn, "_sdpa_runs", lambda backend, is_causal, head_dim: True)
    baselines = module.get_baselines()
    assert set(baselines) == {FLEX_BASELINE, "sdpa_flash", "sdpa_cudnn"}
    assert all(baselines[b].causal is causal for b in ("sdpa_flash", "sdpa_cudnn"))
    monkeypatch.setattr(attn, "_sdpa_runs", lambda backend, is_causal, head_dim: backend == "sdpa_flash")
    assert set(module.get_baselines()) == {FLEX_BASELINE, "sdpa_flash"}  # a backend that can't run is left out
    # the flash backend (torch has a CPU one) computes what the reference does
    torch.manual_seed(4)
    inputs = module.get_inputs(attn.TINY)
    comparison = compare_one(baselines["sdpa_flash"]()(*inputs), module.Model()(*inputs), 0, module.TOLERANCE)
    assert comparison.ok, comparison.reason


def test_no_sdpa_baseline_for_variants_sdpa_does_not_compute(monkeypatch):
    monkeypatch.setattr(attn, "_sdpa_runs", lambda backend, is_causal, head_dim: True)
    with_sdpa = {name for name in PROBLEMS if "sdpa_flash" in load(name).get_baselines()}
    assert with_sdpa == {"1_causal_mask", "5_full_mask", "7_causal_mask_long"}


def test_sdpa_baseline_keeps_to_its_backend():
    """Held to cuDNN, SDPA on the CPU has no kernel and says so, rather than running another backend."""
    q = torch.randn(1, 1, 8, 16)
    with pytest.raises(RuntimeError):
        attn.sdpa_baseline("sdpa_cudnn", causal=False)()(q, q, q)
    assert attn.sdpa_baselines(causal=True, head_dim=64) == {} or torch.cuda.is_available()


def test_best_baseline_and_the_speedup_over_it():
    from kernelloop.evals.attention import best_baseline, speedup_over_best

    ms = {"eager": 20.0, "compile": 4.0, "flex_attention": 0.43, "sdpa_flash": 0.31, "sdpa_cudnn": 0.35}
    assert best_baseline(ms) == "sdpa_flash"
    assert best_baseline({"eager": 1.0, "sdpa_cudnn": None}) == "eager" and best_baseline({}) is None
    speedups = {"eager": 60.0, "compile": 12.0, "flex_attention": 1.3, "sdpa_flash": 0.95, "sdpa_cudnn": 1.05}
    assert speedup_over_best(speedups, ms) == ("sdpa_flash", 0.95)
    # a baseline without a measured speedup can't be the one a speedup is reported against
    assert speedup_over_best({"flex_attention": 1.3}, ms) == ("flex_attention", 1.3)
