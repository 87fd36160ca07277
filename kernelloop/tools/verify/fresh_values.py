"""Fresh values for every timed call: what keeps a memo from answering while a candidate is timed.

Timing calls a candidate hundreds of times. Were its inputs the same few sets in turn, anything
remembered from the first calls (keyed by an address, a tensor's `_version`, or a fingerprint of
its content) would answer the rest, and a memo gives the right answer, so no check of outputs
would see it. So before every timed call, outside the timed region, its input buffers are written
with values no earlier call had, and the write bumps each buffer's `_version`.

Where the values come from. Every floating element of the buffers gets, at its position, the value
one of two of the verification's trial sets holds there (both made by the problem's own
`get_inputs` from secret seeds), chosen by random bits drawn on the device from a seed the
parent sends with each request (`FreshRequest`: a request's calls are numbered). So each element keeps the
exact distribution the problem's inputs have at that position: zeros (a triangular or diagonal
operand), signs and domains (positive inputs, -1/+1 targets, 0/1 masks held as floats) stay what
they were; a symmetric matrix stays symmetric (the choice is mirrored). The values as a whole are
new: a content fingerprint of any size misses, save with probability 2^-(elements that differ).

What is not kept: constraints across positions (rows that sum to one, sorted values, orthogonal
or positive-definite matrices). The reference is computed on the same values, so the verdict stays
consistent; a kernel that relies on such a constraint for correctness can read wrong on timed
calls. Non-floating inputs (indices, lengths, bool masks) are kept as they are, the first trial
set's: changing an index can change the work, and a valid index set is the problem's to make.
A problem whose inputs are all integers gets no fresh values (its timing reruns values the
candidate has seen; `Pool.fresh` says so).

The trusted job and the candidate's child hold the same trial sets (the child reads them from the
file the trusted job wrote) and run this same code on the same device, so the trusted job makes
the same values for any call from its seed: the parent has it compute the reference's answer for
the calls it picks to check, and no multi-GB file has to move (tools/verify/timed_checks.py).
"""

from __future__ import annotations

import math
import random
import statistics
from typing import TYPE_CHECKING

import torch

from kernelloop.tools.verify._runtime import synchronize

if TYPE_CHECKING:
    from kernelloop.tools.verify.kept_outputs import Kept

MASK_STRIDE = 8  # the random bits of consecutive calls of one request start this many apart


def signature(values: list) -> tuple:
    """What must match for two input sets to mix: tensors' shapes and dtypes, other values themselves."""
    return tuple(("t", tuple(v.shape), str(v.dtype)) if isinstance(v, torch.Tensor) else ("v", repr(v))
                 for v in values)


def pool_indices(sets: list[list], candidates: list[int]) -> list[int]:
    """Which of `candidates` (positions in `sets` of sets the problem's get_inputs made) share the
    first candidate's signature: the sets fresh values are mixed from."""
    if not candidates:
        return []
    first = signature(sets[candidates[0]])
    return [i for i in candidates if signature(sets[i]) == first]


def _symmetric(tensors: list[torch.Tensor]) -> bool:
    """Every set's tensor is a (batch of) square matrices equal to its own transpose."""
    first = tensors[0]
    if first.dim() < 2 or first.shape[-1] != first.shape[-2] or first.shape[-1] < 2:
        return False
    return all(torch.equal(t, t.mT) for t in tensors)


LATENT_RATIO = 10.0  # slice means that differ across sets this many times more than values within a slice spread
LATENT_ROWS, LATENT_ELEMENTS = 4096, 4096  # the sample that test looks at


def _slice_latent(tensors: list[torch.Tensor]) -> bool:
    """Whether each slice along dim 0 (a row, a sample) has a location of its own that the sets drew
    apart (an offset per row, say): the slices' means differ across the sets far more than the
    values within a slice spread. Mixing two sets element by element would then put two locations
    in one slice (a softmax row of offsets 50 apart: a seventh of its exponentials subnormal, a
    different kernel's speed), so such an input is mixed within its own slices instead (`fill`).
    Not where a slice is constant (mixing within it would change nothing) or not finite."""
    first = tensors[0]
    if first.dim() < 2 or first.shape[0] < 2 or first.shape[-1] < 2:
        return False
    # On a sample (at most LATENT_ROWS slices, LATENT_ELEMENTS of each): a few MB however large the input.
    step = max(1, first.shape[0] // LATENT_ROWS)
    rows = [t.detach().reshape(t.shape[0], -1)[::step][:LATENT_ROWS, :LATENT_ELEMENTS].float() for t in tensors]
    within = statistics.fmean(float(r.var(dim=1).mean()) for r in rows)
    means = [r.mean(dim=1) for r in rows]
    between = statistics.fmean(float((means[a] - means[b]).pow(2).mean()) / 2
                               for a in range(len(means)) for b in range(a + 1, len(means)))
    if not (math.isfinite(within) and math.isfinite(between)) or within <= 0:
        return False
    sample = rows[0].view(rows[0].shape[0], -1)
    shifted_differs = float((sample != sample.roll(1, dims=-1)).float().mean())
    return between > LATENT_RATIO * within and shifted_differs >= 0.5


class Pool:
    """The trial sets fresh values are drawn from (two or more sets of one signature, on one device),
    and which of their positions get fresh values."""

    def __init__(self, sets: list[list]):
        if not sets:
            raise ValueError("fresh values need at least one input set")
        self.sets = sets
        first = sets[0]
        self.floats = [i for i, v in enumerate(first)
                       if isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel()]
        self.symmetric = {i: _symmetric([s[i] for s in sets]) for i in self.floats}
        # inputs mixed within their own slices (the set's value there or its last-dim neighbour's)
        self.within = {i: len(sets) >= 2 and not self.symmetric[i] and _slice_latent([s[i] for s in sets])
                       for i in self.floats}
        self.offsets, total = [], 0
        for i in self.floats:
            self.offsets.append(total)
            total += first[i].numel()
        self.elements = total
        self.device = next((v.device for v in first if isinstance(v, torch.Tensor)), torch.device("cpu"))

    @property
    def fresh(self) -> bool:
        """Whether timed calls get values never seen (False: no floating input, or one set only)."""
        return bool(self.floats) and len(self.sets) >= 2

    def buffers(self) -> list:
        """Input buffers to refill: copies of the first set (tensors cloned, other values as they are)."""
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in self.sets[0]]

    def request(self, seed: int, calls: int) -> FreshRequest:
        return FreshRequest(self, seed, calls)


class FreshRequest:
    """The fresh values of one request's `calls` timed calls, from its secret `seed`: the random bits
    of all its calls drawn at once on the device (so filling one call costs one `where` per floating
    input, little host time), and a pair of sets per call."""

    def __init__(self, pool: Pool, seed: int, calls: int):
        if calls < 1:
            raise ValueError(f"a request has at least one call, not {calls}")
        self.pool, self.calls = pool, calls
        if not pool.fresh:
            self.bits = None
            return
        generator = torch.Generator(device=pool.device)
        generator.manual_seed(seed)
        self.bits = torch.empty(pool.elements + calls * MASK_STRIDE, dtype=torch.uint8, device=pool.device)
        self.bits.random_(0, 2, generator=generator)
        rng = random.Random(seed)
        self.pairs = [tuple(rng.sample(range(len(pool.sets)), 2)) for _ in range(calls)]

    def fill(self, buffers: list, call: int) -> None:
        """Write call `call`'s values into `buffers` (in place: same addresses, new `_version`s)."""
        if self.bits is None:
            return
        if not 0 <= call < self.calls:
            raise IndexError(f"call {call} of a request of {self.calls}")
        a, b = self.pairs[call]
        sets, start = self.pool.sets, call * MASK_STRIDE
        for i, offset in zip(self.pool.floats, self.pool.offsets):
            target = buffers[i]
            first = start + offset
            mask = self.bits[first:first + target.numel()].view(torch.bool).view(target.shape)
            if self.pool.symmetric[i]:
                mask = mask.triu() | mask.triu(1).mT
            _mix(mask, sets[a][i], sets[b][i], self.pool.within[i], target)

    def fill_rows(self, stacks: dict[int, torch.Tensor], count: int) -> None:
        """Calls 0..count-1's values at once: row k of `stacks[i]` ((rows, numel) views, one per
        floating input) gets what `fill` writes into input i for call k, bit for bit (the same
        masks and pairs), in a few launches per input for all of them."""
        if self.bits is None:
            return
        if not 0 < count <= self.calls:
            raise IndexError(f"{count} calls of a request of {self.calls}")
        sets, device = self.pool.sets, self.pool.device
        groups: dict[tuple[int, ...], list[int]] = {}
        for call in range(count):
            groups.setdefault(self.pairs[call], []).append(call)
        for i, offset in zip(self.pool.floats, self.pool.offsets):
            shape, rows = sets[0][i].shape, stacks[i]
            numel = rows.shape[1]
            masks = self.bits.as_strided((count, numel), (MASK_STRIDE, 1), offset).view(torch.bool)
            chunk = max(1, WINDOW_CHUNK_BYTES // max(1, numel * rows.element_size()))
            for (a, b), calls in groups.items():
                for start in range(0, len(calls), chunk):
                    index = torch.tensor(calls[start:start + chunk], device=device)
                    mask = masks.index_select(0, index).view(len(index), *shape)
                    if self.pool.symmetric[i]:
                        mask = mask.triu() | mask.triu(1).mT
                    picked = torch.empty(mask.shape, dtype=rows.dtype, device=device)
                    _mix(mask, sets[a][i], sets[b][i], self.pool.within[i], picked)
                    rows.index_copy_(0, index, picked.view(len(index), numel))

    def values(self, call: int) -> list:
        """Call `call`'s input set as new tensors (the trusted job's copy of what the candidate got)."""
        made = self.pool.buffers()
        self.fill(made, call)
        return made



def _mix(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor, within: bool, out: torch.Tensor) -> None:
    """`out` = `a` where `mask`, else `b`; or (`within`) else `a`'s neighbour along the last dim
    (roll(a, 1, -1), read through two views: nothing the size of an input is allocated)."""
    if not within:
        torch.where(mask, a, b, out=out)
        return
    torch.where(mask[..., 1:], a[..., 1:], a[..., :-1], out=out[..., 1:])
    torch.where(mask[..., :1], a[..., :1], a[..., -1:], out=out[..., :1])


WINDOW_BYTES = 2 << 30  # device memory for a back-to-back window's input sets, one per call
WINDOW_ALIGN = 512  # bytes between sets' starts: the caching allocator's alignment (kernels specialise on it)
WINDOW_CHUNK_BYTES = 256 << 20  # a window's sets are written this many output bytes at a time


def set_bytes(pool: Pool) -> int:
    """Bytes of one input set's tensors."""
    return sum(v.numel() * v.element_size() for v in pool.sets[0] if isinstance(v, torch.Tensor))


def window_fit(pool: Pool, most: int) -> int:
    """How many input sets of their own a back-to-back window's calls can have: up to `most`, in
    WINDOW_BYTES (0 where one set is larger: then one buffer is refilled before every call)."""
    return max(0, min(most, WINDOW_BYTES // max(1, set_bytes(pool))))


class Window:
    """The input sets of back-to-back windows: one per call, each at an aligned address of its own,
    in one allocation per floating input made once (`fit` sets) and rewritten by every window.

    A window's values are written when it starts, inside the parent's clock: were they written
    before (untimed), a candidate could compute every output then and answer the timed calls from
    that, which on a host-bound kernel reads as speed it does not have. Written at once, a few
    launches per input for all the window's calls, they cost what the trusted job's "overhead"
    run costs too (it writes them the same way), so the parent takes them off. A window of more
    calls than sets (inputs larger than WINDOW_BYTES / calls) refills the set a call reuses before
    that call, as one buffer was refilled before every call before windows had sets."""

    def __init__(self, pool: Pool, most: int, fallback: list):
        self.pool, self.fit = pool, window_fit(pool, most)
        if not all(pool.sets[0][i].is_contiguous() for i in pool.floats):
            self.fit = 0  # a strided input keeps its layout: the timing's own buffers, refilled call by call
        self.request: FreshRequest | None = None
        self.count = 0
        self.each_call = False  # each call's values written just before it (a plain window), not all at once
        self.stacks: dict[int, torch.Tensor] = {}  # input index -> (fit, numel) view, rows WINDOW_ALIGN apart
        if self.fit == 0:
            self.sets = [fallback]
            return
        first = pool.sets[0]
        shared = [v.clone() if isinstance(v, torch.Tensor) else v for v in first]  # inputs that are never refilled
        self.sets = [list(shared) for _ in range(self.fit)]
        for i in pool.floats:
            like = first[i]
            numel = like.numel()
            pad = -(-numel * like.element_size() // WINDOW_ALIGN) * WINDOW_ALIGN // like.element_size()
            flat = torch.empty(self.fit * pad, dtype=like.dtype, device=like.device)
            self.stacks[i] = flat.as_strided((self.fit, numel), (pad, 1))
            self.stacks[i].copy_(like.reshape(1, numel).expand(self.fit, numel))  # without fresh values: the first set's
            for k in range(self.fit):
                self.sets[k][i] = flat[k * pad:k * pad + numel].view(like.shape)

    def prepare(self, request: FreshRequest, each_call: bool = False) -> int:
        """Write the values of the first calls of `request`, each into a set of its own; how many sets.
        `each_call` (a plain window, Python between its calls): write none now, each call's values just
        before it (`inputs`), so no call's values exist before the call ahead of it has been issued and
        a forward can't compute a later call's answer early (batch the window: redteam_timing_batch_window_views).
        A replayed graph runs no candidate code between its calls, so its window is written at once."""
        self.request, self.count, self.each_call = request, max(1, min(request.calls, self.fit)), each_call
        if each_call:
            return self.count
        if not self.stacks:
            request.fill(self.sets[0], 0)
        else:
            request.fill_rows(self.stacks, self.count)
        return self.count

    def inputs(self, call: int) -> list:
        """Call `call`'s inputs: its own set (written now where each call's are), or (past the sets) the
        set it reuses, refilled now."""
        if self.request is None:
            raise RuntimeError("a window's inputs were asked for before it was prepared")
        inputs = self.sets[call % self.count]
        if self.each_call or call >= self.count:
            self.request.fill(inputs, call)
        return inputs


def warm_fresh_values(pool: Pool, kept: Kept, device: str, window: Window | None = None) -> None:
    """Before any request is timed: a request's random bits drawn once at the largest size, every
    kept slot digested (on a GPU the digest kernel loads, or compiles where no standby did), and a window's sets written once, so
    the allocator holds their blocks and no timed window pays for a compile or a first allocation."""
    request = pool.request(0, kept.calls)
    if window is not None:
        window.prepare(request)
    kept.count = kept.calls
    kept.digests()
    kept.reset()
    synchronize(device)
