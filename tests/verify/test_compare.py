"""The comparison rules on hand-made tensors."""

import copy
import math

import pytest
import torch

from kernelloop.records import Code
from kernelloop.tools.verify.compare import (
    CHUNK_ELEMENTS,
    compare_device,
    compare_outputs,
    flatten_outputs,
    tolerance_for,
    tolerance_words,
)


def test_equal_outputs_pass_with_zero_error():
    x = torch.randn(100)
    result = compare_outputs([x.clone()], [x])
    assert result.ok and result.max_abs_err == 0 and result.rel_err == 0


def test_zeros_fail_on_a_near_zero_reference():
    ref = torch.randn(1000) * 1e-8  # elementwise atol alone would let zeros through
    result = compare_outputs([torch.zeros(1000)], [ref])
    assert not result.ok and result.reason.startswith("mismatch") and math.isclose(result.rel_err, 1.0)


def test_nan_where_reference_is_finite_fails():
    ref = torch.randn(10)
    out = ref.clone()
    out[3] = float("nan")
    assert compare_outputs([out], [ref]).reason.startswith("nan")


def test_shape_dtype_and_count_are_checked():
    ref = torch.randn(4, 4)
    assert compare_outputs([torch.randn(16)], [ref]).reason.startswith("shape")
    assert compare_outputs([ref.double()], [ref]).reason.startswith("dtype")
    assert compare_outputs([ref, ref], [ref]).reason.startswith("shape")


def test_tolerance_is_dtype_aware_and_overridable():
    assert tolerance_for(torch.bfloat16)["rel"] > tolerance_for(torch.float32)["rel"]
    assert tolerance_for(torch.int64) == {"atol": 0.0, "rtol": 0.0, "rel": 0.0, "median_rel": 0.0, "bias": 0.0}
    assert tolerance_for(torch.float16, {"float16": {"rel": 0.5}})["rel"] == 0.5
    ref = torch.randn(1000)
    noisy = ref + 3e-3 * torch.randn(1000)
    assert not compare_outputs([noisy], [ref]).ok  # rel ~3e-3 > float32 bound 1e-3
    assert compare_outputs([noisy], [ref], {"float32": {"rel": 1e-2}}).ok


def test_flatten_nested_outputs():
    a, b, c = torch.ones(1), torch.zeros(1), torch.ones(2)
    assert [t.shape for t in flatten_outputs((a, [b, (c,)]))] == [a.shape, b.shape, c.shape]


def test_an_overflowing_difference_fails():
    ref = torch.full((8,), -3e38)
    out = ref.clone()
    out[5] = 3e38  # finite both, the difference is not
    result = compare_outputs([out], [ref])
    assert not result.ok and result.reason.startswith("mismatch") and "flat index 5" in result.reason


def test_large_values_keep_an_exact_relative_error():
    ref = torch.full((4096,), 1e30)  # squares past float32's range: the norm falls back to float64
    result = compare_outputs([ref * (1 + 1e-5)], [ref])
    assert result.ok and math.isclose(result.rel_err, 1e-5, rel_tol=1e-2)


def test_integers_past_float32_precision_are_exact():
    ref = torch.tensor([1 << 30, 7], dtype=torch.int64)
    assert not compare_outputs([ref + torch.tensor([1, 0])], [ref]).ok  # 2**30 + 1 rounds to 2**30 in float32
    assert compare_outputs([ref.clone()], [ref]).ok


def test_matching_non_finite_positions_are_left_out_and_the_rest_judged():
    ref = torch.randn(3000)
    ref[[7, 2500]] = float("nan")
    ref[11], ref[13] = float("inf"), float("-inf")
    out = ref.clone()
    assert compare_outputs([out], [ref]).ok
    out[12] = out[12] + 1.0
    result = compare_outputs([out], [ref])
    assert not result.ok and "flat index 12" in result.reason


def test_the_worst_element_is_found_across_chunks():
    ref = torch.zeros(CHUNK_ELEMENTS * 2 + 10)
    out = ref.clone()
    out[3], out[CHUNK_ELEMENTS + 17] = 0.5, 0.75
    result = compare_outputs([out], [ref])
    assert result.max_abs_err == 0.75 and f"flat index {CHUNK_ELEMENTS + 17}" in result.reason


def test_compare_device_is_torchs_index_in_this_process(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert compare_device("cuda", 3) == torch.device("cuda", 3)
    assert compare_device("cuda", None) == torch.device("cuda", 0)
    assert compare_device("cuda", 3, on_gpu=False).type == "cpu"
    assert compare_device("cpu", None).type == "cpu"


# --- non-finite values ---------------------------------------------------------------------------

def test_an_inf_in_the_reference_cannot_switch_the_norm_check_off():
    ref = torch.randn(1000)
    ref[0] = float("inf")
    out = ref * 1.005  # within rtol elementwise, 5e-3 norm-relative: over float32's 1e-3
    assert compare_outputs([out], [ref]).reason.startswith("mismatch")  # the inf matches, the rest is judged
    out[0] = 0.0  # finite where the reference is inf: |0 - inf| <= rtol * inf held, and ||ref|| was inf
    result = compare_outputs([out], [ref])
    assert not result.ok and result.reason.startswith("nan") and "flat index 0" in result.reason


@pytest.mark.parametrize(("expected", "got"), [
    ("nan", "1.0"), ("nan", "inf"), ("inf", "-inf"), ("-inf", "inf"), ("inf", "nan"), ("-inf", "3.0"),
    ("2.0", "inf"), ("2.0", "nan"),
])
def test_non_finite_values_must_match_the_reference_in_kind_and_position(expected, got):
    ref = torch.randn(CHUNK_ELEMENTS + 100)
    ref[CHUNK_ELEMENTS + 7] = float(expected)
    ref[3] = float("nan")  # a matching NaN earlier on: not the one reported
    out = ref.clone()
    out[CHUNK_ELEMENTS + 7] = float(got)
    result = compare_outputs([out], [ref])
    assert not result.ok and result.reason.startswith("nan") and "\n" not in result.reason
    assert f"first at flat index {CHUNK_ELEMENTS + 7}: got {float(got):.6g}, expected {float(expected):.6g}" in result.reason


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_values_that_match_pass(value):
    ref = torch.randn(100)
    ref[[5, 50]] = float(value)
    assert compare_outputs([ref.clone()], [ref]).ok


def test_a_huge_float64_reference_keeps_its_norm():
    ref = 1e200 * (1 + torch.rand(4096, dtype=torch.float64))  # squares overflow even float64
    result = compare_outputs([ref * (1 + 5e-7)], [ref])  # within rtol 1e-6, over rel 1e-7
    assert not result.ok and math.isclose(result.rel_err, 5e-7, rel_tol=1e-3)


# --- complex outputs -----------------------------------------------------------------------------

def test_complex_outputs_keep_their_imaginary_part():
    ref = torch.randn(1000, dtype=torch.complex64)
    assert compare_outputs([ref.clone()], [ref]).ok
    wrong = torch.complex(ref.real, ref.imag + 1.0)
    result = compare_outputs([wrong], [ref])
    assert not result.ok and "(imag part)" in result.reason


def test_complex_outputs_take_the_tolerance_of_their_real_dtype():
    assert tolerance_for(torch.complex64) == tolerance_for(torch.float32)
    assert tolerance_for(torch.complex128) == tolerance_for(torch.float64)
    assert tolerance_for(torch.complex64, {"float32": {"rel": 0.5}})["rel"] == 0.5
    assert tolerance_for(torch.complex64, {"complex64": {"rel": 0.25}})["rel"] == 0.25
    ref = torch.randn(10000, dtype=torch.complex64)
    noisy = ref * (1 + 1e-5 * torch.randn(10000))  # float32 passes this, exact equality would not
    assert compare_outputs([noisy], [ref]).ok
    double = ref.to(torch.complex128)
    assert not compare_outputs([double * (1 + 1e-5)], [double]).ok  # float64's rel is 1e-7
    assert compare_outputs([double.conj()], [double.conj().resolve_conj()]).ok  # a lazy conjugate


# --- element-wise relative statistics ------------------------------------------------------------

def _tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to tf32's 10 mantissa bits, as a tensor core rounds a matmul's inputs."""
    return ((x.view(torch.int32) + 0x1000) & ~0x1FFF).view(torch.float32)


def _honest(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, ref) as an honest kernel would leave them."""
    torch.manual_seed(0)
    n = 1 << 18
    exact = torch.randn(n, dtype=torch.float64)
    if name == "float32 op":
        x = torch.randn(n)
        return torch.nn.functional.gelu(x), torch.nn.functional.gelu(x.double()).float()
    if name == "tf32 matmul":  # 1/sqrt(K): outputs ~N(0, 1), where atol 1e-2 holds (it does not at ~32)
        a, b = torch.randn(256, 1024) / 32, torch.randn(1024, 512)
        return _tf32(a) @ _tf32(b), (a.double() @ b.double()).float()
    if name == "tf32 truncated, positive inputs":  # as on the H100: linear+ReLU, one-sided -6.65e-4 on average
        a, b = torch.rand(256, 1024) / 32, torch.rand(1024, 512)
        truncated = lambda x: (x.view(torch.int32) & ~0x1FFF).view(torch.float32)  # noqa: E731
        return truncated(a) @ truncated(b), (a.double() @ b.double()).float()
    if name == "tf32-like relative noise":
        ref = exact.float()
        return ref * (1 + 3e-4 * torch.randn(n)), ref
    if name == "absolute noise":  # a reduction's error: set by the row's scale, not the element's
        ref = exact.float()
        return ref + 3e-4 * torch.randn(n), ref
    if name in ("bfloat16", "float16"):  # computed in float64, rounded once vs rounded via float32
        dtype = getattr(torch, name)
        return exact.to(dtype), exact.float().to(dtype)
    if name == "bfloat16 matmul":  # float32 accumulation vs torch's own
        a, b = torch.randn(256, 512, dtype=torch.bfloat16), torch.randn(512, 256, dtype=torch.bfloat16)
        return (a.float() @ b.float()).to(torch.bfloat16), a @ b
    if name == "half zeros":
        ref = torch.where(torch.rand(n) < 0.5, 0.0, exact).float()
        return ref * (1 + 1e-6 * torch.randn(n)) + 1e-9 * torch.randn(n), ref
    if name == "a few huge values":
        ref = exact.float()
        ref[::50000] = 1e6
        return ref * (1 + 3e-4 * torch.randn(n)), ref
    raise ValueError(name)


@pytest.mark.parametrize("name", ["float32 op", "tf32 matmul", "tf32 truncated, positive inputs",
                                  "tf32-like relative noise", "absolute noise",
                                  "bfloat16", "float16", "bfloat16 matmul", "half zeros", "a few huge values"])
def test_honest_kernels_pass_the_relative_statistics(name):
    out, ref = _honest(name)
    result = compare_outputs([out], [ref])
    assert result.ok, result.reason


def test_honest_kernels_pass_across_chunks():
    ref = torch.randn(2 * CHUNK_ELEMENTS + 1000)
    ref[::100000] = 1e6
    assert compare_outputs([ref * (1 + 3e-4 * torch.randn(ref.numel()))], [ref]).ok


def _under_huge_values(n: int, dtype: torch.dtype, huge: float = 1e6) -> torch.Tensor:
    torch.manual_seed(0)
    ref = torch.randn(n)
    ref[:10] = huge  # these dominate ||ref||: the norm-relative error of the rest shrinks ~1e-3x
    return ref.to(dtype)


def _biased(ref: torch.Tensor, factor: float, fraction: float = 1.0) -> torch.Tensor:
    out = ref.float().clone()
    out[10:int(ref.numel() * fraction)] *= factor  # the huge values stay exact
    return out.to(ref.dtype)


@pytest.mark.parametrize("n", [10000, 2 * CHUNK_ELEMENTS + 10])
def test_a_bias_under_huge_values_fails(n):
    ref = _under_huge_values(n, torch.float32)
    out = _biased(ref, 1.009)
    assert (out - ref).abs().le(1e-2 + 1e-2 * ref.abs()).all()  # every element within atol + rtol * |ref|
    result = compare_outputs([out], [ref])
    assert not result.ok and result.rel_err < 1e-3 and "off on most elements" in result.reason
    assert "median relative error is ~0.009" in result.reason


def test_a_bias_everywhere_fails_float32():
    ref = torch.randn(10000)
    result = compare_outputs([ref * 1.005], [ref])
    assert not result.ok and result.reason.startswith("mismatch")


@pytest.mark.parametrize(("dtype", "huge", "factor", "fraction", "reason"), [
    (torch.float16, 3e4, 1.009, 1.0, "off on most elements"),  # median_rel 5e-3
    (torch.bfloat16, 1e6, 1.009, 1.0, "a scale error"),  # median_rel 1e-2 lets 0.9% through, bias 5e-3 does not
    (torch.float32, 1e6, 1.009, 0.4, "a scale error"),  # on a minority the median says nothing
    (torch.float32, 1e6, 0.991, 0.3, "a scale error"),
])
def test_a_bias_on_some_or_all_elements_fails(dtype, huge, factor, fraction, reason):
    ref = _under_huge_values(20000, dtype, huge)
    result = compare_outputs([_biased(ref, factor, fraction)], [ref])
    assert not result.ok and result.reason.startswith("mismatch") and reason in result.reason
    assert result.rel_err < tolerance_for(dtype)["rel"]


def test_an_offset_under_huge_values_fails():
    ref = _under_huge_values(20000, torch.float32)
    out = ref + 0.002  # within atol; relative to |ref| ~0.8 that is 2.5e-3, one-sided
    out[:10] = ref[:10]
    result = compare_outputs([out], [ref])
    assert not result.ok and result.reason.startswith("mismatch")
    out = ref + 1.5e-3  # one-sided: (out - ref) / |ref| averages over float32's 2e-3 bias bound
    out[:10] = ref[:10]
    result = compare_outputs([out], [ref])
    assert not result.ok and result.reason.startswith("mismatch")


def test_the_new_keys_default_from_rel_and_can_be_overridden():
    assert tolerance_for(torch.float32)["median_rel"] == tolerance_for(torch.float32)["rel"]
    assert tolerance_for(torch.float32)["bias"] == tolerance_for(torch.float32)["rel"] * 2  # tf32 truncates
    assert tolerance_for(torch.bfloat16)["bias"] == tolerance_for(torch.bfloat16)["rel"] / 2
    tightened = tolerance_for(torch.float32, {"float32": {"rel": 1e-5}})
    assert tightened["median_rel"] == 1e-5 and tightened["bias"] == 2e-5  # a tighter rel tightens them too
    ref = _under_huge_values(10000, torch.float32)
    out = _biased(ref, 1.009)
    assert not compare_outputs([out], [ref]).ok
    assert compare_outputs([out], [ref], {"float32": {"median_rel": 0.02, "bias": 0.02}}).ok


def test_a_single_element_is_judged_by_the_norm_alone():
    ref = torch.tensor([2.0])  # one element: its mean error is no evidence of bias beyond the norm
    assert compare_outputs([ref * (1 + 8e-4)], [ref]).ok
    assert not compare_outputs([ref * (1 + 2e-3)], [ref]).ok


def test_booleans_are_exact():
    ref = torch.tensor([True, False, True])
    assert compare_outputs([ref.clone()], [ref]).ok
    assert not compare_outputs([~ref], [ref]).ok


def test_a_sparse_output_is_rejected_not_raised():
    ref = torch.randn(4, 4)
    assert compare_outputs([ref.to_sparse()], [ref]).reason.startswith("layout")


def _roundoff_reference(n: int = 4096) -> torch.Tensor:
    """An output that is zero up to float32 round-off, like KernelBench level 2 #41's (a mean over a GroupNorm)."""
    torch.manual_seed(0)
    x = torch.randn(n, 1024)
    return torch.relu(torch.nn.functional.group_norm(x, 8).mean(dim=1))


def test_a_round_off_reference_is_judged_by_the_absolute_tolerance_and_marked():
    ref = _roundoff_reference()
    assert 0 < float(ref.abs().max()) < 1e-6
    off = ref + 2e-7 * torch.rand_like(ref)  # an honest kernel with its own round-off
    assert not compare_outputs([off], [ref]).ok  # ||off - ref|| / ||ref|| is noise over noise
    judged = compare_outputs([off], [ref], round_off={0})
    assert judged.ok and judged.degenerate == (0,)
    zeros = compare_outputs([torch.zeros_like(ref)], [ref], round_off={0})
    assert zeros.ok and zeros.degenerate == (0,)  # right, and marked: no win
    assert not compare_outputs([ref + 0.1], [ref], round_off={0}).ok  # the absolute bound still holds


def test_a_zero_reference_is_degenerate_and_a_near_zero_one_is_not():
    ref = torch.zeros(100)
    judged = compare_outputs([1e-9 * torch.randn(100)], [ref])
    assert judged.ok and judged.degenerate == (0,)
    assert not compare_outputs([torch.full((100,), 0.5)], [ref]).ok
    near = torch.randn(1000) * 1e-8  # meaningful though tiny: not round-off, so zeros still fail
    assert not compare_outputs([torch.zeros(1000)], [near]).ok
    assert compare_outputs([near.clone()], [near]).degenerate == ()


def test_the_trusted_job_finds_round_off_by_running_the_model_in_float64():
    from kernelloop.tools.verify.reference_job import roundoff_errors

    class GroupNormMean(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.GroupNorm(8, 1024)

        def forward(self, x):
            return torch.relu(self.norm(x).mean(dim=1)), x * 1e-8, x.sum(dim=1)

    torch.manual_seed(1)
    model, x = GroupNormMean(), torch.randn(256, 1024)
    with torch.no_grad():
        outputs = list(model(x))
        found = roundoff_errors(lambda: copy.deepcopy(model).double(), [x], outputs, {})
    # output 0 is round-off (error ~ its norm); 1 is tiny but exact; 2 is not small at all
    assert list(found) == [0] and found[0] > 0.1
    assert roundoff_errors(lambda: None, [x], outputs, {}) == {}  # no float64 model: the usual checks


def test_declared_precision_turns_tf32_off_and_restores_the_flags():
    from kernelloop.tools.verify._runtime import declared_precision

    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with pytest.raises(RuntimeError), declared_precision():
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        raise RuntimeError("a reference that fails still leaves the flags as they were")
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


# -- the tolerance is a choice, stated --------------------------------------------------------------
def test_a_mismatch_another_standard_passes_says_so():
    torch.manual_seed(0)
    ref = torch.randn(4096)
    result = compare_outputs([ref * 1.004], [ref])  # off by 0.4%: over our rel (1e-3), under KernelBench v0's 1e-2
    assert not result.ok and result.code is Code.mismatch
    assert result.would_pass == ("kernelbench_v0",)
    assert result.reason.endswith("KernelBench's v0 tolerance (atol=rtol=1e-2) would pass it")


def test_a_mismatch_no_standard_passes_names_none():
    ref = torch.randn(4096)
    result = compare_outputs([ref + 1.0], [ref])
    assert not result.ok and result.would_pass == () and "would pass" not in result.reason


def test_a_wrong_type_or_misplaced_nan_is_never_passed_by_another_standard():
    ref = torch.randn(64)
    assert compare_outputs([ref.double()], [ref]).would_pass == ()
    broken = ref.clone()
    broken[3] = float("nan")
    assert compare_outputs([broken], [ref]).would_pass == ()


def test_the_tolerance_words_name_ours_per_dtype():
    words = tolerance_words([torch.zeros(2), torch.zeros(2, dtype=torch.bfloat16)], {"float32": {"rel": 2e-3}})
    assert words.startswith("kernelloop: per-dtype")
    assert "float32: atol=0.01 rtol=0.01 rel=0.002" in words and "bfloat16: atol=0.02" in words
