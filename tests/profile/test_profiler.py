"""profiler.py on the CPU: kernel tables, own-vs-library shares, the critic's Profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelloop.records import Measurement
from kernelloop.tools.profile import profiler
from kernelloop.tools.profile.ncu import read_ncu_output
from kernelloop.tools.profile.ncu_budget import refusal, with_ncu
from kernelloop.tools.profile.profiler import (
    KernelRow,
    ProfilerError,
    aggregate_kernels,
    classify_kernels,
    kernel_kind,
    profile_of,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
NCU = FIXTURES / "ncu"
OWN = ["fused_gemm_relu_kernel"]


def h100_rows() -> list[KernelRow]:
    events = json.loads((FIXTURES / "profiler" / "hand_written_events.json").read_text())
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


def test_classify_hand_written_h100_style_events():
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


def recorded_measurement(name: str) -> Measurement:
    data = json.loads((FIXTURES / "speed" / f"{name}.json").read_text())
    data.pop("recorded")
    return Measurement.model_validate(data)


def test_profile_of_a_recorded_h100_measurement():
    """tests/fixtures/speed/honest.json was recorded on an H100: a Triton ReLU over 64 MiB in, 64 MiB out."""
    measurement = recorded_measurement("honest")
    profile = profile_of(measurement, event_ms=0.0490, measured_ms=0.0490, speed_source="events")
    assert [(k.name, k.kind, k.share) for k in profile.kernels] == [("relu_kernel", "own", 1.0)]
    assert profile.own_share == 1.0 and profile.library_share == 0.0
    roof = profile.roofline
    assert roof.bound == "memory" and roof.peaks == "H100 SXM"
    assert roof.achieved_gb_per_s == pytest.approx(134217728 / 0.0490 / 1e6)
    assert roof.bandwidth_pct == pytest.approx(100 * roof.achieved_gb_per_s / 3350.0)
    assert roof.percent_of_limit == pytest.approx(100 * 0.04006499343283582 / 0.0490)
    assert profile.host_device.device_ms_per_call == pytest.approx(0.46560199999999985 / 10)
    assert profile.host_device.host_share == pytest.approx(1 - 0.046560199999999985 / 0.05004590000012854)
    assert profile.gpu.sm_clock_mhz == [1980, 1980] and "not run" in profile.ncu_note


def test_profile_of_drops_claimed_rows_and_launches_that_do_not_fit():
    measurement = recorded_measurement("decoy")
    measurement.kernels += [{"name": "forged", "calls": -1, "total_ms": 1e30, "mean_ms": 1.0, "percent": 1.0,
                             "device": "cuda"}, {"made_up": 1}, "not a row"]
    measurement.launches = [{"kernel": "relu_kernel", "grid": [4], "num_warps": 4, "registers": 32, "spills": 0,
                             "shared_bytes": 0}, {"kernel": "x", "grid": ["many"]}, {"kernel": "y", "spills": 2**60}]
    profile = profile_of(measurement, 0.05, 0.05, "events")
    assert [k.name for k in profile.kernels][1:] == ["relu_kernel"]
    assert profile.library_share == pytest.approx(0.972, abs=0.01)
    assert [(launch.kernel, launch.grid) for launch in profile.launches] == [("relu_kernel", [4])]


def test_ncu_facts_join_the_profile_with_their_cost():
    report = read_ncu_output((NCU / "hand_written_raw_gemm_relu.csv").read_text())
    profile = with_ncu(profile_of(recorded_measurement("honest"), 0.049, 0.049, "events"), report, 12.5)
    assert profile.profiling_s == 12.5 and profile.ncu_note == ""
    assert [facts.kernel for facts in profile.ncu] == ["fused_gemm_relu_kernel", "fused_gemm_relu_kernel"]
    first = profile.ncu[0]
    assert first.occupancy_pct == 12.45 and first.registers_per_thread == 168
    assert first.top_stalls[0] == ["math_pipe_throttle", 3.07]
    assert first.throughput_pct == {"sm": 74.02, "dram": 36.84}


def test_ncu_notes_stand_in_for_facts_when_it_measured_nothing():
    report = read_ncu_output((NCU / "hand_written_permission_error.txt").read_text())
    profile = with_ncu(None, report, 3.0)
    assert profile.ncu == [] and "ERR_NVGPUCTRPERM" in profile.ncu_note


def test_ncu_stays_within_a_tenth_of_the_run():
    assert "CPU" in refusal("cpu", 10_000.0, 0.0)
    assert refusal("cuda", 100.0, 0.0) is not None  # 30 s of 130 s would be 23%
    assert refusal("cuda", 1000.0, 0.0) is None  # 30 s of 1030 s
    assert "within 10%" in refusal("cuda", 1000.0, 80.0, last_ncu_s=40.0)  # 120 of 1040 s
