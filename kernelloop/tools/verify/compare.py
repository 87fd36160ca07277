"""Output comparison: dtype-aware tolerance plus relative error, one function for every caller.

A candidate output passes when, for every output tensor,
  * shape and dtype match the reference,
  * its non-finite values match the reference's in kind and position: NaN where the reference has
    NaN, +inf where +inf, -inf where -inf, finite where finite (unwritten, poisoned memory shows as
    NaN); the checks below then run over the finite positions,
  * every element satisfies |out - ref| <= atol + rtol * |ref|,
  * ||out - ref|| / ||ref|| <= rel (so a near-zero reference can't be matched by zeros),
  * the typical element is right on its own scale: over the significant elements (|ref| above
    FLOOR_FRACTION of the median magnitude), the median of |out - ref| / |ref| is <= median_rel
    (a few huge values dominate ||ref||, and the norm alone would hide an error on all the others),
  * and no one-sided error: over the same elements, the means of (out - ref) / ref (a scale error)
    and of (out - ref) / |ref| (an offset), each element's clipped to +-max(rtol, median_rel), are
    within +-bias plus 3 standard errors (rounding errors average out, a systematic error does not).
Complex outputs are compared as (real, imag) pairs with the tolerance of their real dtype.

A degenerate reference is judged by the elementwise bounds alone: one whose norm is zero, or one the
trusted job found to be its own round-off (every element within atol of zero, and its error against
the same model run in float64 over DEGENERATE_FRACTION of rel: reference_job.roundoff_errors). There
||out - ref|| / ||ref|| measures noise against noise (KernelBench level 2 #41, a mean over a
GroupNorm, is zero up to round-off: a kernel off by 2e-7 "failed" it), and the relative checks
after it mean nothing either. Such a comparison says so (`degenerate`), and so does the verdict:
a kernel returning zeros passes it too, so it is no win.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

import torch

from kernelloop.records import Code

# (atol, rtol, rel) per dtype. Elementwise bounds follow KernelBench's 1e-2 for low precision;
# the relative-norm bound is what keeps them honest (tf32 matmuls land near 3e-4, bf16 near 4e-3).
# Two more keys, overridable like these, default to fractions of the effective `rel` (so a problem
# that tightens rel tightens them too; see tolerance_for):
#   median_rel = rel. With absolute noise (a matmul's error is set by its row and column, not by
#     the element) the median relative error of the significant elements is ~0.85x the
#     norm-relative error, with relative noise ~0.7x: an output that passes `rel` passes this.
#     Medians measured: float32 ops ~1e-7; a tf32 matmul 2.4e-4 (float32's bound 1e-3); bf16 / fp16
#     rounding of an exact result 1.4e-3 / 1.7e-4, at most half an ulp, 3.9e-3 / 4.9e-4 (bounds
#     1e-2 / 5e-3); FlexAttention against the eager bf16 reference: 10-15% of the elements over
#     1e-2. A 0.9% scale error under a few huge values (norm-relative error ~1e-5) has median 9e-3.
#   bias = rel / 2, and 2 x rel (2e-3) for float32. Rounding errors are mostly symmetric: their mean is ~0
#     (measured |mean| <= 2e-4 for FlexAttention in bf16), give or take noise / sqrt(n), allowed as
#     3 standard errors. Not all: on the H100 an honest Triton float32 linear (tf32 dot, which
#     truncates its inputs) averaged -6.65e-4, hence float32's 2e-3. A bf16 kernel that truncates
#     instead of rounding is off by 2.8e-3 on average, inside bf16's 5e-3; a 0.9% scale error on
#     more than a quarter of the elements fails float32, and one on all of them fails bf16, which
#     median_rel = 1e-2 lets through.
DEFAULT_TOLERANCE: dict[str, dict[str, float]] = {
    "float64": {"atol": 1e-6, "rtol": 1e-6, "rel": 1e-7},
    "float32": {"atol": 1e-2, "rtol": 1e-2, "rel": 1e-3},
    "float16": {"atol": 1e-2, "rtol": 1e-2, "rel": 5e-3},
    "bfloat16": {"atol": 2e-2, "rtol": 2e-2, "rel": 1e-2},
}
# The default bias bound as a fraction of rel (above): tf32's truncation needs float32's 2x.
BIAS_FRACTION = {"float32": 2.0}
DEFAULT_BIAS_FRACTION = 0.5
# Integer and bool outputs must match exactly.
EXACT = {"atol": 0.0, "rtol": 0.0, "rel": 0.0, "median_rel": 0.0, "bias": 0.0}
# Relative error means nothing near zero: elements below this fraction of the median magnitude are
# left to the norm. A quarter keeps 87% of a Gaussian output's elements; a lower floor would keep
# elements so small that an honest absolute error becomes a large relative one.
FLOOR_FRACTION = 0.25
SAMPLE_ELEMENTS = 1 << 16  # the median magnitude of a larger reference: from this many random elements
# A reference is its own round-off when its error against float64, relative to its norm, is over
# this fraction of rel: an exact kernel would be off by that much, one with float32 round-off of
# its own (independent of the reference's) by up to about twice as much, and rel must leave room.
DEGENERATE_FRACTION = 0.25

# The tolerance is a choice, and the verdict states it (Verdict.tolerance): ours is the per-dtype
# bounds above; KernelBench judges with torch.allclose at one atol = rtol for every dtype. A mismatch
# that one of theirs would pass says so in its reason (Comparison.would_pass).
OURS = "kernelloop"
OTHER_STANDARDS: dict[str, tuple[str, float]] = {  # name -> (as a reason writes it, atol = rtol)
    "kernelbench": ("KernelBench's current tolerance (atol=rtol=1e-4)", 1e-4),
    "kernelbench_v0": ("KernelBench's v0 tolerance (atol=rtol=1e-2)", 1e-2),
}


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    max_abs_err: float = 0.0
    rel_err: float = 0.0
    bias: float = 0.0  # the larger mean signed relative error (scale or offset) over the significant elements
    code: Code = Code.correct  # which check failed (Code.wrong_type, nonfinite, mismatch, off_on_most, biased)
    output: int = 0  # the output it failed on
    degenerate: tuple[int, ...] = ()  # outputs whose reference is zero or round-off: judged elementwise only
    would_pass: tuple[str, ...] = ()  # a mismatch: the other standards (OTHER_STANDARDS) that pass every output


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tolerance_for(dtype: torch.dtype, overrides: dict | None = None) -> dict[str, float]:
    """The bounds for `dtype`; a complex dtype takes its real dtype's (then its own overrides)."""
    real = dtype.to_real() if dtype.is_complex else dtype
    base = dict(DEFAULT_TOLERANCE.get(_name(real), EXACT if not real.is_floating_point else DEFAULT_TOLERANCE["float32"]))
    for name in dict.fromkeys([_name(real), _name(dtype)]):
        base.update((overrides or {}).get(name, {}))
    base.setdefault("median_rel", base["rel"])
    base.setdefault("bias", base["rel"] * BIAS_FRACTION.get(_name(real), DEFAULT_BIAS_FRACTION))
    return base


def compare_one(out: torch.Tensor, ref: torch.Tensor, index: int, overrides: dict | None = None,
                device: torch.device | str | None = None, round_off: bool = False, where: str = "") -> Comparison:
    """Judge one output. The arithmetic runs on `device` (default: where the reference lives), so a
    trusted process holding the reference on a GPU compares there, whatever device `out` is on.
    `round_off`: the trusted job found this reference to be its own round-off (module docstring).
    `where`: what the reason calls it (default "output <index>")."""
    where = where or f"output {index}"
    if type(out) is not torch.Tensor:
        return Comparison(False, f"tensor subclass: {where} is a {type(out).__name__}, not a plain torch.Tensor",
                          code=Code.wrong_type, output=index)
    if out.layout != torch.strided:  # sparse and the like: the compare below would raise in the trusted process
        return Comparison(False, f"layout: {where} is {out.layout}, expected a dense (strided) tensor",
                          code=Code.wrong_type, output=index)
    if out.shape != ref.shape:
        return Comparison(False, f"shape: {where} is {tuple(out.shape)}, expected {tuple(ref.shape)}",
                          code=Code.wrong_type, output=index)
    if out.dtype != ref.dtype:
        return Comparison(False, f"dtype: {where} is {out.dtype}, expected {ref.dtype}", code=Code.wrong_type,
                          output=index)
    if out.numel() == 0:
        return Comparison(True)
    tol = tolerance_for(ref.dtype, overrides)
    device = torch.device(device) if device is not None else ref.device
    flat_out, flat_ref = out.detach(), ref.detach()
    if ref.is_complex():  # (real, imag) pairs: casting to a real dtype would drop the imaginary part
        flat_out, flat_ref = (torch.view_as_real(t.resolve_conj()) for t in (flat_out, flat_ref))
    flat_out, flat_ref = flat_out.reshape(-1), flat_ref.reshape(-1)

    def at(flat_index: int) -> str:
        if not ref.is_complex():
            return f"flat index {flat_index}"
        return f"flat index {flat_index // 2} ({'imag' if flat_index % 2 else 'real'} part)"

    floor = FLOOR_FRACTION * _median_magnitude(flat_ref, device)
    stats = _ChunkStats(tol, floor, device)
    # In chunks: a few MB of temporaries reused, instead of several output-sized ones (page faults
    # dominated the parent's compare of large outputs). A GPU takes larger chunks: fewer syncs.
    chunk = CHUNK_ELEMENTS if device.type == "cpu" else GPU_CHUNK_ELEMENTS
    for start in range(0, flat_out.numel(), chunk):
        stats.add(flat_out[start:start + chunk], flat_ref[start:start + chunk], start)
    if stats.bad_values:
        first, got, expected = stats.first_bad
        return Comparison(False, f"nan: {where} has {stats.bad_values} values whose NaN/inf does not match the "
                                 f"reference's (unwritten or overflowing elements); first at {at(first)}: "
                                 f"got {got:.6g}, expected {expected:.6g}", math.inf, math.inf,
                          code=Code.nonfinite, output=index)
    diff_norm, ref_norm = stats.diff_norm, stats.ref_norm
    rel = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    # zeros, or round-off (in a floating dtype: an integer output is compared exactly anyway)
    degenerate = stats.relative and (round_off or ref_norm == 0)
    # `not x <= bound` throughout: a NaN statistic fails instead of passing
    if not (stats.elementwise_ok and (degenerate or rel <= tol["rel"])):
        worst = stats.worst_index(flat_out, flat_ref, chunk)
        return Comparison(
            False,
            f"mismatch: {where} max_abs_err={stats.max_abs:.3g} rel_err={rel:.3g} "
            f"(allowed atol={tol['atol']:g} rtol={tol['rtol']:g} rel={tol['rel']:g}); "
            f"worst at {at(worst)}: got {float(flat_out[worst]):.6g}, expected {float(flat_ref[worst]):.6g}",
            stats.max_abs, rel, code=Code.mismatch, output=index,
        )
    if degenerate:
        return Comparison(True, "", stats.max_abs, rel, degenerate=(index,))
    significant = stats.significant
    if significant == 0:  # an exact dtype: the checks above said it all
        return Comparison(True, "", stats.max_abs, rel)
    scale, offset = stats.scale_sum / significant, stats.offset_sum / significant
    bias = max(scale, offset, key=abs)
    if not 2 * stats.beyond_median_rel <= significant:
        typical = _sampled_median_rel_err(flat_out, flat_ref, floor, device)
        return Comparison(
            False,
            f"mismatch: {where} is off on most elements though its norm-relative error {rel:.3g} passes: "
            f"{stats.beyond_median_rel:.0f} of the {significant:.0f} elements with |ref| > {floor:.3g} have a relative "
            f"error above median_rel={tol['median_rel']:g} (at most half may); their median relative error "
            f"is ~{typical:.3g}", stats.max_abs, rel, bias, Code.off_on_most, index)
    # Three standard errors of the mean on top: a few elements' rounding need not average out.
    allowed = tol["bias"] + 3 * math.sqrt(stats.squares) / significant
    for value, kind in ((scale, "(out - ref) / ref, a scale error,"), (offset, "(out - ref) / |ref|, an offset,")):
        if not abs(value) <= allowed:
            return Comparison(
                False,
                f"mismatch: {where} is biased: {kind} averages {value:+.3g} over the {significant:.0f} elements "
                f"with |ref| > {floor:.3g} (allowed +-{allowed:.3g}); rounding errors would average out, "
                f"a systematic error does not", stats.max_abs, rel, value, Code.biased, index)
    return Comparison(True, "", stats.max_abs, rel, bias)


CHUNK_ELEMENTS = 1 << 20
GPU_CHUNK_ELEMENTS = 1 << 25


def _sample(flat: torch.Tensor) -> torch.Tensor:
    """Up to SAMPLE_ELEMENTS elements at random positions, the same positions for the same size.
    Random rather than strided: a stride can fall in step with the rows of a structured output."""
    if flat.numel() <= SAMPLE_ELEMENTS:
        return flat
    generator = torch.Generator().manual_seed(flat.numel())
    return flat[torch.randint(flat.numel(), (SAMPLE_ELEMENTS,), generator=generator).to(flat.device)]


def _median_magnitude(flat_ref: torch.Tensor, device: torch.device) -> float:
    """The reference's typical magnitude: the median |ref| of its finite nonzero elements (exact
    zeros, as from a ReLU, left out, or a mostly-zero output would have no scale)."""
    if not flat_ref.is_floating_point():  # integers and bools are compared exactly: no scale needed
        return 0.0
    magnitude = _sample(flat_ref).to(device, torch.float64).abs()
    magnitude = magnitude[torch.isfinite(magnitude) & (magnitude > 0)]
    return float(magnitude.median()) if magnitude.numel() else 0.0


def _sampled_median_rel_err(flat_out: torch.Tensor, flat_ref: torch.Tensor, floor: float, device) -> float:
    """For the reason only: the median relative error of the significant elements in the sample."""
    out, ref = (_sample(t).to(device, torch.float64) for t in (flat_out, flat_ref))
    significant = ref.abs() > floor
    errors = ((out - ref) / ref)[significant].abs()
    return float(errors.median()) if errors.numel() else math.nan


class _ChunkStats:
    """Running max error, norms, elementwise verdict and relative statistics over chunks of one output.
    The common path (all finite, all within) sticks to float arithmetic and reductions into
    buffers reused from chunk to chunk: bool masks, argmax and fresh chunk-sized tensors (page
    faults) cost several times as much on the CPU, so they wait for a failure."""

    def __init__(self, tol: dict[str, float], floor: float, device: torch.device):
        self.atol, self.rtol, self.device = tol["atol"], tol["rtol"], device
        self.median_rel, self.floor = tol["median_rel"], floor
        # no element's vote on the bias weighs more than the elementwise bound
        self.clip = max(self.rtol, self.median_rel)
        # an exact dtype that passes the elementwise check is equal: nothing relative to measure
        self.relative = self.atol > 0 or self.rtol > 0
        self.max_abs = self.diff_norm = self.ref_norm = 0.0
        self.worst_chunk, self.elementwise_ok = 0, True
        self.bad_values, self.first_bad = 0, (0, 0.0, 0.0)
        self.significant = self.beyond_median_rel = 0.0
        self.scale_sum = self.offset_sum = self.squares = 0.0
        self._buffers: dict[str, torch.Tensor] = {}

    def _buffer(self, name: str, numel: int, dtype: torch.dtype) -> torch.Tensor:
        buffer = self._buffers.get(name)
        if buffer is None or buffer.numel() < numel or buffer.dtype != dtype:
            buffer = self._buffers[name] = torch.empty(numel, dtype=dtype, device=self.device)
        return buffer[:numel]

    def _work(self, values: torch.Tensor, name: str, work: torch.dtype) -> torch.Tensor:
        """`values` on the compare device in the working precision: itself where it is already
        (then never written to: it is the caller's), else a copy in a reused buffer."""
        if values.device == self.device and values.dtype == work:
            return values
        return self._buffer(name, values.numel(), work).copy_(values)

    def add(self, out: torch.Tensor, ref: torch.Tensor, offset: int) -> None:
        # float32 holds the error of any lower precision; float64 and integers are judged in
        # float64 (an int64 past 2**24 is not exact in float32).
        work = torch.float32 if ref.is_floating_point() and ref.element_size() <= 4 else torch.float64
        numel = ref.numel()
        out, ref = self._work(out, "out", work), self._work(ref, "ref", work)
        signed = torch.sub(out, ref, out=self._buffer("signed", numel, work))
        diff = torch.abs(signed, out=self._buffer("diff", numel, work))
        magnitude = torch.abs(ref, out=self._buffer("magnitude", numel, work))
        scratch = self._buffer("scratch", numel, work)
        excess = torch.add(diff, magnitude, alpha=-self.rtol, out=scratch)  # within: excess <= atol
        # max(excess) <= atol proves every element within and finite: a NaN or inf in out or ref
        # makes the excess NaN or inf there (inf - inf where ref is inf), and amax propagates NaN.
        if not float(excess.amax()) <= self.atol:
            within = excess <= self.atol
            judged = torch.isfinite(ref) & torch.isfinite(out)
            self.elementwise_ok = self.elementwise_ok and bool((within | ~judged).all())
            if not bool(judged.all()):
                # Non-finite values must match in kind and position: equal (+inf, -inf) or both NaN.
                unmatched = ~judged & (out != ref) & ~(torch.isnan(out) & torch.isnan(ref))
                count = int(unmatched.sum())
                if count and not self.bad_values:
                    first = int(unmatched.to(torch.uint8).argmax())  # argmax: the first True
                    self.first_bad = (offset + first, float(out[first]), float(ref[first]))
                self.bad_values += count
                # what is left, the finite positions, is judged as usual
                for values in (signed, diff, magnitude):
                    values.masked_fill_(~judged, 0.0)
        chunk_max = float(diff.amax())
        if chunk_max > self.max_abs or offset == 0:
            self.max_abs, self.worst_chunk = chunk_max, offset
        self.diff_norm = math.hypot(self.diff_norm, _norm(diff))  # hypot: no overflow in squares
        self.ref_norm = math.hypot(self.ref_norm, _norm(magnitude))
        if self.relative:
            self._relative(signed, diff, ref, magnitude, scratch)

    def _relative(self, signed: torch.Tensor, diff: torch.Tensor, ref: torch.Tensor, magnitude: torch.Tensor,
                  scratch: torch.Tensor) -> None:
        # |ref| where significant, inf elsewhere: dividing by it gives the relative error of the
        # significant elements and 0 for the others, with no mask to apply. Counts stay floats: a
        # NaN here must not raise (as int() would), the verdict's `not x <= bound` fails it.
        scale = torch.threshold(magnitude, self.floor, math.inf, out=scratch)
        self.significant += _sum(magnitude.div_(scale))  # 1 where significant, else 0
        # sign(relative - median_rel): +1 where the relative error is over median_rel, -1 where
        # under (the insignificant elements' 0 too; a tie counts half), so beyond = (sum + n) / 2
        signs = diff.div_(scale).sub_(max(self.median_rel, 1e-30)).sign_()
        self.beyond_median_rel += (_sum(signs) + signs.numel()) / 2
        # Two one-sided errors: an offset, (out - ref) / |ref|, and a scale error, (out - ref) / ref.
        offset = signed.div_(scale).clamp_(-self.clip, self.clip)
        self.offset_sum += float(offset.sum())
        self.squares += float(torch.dot(offset, offset))  # the scale error's too: same magnitudes
        self.scale_sum += float(torch.dot(offset, torch.sign(ref, out=magnitude)))

    def worst_index(self, flat_out: torch.Tensor, flat_ref: torch.Tensor, chunk: int) -> int:
        """The flat index of the largest finite error, in the chunk that holds it (looked up only
        for the reason)."""
        work = torch.float32 if flat_ref.is_floating_point() and flat_ref.element_size() <= 4 else torch.float64
        span = slice(self.worst_chunk, self.worst_chunk + chunk)
        out, ref = flat_out[span].to(self.device, work), flat_ref[span].to(self.device, work)
        diff = torch.sub(out, ref).abs_()
        diff.masked_fill_(~(torch.isfinite(out) & torch.isfinite(ref)), 0.0)
        return self.worst_chunk + int(diff.argmax())


def _sum(units: torch.Tensor) -> float:
    """The sum of a tensor of 0s and +-1s, exact: float32 counts exactly to 2**24, so a GPU chunk
    (more) is summed in parts (a float64 sum would first copy it to float64)."""
    return sum(float(part.sum()) for part in units.split(1 << 24))


def _norm(values: torch.Tensor) -> float:
    """L2 norm in the values' own precision, again in float64 where that overflowed (|x| > ~1e19 in
    float32), scaled by the largest magnitude where even that did (|x| > ~1e154 in float64).
    Finite for finite values: inf or NaN only where a value is."""
    norm = float(torch.linalg.vector_norm(values))
    if math.isfinite(norm):
        return norm
    norm = float(torch.linalg.vector_norm(values, dtype=torch.float64))
    if math.isinf(norm):
        scale = float(values.abs().max())
        if math.isfinite(scale):
            norm = scale * float(torch.linalg.vector_norm(values / scale, dtype=torch.float64))
    return norm


def compare_outputs(outs: list, refs: list, overrides: dict | None = None,
                    device: torch.device | str | None = None, round_off: Collection[int] = ()) -> Comparison:
    """Compare a forward's outputs (flattened to a list) with the reference's; the worst error wins.
    `device`: where the arithmetic runs (default: where each reference lives). `round_off`: the
    outputs whose reference the trusted job found to be round-off (Made.round_off)."""
    if len(outs) != len(refs):
        return Comparison(False, f"shape: the candidate returned {len(outs)} outputs, the reference {len(refs)}",
                          code=Code.wrong_type)
    worst = Comparison(True)
    for index, (out, ref) in enumerate(zip(outs, refs)):
        result = compare_one(out, ref, index, overrides, device, index in round_off)
        if not result.ok:
            return _with_other_standards(result, outs, refs, device)
        worst = Comparison(True, "", max(worst.max_abs_err, result.max_abs_err), max(worst.rel_err, result.rel_err),
                           max(worst.bias, result.bias, key=abs), degenerate=worst.degenerate + result.degenerate)
    return worst


def compare_gradients(outs: list, refs: list, names: list[str], missing: Collection[str] = (),
                      overrides: dict | None = None, device: torch.device | str | None = None) -> Comparison:
    """A BACKWARD problem's gradients of one trial set (the floating inputs', then the parameters',
    in `names`' order) against the reference's, each under its dtype's tolerance; the first wrong
    one decides, its reason naming it ("gradient of input 0", "gradient of fc.weight").
    A gradient the candidate has none of (None: its forward broke autograd, or the input or
    parameter was not used) passes only where the reference's is all zeros; a parameter name in
    `missing` (ModelNew has no parameter of that name) fails. Codes: no_gradient, wrong_gradient."""
    if len(outs) != len(refs) or len(refs) != len(names):
        return Comparison(False, f"backward: the candidate saved {len(outs)} gradients, the reference has {len(refs)}",
                          code=Code.no_gradient)
    worst = Comparison(True)
    for index, (out, ref, name) in enumerate(zip(outs, refs, names)):
        what = f"gradient of {name}"
        if name in missing:
            return Comparison(False, f"backward: {what}: ModelNew has no parameter of that name (its parameters must "
                                     "be named as the reference's, named_parameters())", code=Code.no_gradient,
                              output=index)
        if out is None:
            if ref is None or (isinstance(ref, torch.Tensor) and bool((ref.detach() == 0).all())):
                continue  # neither side depends on it
            return Comparison(False, f"backward: {what}: the candidate computed none (its forward's outputs do not "
                                     "lead back to it through autograd: a kernel needs a torch.autograd.Function with "
                                     "a backward)", code=Code.no_gradient, output=index)
        result = compare_one(out, ref, index, overrides, device, where=what)
        if not result.ok:
            result.reason = f"backward: {result.reason}"
            result.code = Code.wrong_gradient
            return result
        worst = Comparison(True, "", max(worst.max_abs_err, result.max_abs_err), max(worst.rel_err, result.rel_err),
                           max(worst.bias, result.bias, key=abs))
    return worst


def _with_other_standards(failed: Comparison, outs: list, refs: list, device) -> Comparison:
    """A mismatch (values out of our bounds, not a wrong type or a NaN in the wrong place) with the
    other standards that would pass it, named in its reason."""
    if failed.code not in (Code.mismatch, Code.off_on_most, Code.biased):
        return failed
    passing = tuple(name for name, (_, tol) in OTHER_STANDARDS.items()
                    if all(_allclose(out, ref, tol, device) for out, ref in zip(outs, refs)))
    if not passing:
        return failed
    words = " and ".join(OTHER_STANDARDS[name][0] for name in passing)
    failed.reason = f"{failed.reason}; {words} would pass it"
    failed.would_pass = passing
    return failed


def _allclose(out: object, ref: object, tol: float, device) -> bool:
    """KernelBench's check of one output: torch.allclose(out, ref, atol=tol, rtol=tol), in chunks."""
    if not (type(out) is torch.Tensor and isinstance(ref, torch.Tensor) and out.layout == torch.strided
            and out.shape == ref.shape and out.dtype == ref.dtype):
        return False
    device = torch.device(device) if device is not None else ref.device
    flat_out, flat_ref = out.detach().reshape(-1), ref.detach().reshape(-1)
    if ref.is_complex():
        flat_out, flat_ref = (torch.view_as_real(t.resolve_conj()).reshape(-1) for t in (flat_out, flat_ref))
    for start in range(0, flat_ref.numel(), CHUNK_ELEMENTS):
        chunk_out, chunk_ref = (t[start:start + CHUNK_ELEMENTS].to(device) for t in (flat_out, flat_ref))
        if not torch.allclose(chunk_out, chunk_ref, atol=tol, rtol=tol):
            return False
    return True


def degenerate_output_warnings(outputs: list) -> list[str]:
    """A reference whose output is near zero or constant can be matched by a kernel that computes nothing
    (the trusted job warns of its first set's; the parent skips the decoy check on the set it picked)."""
    warnings = []
    for index, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.numel() == 0:
            continue
        # min and max in one pass and no copy: outputs can be several GB, on the GPU.
        low, high = (float(v) for v in torch.aminmax(out.detach().reshape(-1)))
        if max(abs(low), abs(high)) < 1e-6:
            warnings.append(f"output {index} of the reference is near zero (max |x| < 1e-6): zeros would pass elementwise checks")
        elif out.numel() > 1 and low == high:
            warnings.append(f"output {index} of the reference is constant: a kernel could return it without computing")
    return warnings


def tolerance_words(refs: list, overrides: dict | None = None) -> str:
    """Which tolerance decides, for the verdict: ours, per dtype of the reference's outputs."""
    dtypes = dict.fromkeys(ref.dtype for ref in refs if isinstance(ref, torch.Tensor))
    bounds = "; ".join(f"{_name(dtype)}: " + " ".join(f"{key}={value:g}" for key, value in
                                                      tolerance_for(dtype, overrides).items()) for dtype in dtypes)
    return (f"{OURS}: per-dtype elementwise atol/rtol, plus norm-relative (rel), typical-element (median_rel) and "
            f"one-sided (bias) bounds ({bounds or 'no tensor outputs'})")


def flatten_outputs(result) -> list:
    """A forward may return a tensor or a (nested) tuple/list of them; non-tensors are kept for the type check.
    A subclass's items are read as its base type holds them, never through its own `__iter__`: that is
    the candidate's code, and it could compute its outputs when they are read (after a timed call's stop
    event) rather than in the call (tests/fixtures/cheats/review38_lazy_output_list.py). `type()`, not
    isinstance: a class can claim to be a list through `__class__`."""
    kind = type(result)
    if issubclass(kind, tuple):
        return [item for part in tuple.__iter__(result) for item in flatten_outputs(part)]
    if issubclass(kind, list):
        return [item for part in list.__iter__(result) for item in flatten_outputs(part)]
    return [result]


# Where the parent compares: on a GPU worker, the worker's GPU (for up to 200 MB of outputs it
# took 0.02-0.07 s on the H100 against 0.4-0.6 s on its 16 CPU cores: docs/results/verifier_bench).
def compare_device(device: str, gpu_index: int | None, on_gpu: bool = True) -> torch.device:
    """This process's name for the worker's GPU (torch's cuda:`gpu_index`, the one its jobs are
    given: sandbox/runner.child_visible_device), or the CPU when it has none."""
    if not on_gpu or device != "cuda" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda", gpu_index or 0)
