"""profiler.py on the CPU: kernel tables, own-vs-library shares, the critic's summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelloop.tools.profile import profiler, roofline
from kernelloop.tools.profile.ncu import NcuReport, read_ncu_output
from kernelloop.tools.profile.profiler import (
    KernelRow,
    ProfilerError,
    aggregate_kernels,
    classify_kernels,
    kernel_kind,
    summarize_profile,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NCU = FIXTURES / "ncu"
OWN = ["fused_gemm_relu_kernel"]


def h100_rows() -> list[KernelRow]:
    events = json.loads((FIXTURES / "profiler" / "h100_events.json").read_text())
    return aggregate_kernels([(name, ms) for name, ms in events], "cuda")


# --------------------------------------------------------------------------- torch.profiler


def test_aggregate_kernels_sums_by_name_and_sorts():
    rows = aggregate_kernels([("a", 1.0), ("b", 3.0), ("a", 2.0)], "cuda")
    assert [(r.name, r.calls, r.total_ms, r.mean_ms) for r in rows] == [("a", 2, 3.0, 1.5), ("b", 1, 3.0, 3.0)]
    assert [r.percent for r in rows] == [50.0, 50.0]


def test_aggregate_kernels_rejects_negative_time():
    with pytest.raises(ProfilerError, match="negative"):
        aggregate_kernels([("a", -1.0)], "cuda")


def test_kernel_table_on_cpu_lists_the_ops():
    x = torch.randn(128, 128)
    rows = kernel_table_cpu(lambda: torch.relu(x @ x))
    names = {r.name for r in rows}
    assert "aten::mm" in names and "aten::clamp_min" in names
    assert all(r.device == "cpu" for r in rows)
    assert sum(r.percent for r in rows) == pytest.approx(100.0)
    assert next(r for r in rows if r.name == "aten::mm").calls == 2  # iters


def kernel_table_cpu(fn):
    return profiler.kernel_table(fn, warmup=1, iters=2)


def test_kernel_table_rejects_zero_iters():
    with pytest.raises(ProfilerError, match="iters"):
        profiler.kernel_table(lambda: None, iters=0)


def test_classify_recorded_h100_events():
    shares = classify_kernels(h100_rows(), OWN)
    assert shares["own_kernels"] == ["fused_gemm_relu_kernel"]
    assert shares["own_ms"] == pytest.approx(0.4124 + 0.4110)
    assert shares["library_kernels"]["nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"] == "cublas"
    assert shares["library_kernels"]["triton_poi_fused_add_relu_0"] == "torch.compile triton"
    assert shares["library_kernels"]["Memcpy DtoD (Device -> Device)"] == "memcpy/memset"
    fill = next(n for n in shares["library_kernels"] if "FillFunctor" in n)
    assert shares["library_kernels"][fill] == "at::native"
    total_ms = 0.8000 + 0.7978  # the two iterations of the fixture, summed by hand
    assert shares["total_ms"] == pytest.approx(total_ms)
    assert shares["own_share"] == pytest.approx((0.4124 + 0.4110) / total_ms)
    assert shares["own_share"] + shares["library_share"] + shares["other_share"] == pytest.approx(1.0)
    assert shares["other_kernels"] == []


def test_classify_without_own_names_puts_everything_in_library_or_other():
    shares = classify_kernels(h100_rows(), [])
    assert shares["own_ms"] == 0.0
    assert shares["other_kernels"] == ["fused_gemm_relu_kernel"]


def test_classify_empty_table():
    shares = classify_kernels([], OWN)
    assert shares["total_ms"] == 0.0 and shares["own_share"] == 0.0


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("fused_gemm_relu_kernel", "own"),
        ("fused_gemm_relu_kernel_0d1d2d3de", "own"),  # older Triton appends the signature
        ("void fused_gemm_relu_kernel<128>(float const*, float*)", "own"),  # CUDA, demangled
        ("fused_gemm_relu_kernel_v2", "other"),  # a different kernel, not a suffix of ours
        ("my_fused_gemm_relu_kernel", "other"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "library:cublas"),
        ("ampere_sgemm_128x64_nn", "library:cublas"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)", "library:cublas"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "library:cudnn"),
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4> >(Flash_fwd_params)",
            "library:flash attention",
        ),
        ("triton_red_fused__softmax_0", "library:torch.compile triton"),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(at::native::ReduceOp<float>)",
            "library:at::native",
        ),
        ("Memset (Device)", "library:memcpy/memset"),
        ("aten::mm", "library:aten (cpu)"),
        ("some_unknown_kernel", "other"),
        ("my_gemm", "other"),  # an own kernel whose name wasn't passed is not cuBLAS
        (
            "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false>(float)",
            "library:cublas",
        ),
        (
            "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<bf16>::Params)",
            "library:flash attention",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float*, int)",
            "library:at::native",
        ),
        ("void cub::CUB_200200_900_NS::DeviceReduceSingleTileKernel<Policy600, float*>(float*)", "library:at::native"),
    ],
)
def test_kernel_kind(name, kind):
    assert kernel_kind(name, profiler._own_pattern(OWN)) == kind


# --------------------------------------------------------------------------- summary


def test_summarize_profile_for_the_critic():
    h100 = roofline.peaks_for("NVIDIA H100 80GB HBM3")
    n = 4096
    flops, n_bytes = 2 * n**3, 3 * n * n * 2
    ncu = read_ncu_output((NCU / "raw_h100_gemm_relu.csv").read_text())
    summary = summarize_profile(
        rows=h100_rows(),
        own_kernel_names=OWN,
        measured_ms=0.4,
        flops=flops,
        bytes_moved=n_bytes,
        peaks=h100,
        peak_key="bf16",
        ncu=ncu,
        top_n=2,
    )
    json.dumps(summary)  # JSON-ready
    assert [k["name"] for k in summary["kernels"]] == [
        "fused_gemm_relu_kernel",
        "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT",
    ]
    assert summary["kernels"][0]["kind"] == "own"
    assert summary["kernels"][1]["kind"] == "library:cublas"
    assert summary["shares"]["own"] == pytest.approx(0.8234 / 1.5978)
    assert "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT" in summary["shares"]["library_kernels"]
    expected_floor = flops / 989.4e9  # ms
    assert summary["roofline"]["floor_ms"] == pytest.approx(expected_floor)
    assert summary["roofline"]["bound"] == "compute"
    assert summary["roofline"]["percent_of_limit"] == pytest.approx(100 * expected_floor / 0.4)
    assert [k["kernel"] for k in summary["ncu"]] == ["fused_gemm_relu_kernel", "fused_gemm_relu_kernel"]
    assert summary["ncu"][0]["top_stalls"][0] == ["math_pipe_throttle", 3.07]
    assert summary["notes"] == []


def test_summarize_profile_carries_ncu_notes_and_default_peaks():
    summary = summarize_profile(
        flops=0,
        bytes_moved=10**9,
        peaks=roofline.peaks_for("Mystery GPU"),
        peak_key="fp32",
        ncu=NcuReport(notes=["ncu: no permission"]),
    )
    assert "kernels" not in summary
    assert summary["roofline"]["bound"] == "memory"
    assert "measured_ms" not in summary["roofline"]
    assert summary["ncu"] == []
    assert "ncu: no permission" in summary["notes"]
    assert any("peaks unknown" in note for note in summary["notes"])


def test_summarize_profile_notes_an_incomplete_roofline():
    summary = summarize_profile(flops=10)
    assert "roofline" not in summary
    assert "roofline skipped" in summary["notes"][0]
