"""GPU measurement inside the verifier's child: timings, profile, roofline inputs, NVML state.

Runs only after the candidate's outputs passed the in-child gate, on CUDA. Returns raw data
(lists of ms, kernel rows, counts); the parent turns it into statistics and a verdict, so
nothing here decides anything.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelloop.tools.profile import gpu, profiler, roofline, timing
from kernelloop.tools.profile.stopwatch import Stopwatch

# Names of timed callables. "candidate_again" is the same model timed as a second entry so
# the noise floor comes from the same rounds as the speedups.
CANDIDATE, AGAIN, EAGER, COMPILE, AUTOTUNE = "candidate", "candidate_again", "eager", "compile", "compile_max_autotune"
HOST_CHECK_CALLS = 30


def device_sets(input_sets: list[list], device: str) -> list[list]:
    """Device copies of input sets (the harness keeps the timed ones to reuse after timing)."""
    return [[v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs] for inputs in input_sets]


def _caller(fn: Callable, sets: list[list]) -> Callable[[int], object]:
    return lambda i: fn(*sets[i])


def baseline_callables(problem, device: str, sets: list[list], init_seed: int, full: bool) -> tuple[dict, dict, Any]:
    """eager, torch.compile (and max-autotune when `full`), and the problem's own baselines.

    Returns (callables by name, compile seconds by name, the eager module)."""
    torch.manual_seed(init_seed)
    eager = problem.Model(*problem.get_init_inputs()).to(device).eval()
    fns: dict[str, Callable[[int], object]] = {EAGER: _caller(eager, sets)}
    compile_s: dict[str, float] = {}
    modes = {COMPILE: None, **({AUTOTUNE: "max-autotune-no-cudagraphs"} if full else {})}
    for name, mode in modes.items():
        compiled = torch.compile(copy.deepcopy(eager), mode=mode)
        started = time.perf_counter()
        compiled(*sets[0])  # compile outside the timed rounds; reported separately
        torch.cuda.synchronize()
        compile_s[name] = time.perf_counter() - started
        fns[name] = _caller(compiled, sets)
    if hasattr(problem, "get_baselines"):
        for name, baseline in dict(problem.get_baselines()).items():
            if isinstance(baseline, type):  # an nn.Module class, built like Model
                torch.manual_seed(init_seed)
                baseline = baseline(*problem.get_init_inputs())
            if isinstance(baseline, torch.nn.Module):
                baseline = baseline.to(device).eval()
            started = time.perf_counter()
            baseline(*sets[0])
            torch.cuda.synchronize()
            compile_s[name] = time.perf_counter() - started
            fns[name] = _caller(baseline, sets)
    return fns, compile_s, eager


def _roofline(eager, sets: list[list]) -> dict[str, Any]:
    """FLOPs (torch's formulas on the reference) and the fewest bytes any version must move."""
    flops = roofline.count_flops(eager, *sets[0])
    with torch.no_grad():
        outputs = eager(*sets[0])
    tensors = [t for t in sets[0] if isinstance(t, torch.Tensor)]
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    peaks = roofline.peaks_for(torch.cuda.get_device_name())
    key = roofline.peak_key_for(dtype)
    compute_ms, memory_ms = roofline.floor_parts_ms(flops, roofline.count_bytes(sets[0], outputs), peaks, key)
    return {"flops": flops, "bytes": roofline.count_bytes(sets[0], outputs), "peak_key": key,
            "peaks": peaks.name, "compute_floor_ms": compute_ms, "memory_floor_ms": memory_ms,
            "floor_ms": max(compute_ms, memory_ms)}


def measure(model, problem, sets: list[list], device: str, job: dict) -> dict[str, Any]:
    """Time the candidate interleaved with its baselines on device input `sets`, then profile it once."""
    phases = Stopwatch()  # where timing's wall time goes (throughput, not speed)
    fns, compile_s, eager = baseline_callables(problem, device, sets, job["init_seed"], job.get("full_baselines", False))
    phases.lap("baselines")
    candidate = _caller(model, sets)
    fns = {CANDIDATE: candidate, AGAIN: candidate, **fns}
    nvml_index = gpu.nvml_index_for_cuda_device(0)
    with gpu.measure_around(nvml_index if nvml_index is not None else 0) as state:
        samples = timing.time_interleaved(fns, len(sets), candidate=CANDIDATE)
        phases.lap("rounds")
        host_ms = timing.host_ms_per_call(candidate, len(sets), HOST_CHECK_CALLS)
        eager_host_ms = timing.host_ms_per_call(fns[EAGER], len(sets), HOST_CHECK_CALLS)
    phases.lap("host_check")
    rows = profiler.kernel_table(lambda: model(*sets[0]))
    phases.lap("profile")
    own_names = [name.split(":", 1)[1] for name in job.get("own_kernel_names", [])]
    roof = _roofline(eager, sets)
    phases.lap("roofline")
    return {"samples_ms": samples, "host_ms_per_call": {CANDIDATE: host_ms, EAGER: eager_host_ms},
            "compile_s": compile_s, "kernels": [row.model_dump() for row in rows],
            "kernel_split": profiler.classify_kernels(rows, own_names), "phase_s": phases.laps,
            "roofline": roof, "gpu": state.model_dump(), "device_name": torch.cuda.get_device_name()}


def measure_baselines(problem, input_sets: list[list], device: str, job: dict) -> dict[str, Any]:
    """Baselines alone (bench --baselines-only): eager, compile, and the problem's own."""
    sets = device_sets(input_sets, device)
    fns, compile_s, eager = baseline_callables(problem, device, sets, job["init_seed"], job.get("full_baselines", False))
    nvml_index = gpu.nvml_index_for_cuda_device(0)
    with gpu.measure_around(nvml_index if nvml_index is not None else 0) as state:
        samples = timing.time_interleaved(fns, len(sets), candidate=EAGER)
    return {"samples_ms": samples, "compile_s": compile_s, "roofline": _roofline(eager, sets),
            "gpu": state.model_dump(), "device_name": torch.cuda.get_device_name()}
