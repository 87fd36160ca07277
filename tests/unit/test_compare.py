"""The comparison rules on hand-made tensors."""

import math

import torch

from kernelloop.tools.verify.compare import CHUNK_ELEMENTS, compare_outputs, flatten_outputs, tolerance_for
from kernelloop.tools.verify.reference_outputs import ReferenceOutputs, compare_device


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
    assert tolerance_for(torch.int64) == {"atol": 0.0, "rtol": 0.0, "rel": 0.0}
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


def test_positions_where_the_reference_is_not_finite_are_not_judged():
    ref = torch.randn(3000)
    ref[[7, 2500]] = float("nan")
    ref[11] = float("inf")
    out = ref.clone()
    out[[7, 11, 2500]] = torch.tensor([1.0, 2.0, float("nan")])
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


def test_compare_device_maps_the_physical_gpu_into_this_process(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert compare_device("cuda", 3) == torch.device("cuda", 3)
    assert compare_device("cuda", None) == torch.device("cuda", 0)
    assert compare_device("cuda", 3, on_gpu=False).type == "cpu"
    assert compare_device("cpu", None).type == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # a Ray actor's view: its GPUs numbered from 0
    assert compare_device("cuda", 3) == torch.device("cuda", 1)
    assert compare_device("cuda", 5).type == "cpu"  # not visible here: the CPU compares


def test_reference_outputs_are_loaded_once_and_kept(tmp_path):
    path = tmp_path / "ref.pt"
    torch.save({"inputs": [], "outputs": [[torch.arange(4.0)], [torch.ones(2)]]}, path)
    store = ReferenceOutputs(torch.device("cpu"))
    sets = store.for_compare(path)
    assert store.for_compare(path) is sets and torch.equal(sets[0][0], torch.arange(4.0))
    path.unlink()  # loaded already: the worker keeps judging against it
    assert store.mapped(path) is sets
