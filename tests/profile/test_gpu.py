"""gpu.py on the CPU: throttle-reason decoding, idle choice, and the no-NVML path."""

from __future__ import annotations

import builtins

import pynvml
import pytest

from kernelloop.records import GpuState, Status, Verdict
from kernelloop.tools.profile import gpu


def test_decode_throttle_reasons_names_each_bit():
    # 0x1 idle | 0x4 SW power cap | 0x40 HW thermal
    assert gpu.decode_throttle_reasons(0x45) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert gpu.decode_throttle_reasons(0) == []


def test_decode_throttle_reasons_matches_pynvml_constants():
    assert gpu.decode_throttle_reasons(pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown) == [
        "hw_power_brake_slowdown"
    ]
    assert gpu.decode_throttle_reasons(pynvml.nvmlClocksThrottleReasonSwThermalSlowdown) == ["sw_thermal_slowdown"]
    assert gpu.decode_throttle_reasons(pynvml.nvmlClocksThrottleReasonApplicationsClocksSetting) == [
        "applications_clocks_setting"
    ]


def test_decode_keeps_unknown_bits_visible():
    assert gpu.decode_throttle_reasons(0x8 | 0x10000) == ["hw_slowdown", "unknown_0x10000"]


@pytest.mark.parametrize(
    ("mask", "throttled"),
    [
        (0x1, False),  # idle
        (0x2, False),  # application clocks
        (0x1 | 0x2 | 0x10 | 0x100, False),  # idle, app clocks, sync boost, display clock
        (0x4, True),  # SW power cap
        (0x8, True),  # HW slowdown
        (0x20, True),  # SW thermal
        (0x40, True),  # HW thermal
        (0x80, True),  # power brake
        (0x1 | 0x40, True),
    ],
)
def test_only_thermal_and_power_reasons_count_as_throttling(mask, throttled):
    assert gpu.is_throttled(gpu.decode_throttle_reasons(mask)) is throttled


def reading(index=0, clock=1980, temp=45, power=120.5, mask=0x0, mem=600.0, util=0):
    return {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "sm_clock_mhz": clock,
        "temperature_c": temp,
        "power_w": power,
        "throttle_reasons": gpu.decode_throttle_reasons(mask),
        "memory_used_mib": mem,
        "utilization_pct": util,
        "notes": [],
    }


def test_measure_around_fills_before_and_after():
    readings = iter([reading(clock=1980, temp=40, power=90.0), reading(clock=1755, temp=71, power=690.0, mask=0x4)])
    with gpu.measure_around(3, read=lambda index: next(readings)) as state:
        assert state.sm_clock_mhz == []  # filled on exit
    assert isinstance(state, GpuState)
    assert state.name == "NVIDIA H100 80GB HBM3"
    assert state.index == 0  # as the readings report it
    assert state.sm_clock_mhz == [1980, 1755]
    assert state.temperature_c == [40, 71]
    assert state.power_w == [90.0, 690.0]
    assert state.throttle_reasons == ["sw_power_cap"]
    assert state.throttled is True
    assert state.notes == []


def test_measure_around_idle_reason_is_not_throttling():
    readings = iter([reading(mask=0x1), reading(mask=0x1)])
    with gpu.measure_around(0, read=lambda index: next(readings)) as state:
        pass
    assert state.throttle_reasons == ["gpu_idle"]
    assert state.throttled is False


def test_measure_around_fills_even_when_the_block_raises():
    readings = iter([reading(), reading(mask=0x40)])
    with pytest.raises(RuntimeError), gpu.measure_around(0, read=lambda index: next(readings)) as state:
        raise RuntimeError("candidate crashed")
    assert state.throttled is True


def test_measure_around_without_nvml_is_empty_with_a_note():
    with gpu.measure_around(0, read=lambda index: None) as state:
        pass
    assert state.sm_clock_mhz == [] and state.throttle_reasons == [] and state.throttled is False
    assert len(state.notes) == 1 and "no NVML reading" in state.notes[0]


def test_gpu_state_fits_in_a_verdict():
    state = GpuState(index=1, name="x", sm_clock_mhz=[1980], throttled=True, notes=["n"])
    verdict = Verdict(status=Status.correct, reason="ok", gpu=state)
    assert verdict.gpu.throttled is True
    assert verdict.model_dump()["gpu"]["sm_clock_mhz"] == [1980]


@pytest.fixture
def no_pynvml(monkeypatch):
    """Make `import pynvml` fail, as on a machine without nvidia-ml-py."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


@pytest.fixture
def failing_nvml(monkeypatch):
    """nvmlInit fails as it does without a driver."""

    def fail():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", fail)


@pytest.mark.parametrize("broken", ["no_pynvml", "failing_nvml"])
def test_no_nvml_degrades_to_none(broken, request):
    request.getfixturevalue(broken)
    assert gpu.read_state(0) is None
    with gpu.measure_around(0) as state:
        pass
    assert state.sm_clock_mhz == []
    assert len(state.notes) == 1
    assert ("not importable" if broken == "no_pynvml" else "NVML unavailable") in state.notes[0]


def test_match_uuid_ignores_nvml_prefix_and_case():
    nvml_uuids = ["GPU-aaaa-0001", "GPU-BBBB-0002"]
    assert gpu.match_uuid("bbbb-0002", nvml_uuids) == 1
    assert gpu.match_uuid("cccc", nvml_uuids) is None
