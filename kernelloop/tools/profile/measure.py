"""What the trusted job times and counts: the baselines (eager, torch.compile, a problem's own)
and the roofline inputs of the reference. Raw data only (lists of ms, counts); the parent turns
it into statistics and a verdict. The candidate is timed by its own child (tools/verify/harness.py),
driven from the parent (tools/verify/timing_driver.py).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch

from kernelloop.tools.profile import gpu, roofline, timing

# Names of timed callables. "candidate_again" is the same model timed as a second entry so
# the noise floor comes from the same rounds as the speedups.
CANDIDATE, AGAIN, EAGER, COMPILE, AUTOTUNE = "candidate", "candidate_again", "eager", "compile", "compile_max_autotune"


def device_sets(input_sets: list[list], device: str) -> list[list]:
    """Device copies of input sets."""
    return [[v.to(device) if isinstance(v, torch.Tensor) else v for v in inputs] for inputs in input_sets]


class Caller:
    """A timed callable: `caller(i)` runs `fn` on input set i of `sets` (the rounds), `caller.on(inputs)`
    on any inputs (a back-to-back window's sets)."""

    def __init__(self, fn: Callable, sets: list[list]):
        self.fn, self.sets = fn, sets

    def __call__(self, i: int) -> object:
        return self.fn(*self.sets[i])

    def on(self, inputs: list) -> object:
        return self.fn(*inputs)


def _caller(fn: Callable, sets: list[list]) -> Caller:
    return Caller(fn, sets)


def baseline_callables(problem, device: str, sets: list[list], init_seed: int, full: bool,
                       with_compile: bool = True) -> tuple[dict, dict, Any]:
    """eager, torch.compile (and max-autotune when `full`; neither when not `compiled`: their times
    are kept by the parent), and the problem's own baselines.

    Returns (callables by name, compile seconds by name, the eager module)."""
    torch.manual_seed(init_seed)
    eager = problem.Model(*problem.get_init_inputs()).to(device).eval()
    fns: dict[str, Callable[[int], object]] = {EAGER: _caller(eager, sets)}
    compile_s: dict[str, float] = {}
    modes = {COMPILE: None, **({AUTOTUNE: "max-autotune-no-cudagraphs"} if full else {})} if with_compile else {}
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


def roofline_of(eager, sets: list[list]) -> dict[str, Any]:
    """The reference's FLOPs (torch's formulas) and bytes, and the two floors on this GPU.

    floor_ms: max(compute_floor_ms, memory_floor_ms), the least the
    reference's own work takes; a kernel that exploits structure may legitimately beat it.
    output_floor_ms: output_bytes over the bandwidth, the least any correct kernel takes.
    """
    flops = roofline.count_flops(eager, *sets[0])
    with torch.no_grad():
        outputs = eager(*sets[0])
    tensors = [t for t in sets[0] if isinstance(t, torch.Tensor)]
    dtype = next((t.dtype for t in tensors if t.is_floating_point()), torch.float32)
    peaks = roofline.peaks_for(torch.cuda.get_device_name())
    key = roofline.peak_key_for(dtype)
    bytes_moved = roofline.count_bytes(sets[0], outputs)
    output_bytes = roofline.count_output_bytes(outputs)
    compute_ms, memory_ms = roofline.floor_parts_ms(flops, bytes_moved, peaks, key)
    return {"flops": flops, "bytes": bytes_moved, "output_bytes": output_bytes, "peak_key": key,
            "peaks": peaks.name, "compute_floor_ms": compute_ms, "memory_floor_ms": memory_ms,
            "floor_ms": max(compute_ms, memory_ms),
            "output_floor_ms": roofline.output_floor_ms(output_bytes, peaks),
            # SMs to fill: the critic's grid-too-small fact (None where no GPU is visible, as in tests)
            "sm_count": torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
            if torch.cuda.is_available() else None}


def measure_baselines(problem, input_sets: list[list], device: str, job: dict) -> dict[str, Any]:
    """Baselines alone (bench --baselines-only): eager, compile, and the problem's own."""
    sets = device_sets(input_sets, device)
    fns, compile_s, eager = baseline_callables(problem, device, sets, job["init_seed"], job.get("full_baselines", False))
    nvml_index = gpu.nvml_index_for_cuda_device(0)
    with gpu.measure_around(nvml_index if nvml_index is not None else 0) as state:
        samples = timing.time_interleaved(fns, len(sets), candidate=EAGER)
    return {"samples_ms": samples, "compile_s": compile_s, "roofline": roofline_of(eager, sets),
            "gpu": state.model_dump(), "device_name": torch.cuda.get_device_name()}
