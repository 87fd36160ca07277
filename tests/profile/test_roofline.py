"""roofline.py against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from kernelloop.tools.profile.roofline import (
    DEFAULT_PEAKS,
    KNOWN_PEAKS,
    PEAK_KEYS,
    DevicePeaks,
    RooflineError,
    count_bytes,
    count_flops,
    count_output_bytes,
    floor_ms,
    floor_parts_ms,
    output_floor_ms,
    peak_key_for,
    peaks_for,
    roofline_position,
)


def test_matmul_1024_cubed_is_two_flops_per_multiply_add():
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    assert count_flops(torch.matmul, a, b) == 2 * 1024**3


def test_count_flops_on_a_module_with_bias_and_elementwise():
    linear = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64)
    # addmm: 2 * 8 * 64 * 32; torch's formula leaves out the bias add and the relu (elementwise)
    assert count_flops(lambda t: torch.relu(linear(t)), x) == 2 * 8 * 64 * 32


def test_count_flops_of_elementwise_only_is_zero():
    x = torch.randn(1000)
    assert count_flops(lambda t: (t * 2 + 1).exp(), x) == 0


def test_count_bytes_reads_inputs_once_and_writes_outputs_once():
    a = torch.zeros(1024, 1024)  # 4 MiB float32
    b = torch.zeros(1024, 1024, dtype=torch.bfloat16)  # 2 MiB
    out = torch.zeros(1024, 1024)
    nested_inputs = (a, [b, 3, None], {"scale": 2.0})
    assert count_bytes(nested_inputs, out) == 4 * 2**20 + 2 * 2**20 + 4 * 2**20


def test_count_bytes_counts_a_repeated_tensor_once_per_side():
    a = torch.zeros(10)  # 40 bytes
    assert count_bytes([a, a], (a,)) == 40 + 40


def test_peaks_for_known_names():
    assert peaks_for("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert peaks_for("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert peaks_for("NVIDIA H200").name == "H200 SXM"
    assert peaks_for("NVIDIA A100-SXM4-40GB").name == "A100 40GB"
    assert peaks_for("NVIDIA A100-SXM4-80GB").name == "A100 80GB"
    assert peaks_for("NVIDIA L40S").name == "L40S"


def test_unknown_device_falls_back_to_a_default_above_every_known_part():
    peaks = peaks_for("Some Future GPU")
    assert peaks is DEFAULT_PEAKS and peaks.is_default
    for _, known in KNOWN_PEAKS:
        assert DEFAULT_PEAKS.memory_gb_per_s >= known.memory_gb_per_s
        for key in PEAK_KEYS:
            value = getattr(known, f"{key}_tflops")
            if value is not None:
                assert DEFAULT_PEAKS.tflops(key) >= value


def test_dense_not_sparse_numbers():
    h100 = peaks_for("NVIDIA H100 80GB HBM3")
    # datasheet: 1,979 TFLOPS BF16 "with sparsity"; dense is half
    assert h100.bf16_tflops == pytest.approx(1979 / 2, rel=1e-3)
    assert h100.fp8_tflops == pytest.approx(3958 / 2, rel=1e-3)


def test_floor_of_a_memory_bound_copy_on_h100():
    h100 = peaks_for("NVIDIA H100 80GB HBM3")
    n_bytes = 2 * 2**30  # 1 GiB read + 1 GiB written
    expected_ms = n_bytes / 3350e9 * 1e3  # 3.35 TB/s
    assert floor_ms(0, n_bytes, h100, "fp32") == pytest.approx(expected_ms)
    assert floor_parts_ms(0, n_bytes, h100, "fp32") == (0.0, pytest.approx(expected_ms))


def test_floor_of_a_compute_bound_matmul_on_h100():
    h100 = peaks_for("NVIDIA H100 80GB HBM3")
    n = 8192
    flops = 2 * n**3
    n_bytes = 3 * n * n * 2  # bf16 A, B read and C written
    compute_ms = flops / 989.4e12 * 1e3
    memory_ms = n_bytes / 3350e9 * 1e3
    assert compute_ms > memory_ms
    assert floor_ms(flops, n_bytes, h100, "bf16") == pytest.approx(compute_ms)


def test_floor_uses_the_dtype_peak():
    peaks = DevicePeaks(
        name="toy",
        fp32_tflops=1.0,
        tf32_tflops=2.0,
        bf16_tflops=4.0,
        fp16_tflops=4.0,
        fp8_tflops=None,
        memory_gb_per_s=1.0,
        source="test",
    )
    flops = 4 * 10**9  # 4 GFLOP
    assert floor_ms(flops, 0, peaks, "fp32") == pytest.approx(4.0)  # 4e9 / 1e12 per s = 4 ms
    assert floor_ms(flops, 0, peaks, "bf16") == pytest.approx(1.0)
    with pytest.raises(RooflineError, match="no fp8"):
        floor_ms(flops, 0, peaks, "fp8")
    with pytest.raises(RooflineError, match="unknown peak"):
        floor_ms(flops, 0, peaks, "int8")


def test_a100_has_no_fp8():
    with pytest.raises(RooflineError, match="fp8"):
        peaks_for("NVIDIA A100-SXM4-80GB").tflops("fp8")


def test_peak_key_for_dtypes():
    assert peak_key_for(torch.float32) == "tf32"
    assert peak_key_for(torch.float32, allow_tf32=False) == "fp32"
    assert peak_key_for(torch.bfloat16) == "bf16"
    assert peak_key_for(torch.float16) == "fp16"
    assert peak_key_for(torch.float8_e4m3fn) == "fp8"
    with pytest.raises(RooflineError, match="int32"):
        peak_key_for(torch.int32)


def test_roofline_position_is_percent_of_the_limit():
    assert roofline_position(2.0, 1.0) == 50.0
    assert roofline_position(0.5, 1.0) == 200.0  # past the reference floor: less work than the reference, or not real
    with pytest.raises(RooflineError):
        roofline_position(0.0, 1.0)
    with pytest.raises(RooflineError):
        floor_ms(-1, 0, DEFAULT_PEAKS, "fp32")


def test_output_bytes_count_only_the_outputs_once_each():
    out = torch.zeros(256, 128)  # 128 KiB float32
    half = torch.zeros(10, dtype=torch.float16)  # 20 bytes
    assert count_output_bytes(out) == 256 * 128 * 4
    assert count_output_bytes((out, [half, None, 3], {"again": out})) == 256 * 128 * 4 + 20
    assert count_bytes((torch.zeros(7),), out) == 7 * 4 + count_output_bytes(out)


def test_output_floor_by_hand_on_h100():
    """diag(A) @ B at N=4096 in float32 (KernelBench level 1 #12): 64 MiB of output at 3.35 TB/s."""
    h100 = peaks_for("NVIDIA H100 80GB HBM3")
    n_bytes = 4096 * 4096 * 4  # 67,108,864 bytes
    assert output_floor_ms(n_bytes, h100) == pytest.approx(67_108_864 / 3.35e12 * 1e3)  # 0.02003 ms
    assert output_floor_ms(n_bytes, h100) == pytest.approx(0.020032, rel=1e-4)
    assert output_floor_ms(0, h100) == 0.0
    with pytest.raises(RooflineError):
        output_floor_ms(-1, h100)


def test_output_floor_ignores_flops_and_inputs_the_reference_floor_counts_them():
    toy = DevicePeaks(name="toy", fp32_tflops=1.0, tf32_tflops=1.0, bf16_tflops=1.0, fp16_tflops=1.0,
                      fp8_tflops=None, memory_gb_per_s=1.0, source="test")
    # 1 GB/s is 1e6 bytes per ms; 1 TFLOP/s is 1e9 FLOP per ms
    assert output_floor_ms(2_000_000, toy) == pytest.approx(2.0)
    assert floor_ms(5 * 10**9, 3_000_000, toy, "fp32") == pytest.approx(5.0)  # compute-bound: the reference's floor
    assert floor_ms(0, 3_000_000, toy, "fp32") == pytest.approx(3.0)


def test_measure_roofline_keeps_the_reference_floor_and_adds_the_output_floor(monkeypatch):
    """The issue's case: the reference's 1.37e11 FLOPs give a 0.2778 ms floor on the H100, but a
    correct row-scaling kernel only has to write 64 MiB: 0.0200 ms. Meta tensors: nothing runs."""
    from kernelloop.tools.profile import measure

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "NVIDIA H100 80GB HBM3")
    n = 4096
    a, b = torch.empty(n, device="meta"), torch.empty(n, n, device="meta")
    roof = measure.roofline_of(lambda x, y: torch.diag(x) @ y, [[a, b]])
    assert roof["flops"] == 2 * n**3
    assert roof["bytes"] == (n + 2 * n * n) * 4
    assert roof["output_bytes"] == n * n * 4
    assert roof["peaks"] == "H100 SXM" and roof["peak_key"] == "tf32"
    assert roof["compute_floor_ms"] == pytest.approx(2 * n**3 / 494.7e9)  # 0.2778 ms
    assert roof["compute_floor_ms"] == pytest.approx(0.2778, abs=1e-4)
    assert roof["memory_floor_ms"] == pytest.approx((n + 2 * n * n) * 4 / 3.35e9)
    assert roof["floor_ms"] == roof["compute_floor_ms"]
    assert roof["output_floor_ms"] == pytest.approx(n * n * 4 / 3.35e9)  # 0.0200 ms
    assert roof["output_floor_ms"] < 0.0997 < roof["floor_ms"]  # the rejected kernel's time lies between
