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

import random

import torch

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
            torch.where(mask, sets[a][i], sets[b][i], out=target)

    def values(self, call: int) -> list:
        """Call `call`'s input set as new tensors (the trusted job's copy of what the candidate got)."""
        made = self.pool.buffers()
        self.fill(made, call)
        return made
