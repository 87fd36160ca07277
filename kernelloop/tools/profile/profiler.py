"""Where device time goes: torch.profiler kernel tables and own-vs-library shares.

Two jobs, each with a pure, CPU-testable core:
- `kernel_table` runs a callable under torch.profiler; `aggregate_kernels` folds the events.
- `classify_kernels` splits device time between the candidate's own kernels and library
  kernels (cuBLAS, cuDNN, at::native, torch.compile's Triton, flash attention), for the
  cross-check that the candidate does the work itself.
`summarize_profile` packs them, with the roofline position and an Nsight Compute report
(ncu.py), into a compact dict for the critic agent. Times are ms unless a name says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelloop.results import Record
from kernelloop.tools.profile import roofline
from kernelloop.tools.profile.ncu import NcuReport

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


# --------------------------------------------------------------------------- summary for the critic


def summarize_profile(
    *,
    rows: Sequence[KernelRow] | None = None,
    own_kernel_names: Sequence[str] = (),
    measured_ms: float | None = None,
    flops: int | None = None,
    bytes_moved: int | None = None,
    peaks: roofline.DevicePeaks | None = None,
    peak_key: str | None = None,
    ncu: NcuReport | None = None,
    top_n: int = TOP_KERNELS,
) -> dict[str, Any]:
    """A compact, JSON-ready summary of what is known about one candidate's device time.

    Sections appear only when their inputs are given:
      kernels: the top_n rows, each with its kind (own / library:<category> / other);
      shares: own / library / other fractions of device time, and the library kernels;
      roofline: floor (compute and memory terms), which bound, and percent of the limit
        reached at `measured_ms` (needs flops, bytes_moved, peaks, peak_key);
      ncu: the top_n launches by duration with SOL, DRAM, occupancy, registers, tensor pipe
        and top stall reasons;
      notes: what could not be measured and why.
    """
    summary: dict[str, Any] = {"notes": []}
    if rows is not None:
        own = _own_pattern(own_kernel_names)
        summary["kernels"] = [
            {
                "name": row.name,
                "kind": kernel_kind(row.name, own),
                "percent": row.percent,
                "mean_ms": row.mean_ms,
                "calls": row.calls,
            }
            for row in rows[:top_n]
        ]
        shares = classify_kernels(rows, own_kernel_names)
        summary["shares"] = {
            "own": shares["own_share"],
            "library": shares["library_share"],
            "other": shares["other_share"],
            "library_kernels": sorted(shares["library_kernels"]),
        }
    if None not in (flops, bytes_moved, peaks, peak_key):
        compute_ms, memory_ms = roofline.floor_parts_ms(flops, bytes_moved, peaks, peak_key)
        floor = max(compute_ms, memory_ms)
        section: dict[str, Any] = {
            "flops": flops,
            "bytes": bytes_moved,
            "floor_ms": floor,
            "compute_ms": compute_ms,
            "memory_ms": memory_ms,
            "bound": "compute" if compute_ms > memory_ms else "memory",
            "device": peaks.name,
            "peak": peak_key,
        }
        if peaks.is_default:
            summary["notes"].append(f"device peaks unknown; used {peaks.name}, so percent_of_limit reads low")
        if measured_ms is not None:
            section["measured_ms"] = measured_ms
            section["percent_of_limit"] = roofline.roofline_position(measured_ms, floor)
        summary["roofline"] = section
    elif any(v is not None for v in (flops, bytes_moved)):
        summary["notes"].append("roofline skipped: needs flops, bytes_moved, peaks and peak_key together")
    if ncu is not None:
        launches = sorted(ncu.kernels, key=lambda k: -(k.duration_ms or 0.0))
        summary["ncu"] = [k.brief() for k in launches[:top_n]]
        summary["notes"].extend(ncu.notes)
    return summary
