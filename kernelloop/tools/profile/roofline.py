"""Roofline floors: how fast the reference's work can run, and how fast any correct kernel can.

Two floors, for two different uses:
  * the reference floor, max(FLOPs / peak, bytes / bandwidth), counts the work the reference
    does: torch's own flop formulas (matmul, conv, attention; elementwise ops count 0, which is
    right: they are bound by bytes) and every input read once, every output written once.
    A correct kernel may do far less than that (a diagonal or triangular operand, a rank-1
    factor, a mask that zeroes most of the output), so a time under it is a reason to look
    closer, never proof of a cheat (`floor_ms`).
  * the output floor, output bytes / bandwidth: whatever the structure, a correct kernel
    writes its output at least once. Nothing from FLOPs or inputs, which a kernel may skip.
    A time under it is impossible for any correct kernel. `output_floor_ms`.
Peaks are datasheet numbers, dense (not the 2:4-sparsity figures the datasheets print first);
measure the real ceilings on the device when a number matters (METHOD.md) and pass your own
DevicePeaks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from kernelloop.records import Record

PEAK_KEYS = ("fp32", "tf32", "bf16", "fp16", "fp8")
_FLOPS_PER_TFLOP_MS = 1e9  # 1 TFLOP/s = 1e12 FLOP per second = 1e9 FLOP per millisecond
_BYTES_PER_GBPS_MS = 1e6  # 1 GB/s = 1e9 bytes per second = 1e6 bytes per millisecond


class RooflineError(ValueError):
    """Bad input to a roofline computation. The message is one line."""


@dataclass
class DevicePeaks(Record):
    """Peak rates of one GPU: dense TFLOP/s per operand type, and memory bandwidth in GB/s."""

    name: str
    fp32_tflops: float  # FP32 on the CUDA cores (no tensor cores)
    tf32_tflops: float | None  # TF32 on the tensor cores, dense; None when the part has none
    bf16_tflops: float | None  # BF16 tensor cores, dense, FP32 accumulate
    fp16_tflops: float | None  # FP16 tensor cores, dense, FP32 accumulate
    fp8_tflops: float | None  # FP8 tensor cores, dense; None before Hopper/Ada
    memory_gb_per_s: float  # device memory bandwidth, 1 GB = 1e9 bytes
    source: str  # which datasheet the numbers come from
    is_default: bool = False  # True when the device was not recognised

    def tflops(self, key: str) -> float:
        """Peak TFLOP/s for one of PEAK_KEYS; a clear error when the part lacks that unit."""
        if key not in PEAK_KEYS:
            raise RooflineError(f"unknown peak {key!r}; expected one of {', '.join(PEAK_KEYS)}")
        value = getattr(self, f"{key}_tflops")
        if value is None:
            raise RooflineError(f"{self.name} has no {key} tensor-core peak")
        return value


# Datasheet numbers, dense. Where a datasheet prints "with sparsity" figures, these are half.
# H100 SXM5 and H200 share the GH100 compute die at the same clocks; they differ in memory.
KNOWN_PEAKS: tuple[tuple[tuple[str, ...], DevicePeaks], ...] = (
    (
        ("h200",),
        DevicePeaks(
            name="H200 SXM",
            fp32_tflops=67.0,
            tf32_tflops=494.7,
            bf16_tflops=989.4,
            fp16_tflops=989.4,
            fp8_tflops=1978.9,
            memory_gb_per_s=4800.0,
            source="NVIDIA H200 Tensor Core GPU datasheet (SXM; sparse figures halved), 4.8 TB/s HBM3e",
        ),
    ),
    (
        ("h100", "pcie"),
        DevicePeaks(
            name="H100 PCIe",
            fp32_tflops=51.0,
            tf32_tflops=378.0,
            bf16_tflops=756.0,
            fp16_tflops=756.0,
            fp8_tflops=1513.0,
            memory_gb_per_s=2000.0,
            source="NVIDIA H100 Tensor Core GPU datasheet (PCIe; sparse figures halved), 2.0 TB/s HBM2e",
        ),
    ),
    (
        ("h100",),
        DevicePeaks(
            name="H100 SXM",
            fp32_tflops=67.0,
            tf32_tflops=494.7,
            bf16_tflops=989.4,
            fp16_tflops=989.4,
            fp8_tflops=1978.9,
            memory_gb_per_s=3350.0,
            source="NVIDIA H100 Tensor Core GPU datasheet (SXM5; sparse figures halved), 3.35 TB/s HBM3",
        ),
    ),
    (
        ("a100", "40gb"),
        DevicePeaks(
            name="A100 40GB",
            fp32_tflops=19.5,
            tf32_tflops=156.0,
            bf16_tflops=312.0,
            fp16_tflops=312.0,
            fp8_tflops=None,
            memory_gb_per_s=1555.0,
            source="NVIDIA A100 Tensor Core GPU datasheet (40GB; sparse figures halved), 1,555 GB/s HBM2",
        ),
    ),
    (
        ("a100",),
        DevicePeaks(
            name="A100 80GB",
            fp32_tflops=19.5,
            tf32_tflops=156.0,
            bf16_tflops=312.0,
            fp16_tflops=312.0,
            fp8_tflops=None,
            memory_gb_per_s=2039.0,
            source="NVIDIA A100 Tensor Core GPU datasheet (80GB SXM; PCIe is 1,935 GB/s), 2,039 GB/s HBM2e",
        ),
    ),
    (
        ("l40s",),
        DevicePeaks(
            name="L40S",
            fp32_tflops=91.6,
            tf32_tflops=183.0,
            bf16_tflops=362.05,
            fp16_tflops=362.05,
            fp8_tflops=733.0,
            memory_gb_per_s=864.0,
            source="NVIDIA L40S datasheet (sparse figures halved), 864 GB/s GDDR6",
        ),
    ),
)

# Unknown device: peaks at or above every part we know of, B200 included (2.25 PF BF16 dense,
# 8 TB/s), so the floor is never too high and an honest kernel is never called "faster than
# possible". The roofline percentage then reads low, and `is_default` says why.
DEFAULT_PEAKS = DevicePeaks(
    name="unknown GPU (generous default)",
    fp32_tflops=100.0,
    tf32_tflops=1200.0,
    bf16_tflops=2500.0,
    fp16_tflops=2500.0,
    fp8_tflops=5000.0,
    memory_gb_per_s=8000.0,
    source="not a datasheet: above every known part so the floor errs low",
    is_default=True,
)


def peaks_for(device_name: str) -> DevicePeaks:
    """Peaks for a device name as torch or NVML report it (e.g. 'NVIDIA H100 80GB HBM3')."""
    lowered = device_name.lower()
    for needles, peaks in KNOWN_PEAKS:
        if all(needle in lowered for needle in needles):
            return peaks
    return DEFAULT_PEAKS


def peak_key_for(dtype: torch.dtype, *, allow_tf32: bool = True) -> str:
    """The PEAK_KEYS entry for an operand dtype.

    float32 maps to tf32 by default because Triton's `tl.dot` and cuBLAS with TF32 enabled
    use the tensor cores; pass allow_tf32=False for code known to stay on the CUDA cores.
    """
    if dtype == torch.float32:
        return "tf32" if allow_tf32 else "fp32"
    table = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    fp8 = {getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)}
    if dtype in table:
        return table[dtype]
    if dtype in fp8:
        return "fp8"
    raise RooflineError(f"no peak for dtype {dtype}; pass one of {', '.join(PEAK_KEYS)} to floor_ms")


def count_flops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> int:
    """FLOPs of one call of fn(*args), by torch's flop formulas (a multiply-add counts 2). Runs fn once."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        fn(*args, **kwargs)
    return int(counter.get_total_flops())


def _tensors(value: Any) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _side_bytes(side: Any) -> int:
    """Bytes of the tensors in one side (inputs or outputs), a tensor object listed twice counted once."""
    total = 0
    seen: set[int] = set()
    for tensor in _tensors(side):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def count_bytes(inputs: Any, outputs: Any) -> int:
    """Bytes the reference moves at the least: each input tensor read once, each output written once.

    Tensors are found recursively in tuples, lists and dict values; anything else (ints,
    floats, None) moves no device bytes. A tensor object listed twice on one side counts once.
    A structured kernel may skip inputs (the zero half of a triangular operand): this is the
    reference's count, not a bound on every correct kernel; `count_output_bytes` is that.
    """
    return _side_bytes(inputs) + _side_bytes(outputs)


def count_output_bytes(outputs: Any) -> int:
    """Bytes every correct kernel must write: each output tensor once (found as in count_bytes)."""
    return _side_bytes(outputs)


def floor_parts_ms(flops: int, bytes_moved: int, peaks: DevicePeaks, peak_key: str) -> tuple[float, float]:
    """(compute_ms, memory_ms): FLOPs over the peak for `peak_key`, bytes over the bandwidth."""
    if flops < 0 or bytes_moved < 0:
        raise RooflineError(f"flops and bytes must be >= 0, got {flops} and {bytes_moved}")
    compute_ms = flops / (peaks.tflops(peak_key) * _FLOPS_PER_TFLOP_MS) if flops else 0.0
    memory_ms = bytes_moved / (peaks.memory_gb_per_s * _BYTES_PER_GBPS_MS)
    return compute_ms, memory_ms


def floor_ms(flops: int, bytes_moved: int, peaks: DevicePeaks, dtype: str) -> float:
    """The roofline floor in ms: max(flops / peak[dtype], bytes / bandwidth). dtype: one of PEAK_KEYS.

    With the reference's FLOPs and bytes this is the reference floor: the least time the
    reference's own work takes, not a bound on a kernel that does less (see output_floor_ms).
    """
    return max(floor_parts_ms(flops, bytes_moved, peaks, dtype))


def output_floor_ms(output_bytes: int, peaks: DevicePeaks) -> float:
    """The least time any correct kernel takes: writing its output once at the memory bandwidth.

    Nothing from FLOPs or input bytes, which a kernel exploiting structure may skip. A time
    under this is not real (within the datasheet bandwidth's accuracy).
    """
    if output_bytes < 0:
        raise RooflineError(f"output bytes must be >= 0, got {output_bytes}")
    return output_bytes / (peaks.memory_gb_per_s * _BYTES_PER_GBPS_MS)


def roofline_position(measured_ms: float, floor_ms: float) -> float:
    """Percent of the roofline limit reached: 100 * floor / measured.

    Against the reference floor, above 100 means the kernel does less work than the reference
    (or the timing is not real); against the output floor, above 100 is impossible.
    """
    if not measured_ms > 0:
        raise RooflineError(f"measured_ms must be > 0, got {measured_ms!r}")
    if floor_ms < 0:
        raise RooflineError(f"floor_ms must be >= 0, got {floor_ms!r}")
    return 100.0 * floor_ms / measured_ms
