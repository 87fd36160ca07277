"""Output comparison: dtype-aware tolerance plus relative error, one function for every caller.

A candidate output passes when, for every output tensor,
  * shape and dtype match the reference,
  * no NaN or Inf appears where the reference has none (unwritten, poisoned memory shows as NaN),
  * every element satisfies |out - ref| <= atol + rtol * |ref|, and
  * ||out - ref|| / ||ref|| <= rel (so a near-zero reference can't be matched by zeros).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# (atol, rtol, rel) per dtype. Elementwise bounds follow KernelBench's 1e-2 for low precision;
# the relative-norm bound is what keeps them honest (tf32 matmuls land near 3e-4, bf16 near 4e-3).
DEFAULT_TOLERANCE: dict[str, dict[str, float]] = {
    "float64": {"atol": 1e-6, "rtol": 1e-6, "rel": 1e-7},
    "float32": {"atol": 1e-2, "rtol": 1e-2, "rel": 1e-3},
    "float16": {"atol": 1e-2, "rtol": 1e-2, "rel": 5e-3},
    "bfloat16": {"atol": 2e-2, "rtol": 2e-2, "rel": 1e-2},
}
# Integer and bool outputs must match exactly.
EXACT = {"atol": 0.0, "rtol": 0.0, "rel": 0.0}


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_err: float = 0.0
    rel_err: float = 0.0


def tolerance_for(dtype: torch.dtype, overrides: dict | None = None) -> dict[str, float]:
    name = str(dtype).removeprefix("torch.")
    base = dict(DEFAULT_TOLERANCE.get(name, EXACT if not dtype.is_floating_point else DEFAULT_TOLERANCE["float32"]))
    base.update((overrides or {}).get(name, {}))
    return base


def compare_one(out: torch.Tensor, ref: torch.Tensor, index: int, overrides: dict | None = None,
                device: torch.device | str | None = None) -> Comparison:
    """Judge one output. The arithmetic runs on `device` (default: where the reference lives), so a
    trusted process holding the reference on a GPU compares there, whatever device `out` is on."""
    where = f"output {index}"
    if type(out) is not torch.Tensor:
        return Comparison(False, f"tensor subclass: {where} is a {type(out).__name__}, not a plain torch.Tensor")
    if out.shape != ref.shape:
        return Comparison(False, f"shape: {where} is {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype: {where} is {out.dtype}, expected {ref.dtype}")
    if out.numel() == 0:
        return Comparison(True)
    tol = tolerance_for(ref.dtype, overrides)
    device = torch.device(device) if device is not None else ref.device
    stats = _ChunkStats(tol["atol"], tol["rtol"], device)
    # In chunks: a few MB of temporaries reused, instead of several output-sized ones (page faults
    # dominated the parent's compare of large outputs). A GPU takes larger chunks: fewer syncs.
    chunk = CHUNK_ELEMENTS if device.type == "cpu" else GPU_CHUNK_ELEMENTS
    flat_out, flat_ref = out.detach().reshape(-1), ref.detach().reshape(-1)
    for start in range(0, flat_out.numel(), chunk):
        stats.add(flat_out[start:start + chunk], flat_ref[start:start + chunk], start)
    if stats.bad_values:
        return Comparison(False, f"nan: {where} has {stats.bad_values} NaN/Inf values where the reference is "
                                 "finite (unwritten or overflowing elements)", math.inf, math.inf)
    diff_norm, ref_norm = math.sqrt(stats.diff_sq), math.sqrt(stats.ref_sq)
    rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    if not stats.elementwise_ok or rel > tol["rel"]:
        worst = stats.worst_index
        return Comparison(
            False,
            f"mismatch: {where} max_abs_err={stats.max_abs:.3g} rel_err={rel:.3g} "
            f"(allowed atol={tol['atol']:g} rtol={tol['rtol']:g} rel={tol['rel']:g}); "
            f"worst at flat index {worst}: got {float(flat_out[worst]):.6g}, expected {float(flat_ref[worst]):.6g}",
            stats.max_abs, rel,
        )
    return Comparison(True, "", stats.max_abs, rel)


CHUNK_ELEMENTS = 1 << 20
GPU_CHUNK_ELEMENTS = 1 << 25


class _ChunkStats:
    """Running max error, squared norms and elementwise verdict over chunks of one output.
    Positions where the reference itself is NaN/Inf are not judged."""

    def __init__(self, atol: float, rtol: float, device: torch.device):
        self.atol, self.rtol, self.device = atol, rtol, device
        self.max_abs = self.diff_sq = self.ref_sq = 0.0
        self.worst_index, self.bad_values, self.elementwise_ok = 0, 0, True

    def add(self, out: torch.Tensor, ref: torch.Tensor, offset: int) -> None:
        # float32 holds the error of any lower precision; float64 and integers are judged in
        # float64 (an int64 past 2**24 is not exact in float32).
        low = ref.is_floating_point() and ref.element_size() <= 4
        work = torch.float32 if low else torch.float64
        out, ref = out.to(self.device, work), ref.to(self.device, work)
        diff = torch.sub(out, ref).abs_()
        # ref may be the caller's tensor (no copy when device and dtype match): never in place on it
        within = diff <= ref.abs().mul_(self.rtol).add_(self.atol)  # False wherever diff is NaN
        if not bool(within.all()):
            # The rare path: tell unwritten (NaN/Inf) outputs from plain errors, and leave out
            # positions where the reference itself is not finite.
            ref_finite, out_finite = torch.isfinite(ref), torch.isfinite(out)
            self.bad_values += int((ref_finite & ~out_finite).sum())
            judged = ref_finite & out_finite
            self.elementwise_ok = self.elementwise_ok and bool((within | ~judged).all())
            diff = diff.masked_fill_(~judged, 0.0)
            ref = ref.masked_fill(~ref_finite, 0.0)
        chunk_max = float(diff.max())
        if chunk_max > self.max_abs or offset == 0:
            self.max_abs, self.worst_index = chunk_max, offset + int(diff.argmax())
        self.diff_sq += _norm(diff) ** 2
        self.ref_sq += _norm(ref) ** 2


def _norm(values: torch.Tensor) -> float:
    """L2 norm in the values' own precision, again in float64 where that overflowed (|x| > ~1e19 in
    float32); the values here are finite, so inf can only mean overflow."""
    norm = float(torch.linalg.vector_norm(values))
    return norm if math.isfinite(norm) else float(torch.linalg.vector_norm(values, dtype=torch.float64))


def compare_outputs(outs: list, refs: list, overrides: dict | None = None,
                    device: torch.device | str | None = None) -> Comparison:
    """Compare a forward's outputs (flattened to a list) with the reference's; the worst error wins.
    `device`: where the arithmetic runs (default: where each reference lives)."""
    if len(outs) != len(refs):
        return Comparison(False, f"shape: the candidate returned {len(outs)} outputs, the reference {len(refs)}")
    worst = Comparison(True)
    for index, (out, ref) in enumerate(zip(outs, refs)):
        result = compare_one(out, ref, index, overrides, device)
        if not result.ok:
            return result
        worst = Comparison(True, "", max(worst.max_abs_err, result.max_abs_err), max(worst.rel_err, result.rel_err))
    return worst


def flatten_outputs(result) -> list:
    """A forward may return a tensor or a (nested) tuple/list of them; non-tensors are kept for the type check."""
    if isinstance(result, (tuple, list)):
        return [item for part in result for item in flatten_outputs(part)]
    return [result]
