"""Where device time goes: torch.profiler kernel tables and own-vs-library shares.

Two jobs, each with a pure, CPU-testable core:
- `kernel_table` runs a callable under torch.profiler; `aggregate_kernels` folds the events.
- `classify_kernels` splits device time between the candidate's own kernels and library
  kernels (cuBLAS, cuDNN, at::native, torch.compile's Triton, flash attention), for the
  cross-check that the candidate does the work itself.
`profile_of` turns a Measurement into the Profile record the critic reads (results.py): the
kernel table with shares, the roofline position, the host/device split, NVML's readings and the
own kernels' launch facts; Nsight Compute's facts (ncu.py) join it where ncu ran. Times are ms
unless a name says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelloop.records import HostDevice, KernelShare, LaunchFacts, Measurement, Profile, Record, RooflineFacts
from kernelloop.tools.profile import roofline

_US_PER_MS = 1000.0
TOP_KERNELS = 5  # rows the critic sees; the rest is summed into the shares


class ProfilerError(ValueError):
    """Bad input to the profiler tools. The message is one line."""


# --------------------------------------------------------------------------- torch.profiler


@dataclass
class KernelRow(Record):
    """One kernel (GPU) or op (CPU fallback), summed over all profiled iterations."""

    name: str
    calls: int
    total_ms: float  # device time over all calls (self CPU time on the CPU fallback)
    mean_ms: float  # total_ms / calls
    percent: float  # share of the table's total time, 0-100
    device: str  # 'cuda' for device kernels, 'cpu' for the CPU-op fallback


def aggregate_kernels(events: Iterable[tuple[str, float]], device: str) -> list[KernelRow]:
    """Fold (name, duration_ms) events into rows by name, largest total first."""
    calls: dict[str, int] = {}
    totals_ms: dict[str, float] = {}
    for name, duration_ms in events:
        if duration_ms < 0:
            raise ProfilerError(f"negative duration {duration_ms} ms for {name!r}")
        calls[name] = calls.get(name, 0) + 1
        totals_ms[name] = totals_ms.get(name, 0.0) + duration_ms
    grand_total_ms = sum(totals_ms.values())
    rows = [
        KernelRow(
            name=name,
            calls=calls[name],
            total_ms=total_ms,
            mean_ms=total_ms / calls[name],
            percent=100.0 * total_ms / grand_total_ms if grand_total_ms else 0.0,
            device=device,
        )
        for name, total_ms in totals_ms.items()
    ]
    return sorted(rows, key=lambda row: (-row.total_ms, row.name))


def kernel_table(fn: Callable[[], object], *, warmup: int = 3, iters: int = 10) -> list[KernelRow]:
    """Profile `iters` calls of fn (after `warmup` unprofiled ones) and tabulate the kernels.

    On CUDA: every device activity (kernels, memcpy, memset) with its device time. Without
    CUDA: CPU ops with their self time (ops inside ops are not counted twice).
    """
    if warmup < 0 or iters < 1:
        raise ProfilerError(f"need warmup >= 0 and iters >= 1, got {warmup} and {iters}")
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    on_cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    if on_cuda:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(iters):
            fn()
        if on_cuda:
            torch.cuda.synchronize()
    if on_cuda:
        events = [
            (evt.name, evt.time_range.elapsed_us() / _US_PER_MS)  # a device event's own span
            for evt in prof.events()
            if evt.device_type == DeviceType.CUDA
        ]
        return aggregate_kernels(events, "cuda")
    events = [
        (evt.name, evt.self_cpu_time_total / _US_PER_MS)
        for evt in prof.events()
        if evt.device_type == DeviceType.CPU and evt.self_cpu_time_total > 0
    ]
    return aggregate_kernels(events, "cpu")


# Library kernels, by name, first match wins (own kernels are matched before these). Patterns
# are searched in the lowercased name as torch.profiler reports it on CUDA (demangled, with
# "void " and the signature). They are anchored on library prefixes and namespaces, not on
# words like "gemm", so an unnamed own kernel called my_gemm lands in "other", not "cublas".
LIBRARY_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("aten (cpu)", re.compile(r"^aten::")),  # CPU fallback rows; CUDA kernel names never start so
    ("memcpy/memset", re.compile(r"^(memcpy|memset)\b")),
    # torch.compile (Inductor) names its Triton kernels triton_{poi,red,per,tem,for}_fused_...
    ("torch.compile triton", re.compile(r"^triton_(poi|red|per|tem|for)_")),
    # SDPA backends: flash (pytorch_flash::), mem-efficient (fmha_cutlass*), cuDNN (*native_sdpa*)
    ("flash attention", re.compile(r"pytorch_flash::|\bflash::|fmha_cutlass|memeffattention|native_sdpa")),
    ("cudnn", re.compile(r"cudnn|implicit_convolve|winograd|xmma_(fprop|dgrad|wgrad)|fft2d_|conv2d_grouped_direct")),
    # cuBLAS/cuBLASLt: sm90_xmma_gemm_*, nvjet_* (Hopper), ampere_sgemm_*, gemv2T_kernel, cutlass::Kernel
    (
        "cublas",
        re.compile(
            r"(^|void )(sm\d+_xmma_|nvjet_|(ampere|volta|turing|maxwell|hopper|sm\d+)_\w*gemm"
            r"|gemv2|gemvx|gemmk1_|gemmsn_)|cutlass|cublas|splitkreduce"
        ),
    ),
    (
        "at::native",
        re.compile(r"at::native|at_cuda_detail|\bcub::|\(anonymous namespace\)::softmax_warp_"),
    ),
)


def _own_pattern(names: Sequence[str]) -> re.Pattern[str] | None:
    """Whole-identifier match of any own name; Triton may append a signature suffix like _0d1d2de."""
    cleaned = [n.strip() for n in names if n.strip()]
    if not cleaned:
        return None
    alternatives = "|".join(re.escape(n) for n in sorted(cleaned, key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{alternatives})(?:_\d[0-9a-z]*)?(?![A-Za-z0-9_])")


def kernel_kind(name: str, own: re.Pattern[str] | None) -> str:
    """'own', 'library:<category>', or 'other' for one kernel name."""
    if own is not None and own.search(name):
        return "own"
    lowered = name.lower()
    for category, pattern in LIBRARY_PATTERNS:
        if pattern.search(lowered):
            return f"library:{category}"
    return "other"


def classify_kernels(rows: Sequence[KernelRow], own_kernel_names: Sequence[str]) -> dict[str, Any]:
    """Split device time between the candidate's own kernels, library kernels and the rest.

    `own_kernel_names`: the candidate's kernel function names (its @triton.jit functions,
    its CUDA __global__ functions). Returns a dict with:
      total_ms, own_ms, library_ms, other_ms: time sums;
      own_share, library_share, other_share: fractions of total_ms (0 when nothing ran);
      own_kernels, other_kernels: names; library_kernels: {name: category};
      library_ms_by_category: {category: ms}.
    'other' is device work that is neither: often an own kernel under a name that wasn't
    passed (templated CUDA), sometimes a library not in LIBRARY_PATTERNS.
    """
    own = _own_pattern(own_kernel_names)
    result: dict[str, Any] = {
        "total_ms": 0.0,
        "own_ms": 0.0,
        "library_ms": 0.0,
        "other_ms": 0.0,
        "own_kernels": [],
        "library_kernels": {},
        "other_kernels": [],
        "library_ms_by_category": {},
    }
    for row in rows:
        kind = kernel_kind(row.name, own)
        result["total_ms"] += row.total_ms
        if kind == "own":
            result["own_ms"] += row.total_ms
            result["own_kernels"].append(row.name)
        elif kind == "other":
            result["other_ms"] += row.total_ms
            result["other_kernels"].append(row.name)
        else:
            category = kind.removeprefix("library:")
            result["library_ms"] += row.total_ms
            result["library_kernels"][row.name] = category
            by_category = result["library_ms_by_category"]
            by_category[category] = by_category.get(category, 0.0) + row.total_ms
    total_ms = result["total_ms"]
    for part in ("own", "library", "other"):
        result[f"{part}_share"] = result[f"{part}_ms"] / total_ms if total_ms else 0.0
    return result


# --------------------------------------------------------------------------- the critic's profile

PROFILE_ITERS = 10  # kernel_table's default iterations: totals over these many calls


def claimed_rows(kernels: list[dict[str, Any]]) -> list[KernelRow]:
    """The candidate's kernel table (a claim) as rows; a row that doesn't fit the record is dropped."""
    rows = []
    for item in kernels:
        try:
            row = KernelRow.model_validate(item)
        except (TypeError, ValueError):
            continue
        numbers = (row.total_ms, row.mean_ms, row.percent, row.calls)
        if isinstance(row.name, str) and all(isinstance(v, (int, float)) and 0 <= v < 1e12 for v in numbers):
            rows.append(row)
    return rows


def _launches(raw: list[dict[str, Any]]) -> list[LaunchFacts]:
    facts = []
    for item in raw:
        try:
            launch = LaunchFacts.model_validate(item)
        except (TypeError, ValueError):
            continue
        ints = [launch.num_warps, launch.registers, launch.spills, launch.shared_bytes, *launch.grid]
        if isinstance(launch.kernel, str) and all(v is None or (isinstance(v, int) and 0 <= v < 2**40) for v in ints):
            facts.append(launch)
    return facts


def roofline_facts(roof: dict[str, Any], measured_ms: float, device_name: str | None) -> RooflineFacts | None:
    """Where `measured_ms` sits against the reference's floors (the trusted job's `roof`) on this GPU."""
    needed = ("flops", "bytes", "floor_ms", "compute_floor_ms", "memory_floor_ms", "peak_key")
    if not measured_ms > 0 or any(not isinstance(roof.get(k), (int, float, str)) for k in needed):
        return None
    peaks = roofline.peaks_for(device_name or str(roof.get("peaks", "")))
    flops, moved = float(roof["flops"]), float(roof["bytes"])
    achieved_gb_per_s = moved / (measured_ms * 1e6)
    achieved_tflops = flops / (measured_ms * 1e9)
    try:
        peak_tflops = peaks.tflops(str(roof["peak_key"]))
    except roofline.RooflineError:
        peak_tflops = peaks.fp32_tflops
    return RooflineFacts(
        peaks=str(roof.get("peaks", peaks.name)), peak_key=str(roof["peak_key"]), flops=flops, bytes=moved,
        floor_ms=float(roof["floor_ms"]), compute_floor_ms=float(roof["compute_floor_ms"]),
        memory_floor_ms=float(roof["memory_floor_ms"]),
        bound="compute" if roof["compute_floor_ms"] > roof["memory_floor_ms"] else "memory",
        measured_ms=measured_ms, percent_of_limit=roofline.roofline_position(measured_ms, float(roof["floor_ms"])),
        achieved_gb_per_s=achieved_gb_per_s, bandwidth_pct=100.0 * achieved_gb_per_s / peaks.memory_gb_per_s,
        achieved_tflops=achieved_tflops, flops_pct=100.0 * achieved_tflops / peak_tflops,
        sm_count=roof["sm_count"] if isinstance(roof.get("sm_count"), int) else None)


def profile_of(measurement: Measurement, event_ms: float, measured_ms: float, speed_source: str) -> Profile:
    """The critic's profile of one timed candidate. `event_ms`: its event median (a claim);
    `measured_ms`: the time its speedup stands on (the events', or the parent clock's)."""
    rows = claimed_rows(measurement.kernels)
    launches = _launches(measurement.launches)
    own_names = [launch.kernel for launch in launches] + [
        name for name in measurement.kernel_split.get("own_kernels", []) if isinstance(name, str)]
    split = classify_kernels(rows, own_names)
    own = _own_pattern(own_names)
    total = split["total_ms"]
    device_ms = total / PROFILE_ITERS if total else None
    host_ms = measurement.host_ms_per_call.get("candidate")
    return Profile(
        kernels=[KernelShare(name=row.name, kind=kernel_kind(row.name, own), calls=row.calls, mean_ms=row.mean_ms,
                             share=row.total_ms / total if total else 0.0) for row in rows],
        own_share=split["own_share"], library_share=split["library_share"], other_share=split["other_share"],
        library_kernels=sorted(split["library_kernels"]), device_ms_total=total,
        roofline=roofline_facts(measurement.roofline, measured_ms, measurement.device_name),
        host_device=HostDevice(event_ms=event_ms, device_ms_per_call=device_ms, host_ms_per_call=host_ms,
                               host_share=max(0.0, 1.0 - device_ms / host_ms) if device_ms and host_ms else None,
                               speed_source=speed_source),
        gpu=measurement.gpu, launches=launches, device_name=measurement.device_name,
        ncu_note="Nsight Compute: not run for this candidate (it runs on a round's best correct candidate, "
                 "within 10% of the run's wall clock)")
