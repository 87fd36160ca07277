"""NVML readings around a measurement: clocks, temperature, power, throttle reasons.

Every function degrades instead of raising when NVML is missing or fails (no driver, a CPU
machine, a container without the library): readings become None, and `measure_around`
yields an empty state with a note. Indices are NVML indices, which ignore
CUDA_VISIBLE_DEVICES; `nvml_index_for_cuda_device` maps a torch device to one.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from kernelloop.records import GpuState

# Clock event ("throttle") reason bits, as nvml.h defines them (stable across driver versions).
THROTTLE_REASON_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
# Reasons that mean the clocks were pulled down by heat or power, so the timing ran slow.
# Idle, application/display clock settings and sync boost are the card's normal states.
THROTTLING_REASONS = frozenset(
    {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}
)

_MIB = 1024 * 1024
_MILLIWATTS_PER_WATT = 1000.0


def decode_throttle_reasons(mask: int) -> list[str]:
    """Names of the reason bits set in an NVML clock-event mask; unknown bits as hex."""
    names = [name for bit, name in sorted(THROTTLE_REASON_BITS.items()) if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASON_BITS)
    if unknown:
        names.append(f"unknown_{unknown:#x}")
    return names


def is_throttled(reasons: list[str]) -> bool:
    """True when any thermal or power reason is among `reasons`."""
    return any(reason in THROTTLING_REASONS for reason in reasons)


# --------------------------------------------------------------------------- NVML access


def _nvml() -> tuple[Any | None, str]:
    """The initialised pynvml module, or None and why not."""
    try:
        import pynvml
    except ImportError as exc:
        return None, f"nvidia-ml-py not importable: {exc}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return None, f"NVML unavailable: {exc}"
    return pynvml, ""


def nvml_problem() -> str | None:
    """Why NVML can't be used here (one line), or None when it can."""
    nvml, why = _nvml()
    if nvml is None:
        return why
    nvml.nvmlShutdown()
    return None


def visible_gpu_count() -> int:
    """GPUs this process could use, told without torch: NVML's count, or none where
    CUDA_VISIBLE_DEVICES hides them all ("" or "-1"); 0 where NVML can't be used. A guess at what
    torch.cuda.is_available() will say, for work started before torch is imported."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return 0
    nvml, _ = _nvml()
    if nvml is None:
        return 0
    try:
        return int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError:
        return 0
    finally:
        nvml.nvmlShutdown()


def _read(nvml: Any, index: int) -> tuple[dict[str, Any], list[str]]:
    notes: list[str] = []

    def query(what: str, call: Callable[[], Any]) -> Any | None:
        # A query this part doesn't support (power on some boards) becomes a note, not a failure.
        try:
            return call()
        except nvml.NVMLError as exc:
            notes.append(f"NVML {what}: {exc}")
            return None

    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or (
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    name = query("name", lambda: nvml.nvmlDeviceGetName(handle))
    clock = query("SM clock", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    temp = query("temperature", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    power_mw = query("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
    mask = query("throttle reasons", lambda: reasons_fn(handle))
    memory = query("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    util = query("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    state = {
        "index": index,
        "name": name.decode() if isinstance(name, bytes) else name,
        "sm_clock_mhz": clock,
        "temperature_c": temp,
        "power_w": None if power_mw is None else power_mw / _MILLIWATTS_PER_WATT,
        "throttle_reasons": [] if mask is None else decode_throttle_reasons(mask),
        "memory_used_mib": None if memory is None else memory.used / _MIB,
        "utilization_pct": None if util is None else util.gpu,
    }
    return state, notes


def read_state(index: int) -> dict[str, Any] | None:
    """One reading of GPU `index` (NVML index), or None when NVML or the device is unavailable.

    Keys: index, name, sm_clock_mhz, temperature_c, power_w, throttle_reasons (names),
    memory_used_mib, utilization_pct, notes. A query the part doesn't support reads None.
    """
    nvml, _ = _nvml()
    if nvml is None:
        return None
    try:
        state, notes = _read(nvml, index)
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()
    state["notes"] = notes
    return state


def match_uuid(torch_uuid: str, nvml_uuids: list[str]) -> int | None:
    """Position of `torch_uuid` in `nvml_uuids`; NVML prefixes 'GPU-', torch doesn't."""
    wanted = torch_uuid.lower().removeprefix("gpu-")
    for position, uuid in enumerate(nvml_uuids):
        if uuid.lower().removeprefix("gpu-") == wanted:
            return position
    return None


def nvml_index_for_cuda_device(device: int = 0) -> int | None:
    """NVML index of torch's cuda:`device` (they differ under CUDA_VISIBLE_DEVICES), or None."""
    import torch

    if not torch.cuda.is_available():
        return None
    torch_uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)  # torch >= 2.1
    if torch_uuid is None:
        return None
    nvml, _ = _nvml()
    if nvml is None:
        return None
    try:
        count = nvml.nvmlDeviceGetCount()
        uuids = [nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    except nvml.NVMLError:
        return None
    finally:
        nvml.nvmlShutdown()
    return match_uuid(str(torch_uuid), [u.decode() if isinstance(u, bytes) else u for u in uuids])


# --------------------------------------------------------------------------- around a measurement


def fill_state(state: GpuState, reading: dict[str, Any]) -> None:
    """Append one reading (from `read_state`) to `state`; reasons seen at any reading accumulate."""
    state.index = reading["index"]
    state.name = reading["name"] or state.name
    if reading["sm_clock_mhz"] is not None:
        state.sm_clock_mhz.append(int(reading["sm_clock_mhz"]))
    if reading["temperature_c"] is not None:
        state.temperature_c.append(int(reading["temperature_c"]))
    if reading["power_w"] is not None:
        state.power_w.append(float(reading["power_w"]))
    for reason in reading["throttle_reasons"]:
        if reason not in state.throttle_reasons:
            state.throttle_reasons.append(reason)
    state.throttled = is_throttled(state.throttle_reasons)
    for note in reading.get("notes", []):
        if note not in state.notes:
            state.notes.append(note)


@contextlib.contextmanager
def measure_around(
    index: int, read: Callable[[int], dict[str, Any] | None] = read_state
) -> Iterator[GpuState]:
    """Read GPU `index` before and after the block; the yielded state is filled on exit.

    `throttled` is True when a thermal or power reason was active at either reading. Without
    NVML the state stays empty with a note. Throttling between the two readings is not seen:
    for long measurements, read more often with `read_state`. `read` is for tests.
    """
    state = GpuState(index=index)
    before = read(index)
    try:
        yield state
    finally:
        after = read(index)
        readings = [r for r in (before, after) if r is not None]
        if not readings:
            why = nvml_problem() or f"no device with NVML index {index}"
            state.notes.append(f"no NVML reading of GPU {index}: {why}")
        for reading in readings:
            fill_state(state, reading)
