"""The outputs of one request's timed calls, kept until the parent has picked which to check, and
the digests that bind the candidate's child to them.

The parent checks timed calls picked at random (tools/verify/timed_checks.py). Which ones can't be
said before the calls (the candidate shares its process with anything that knows), so the child
keeps a copy of every timed call's output (`Kept`, after the call's stop event: outside the timed
region) and answers each request with a digest of every copy. Only then does the parent pick,
and the child hands over the copies picked; the parent digests them itself and compares. A child
that returned something cheap from its timed calls and computed the right answer only for the
calls picked (after the pick, outside every clock) can't match the digest it sent before it knew.

The digest runs on the device: on a GPU one Triton kernel per level reads each word once (in the
child and in the trusted job, which times that work alone: tools/verify/timing_driver.py), on the
CPU plain torch integer ops, the kernel's reference; they agree bit for bit (tests/verify/
test_fresh_values.py runs the kernel under Triton's interpreter, tests/gpu/test_timed_checks_gpu.py
on the device), so the parent's digest of a copy is the child's. A slot's bytes, as 32-bit words,
are hashed in lanes:
each lane folds LANE_WORDS words in turn through a 64-bit mix that is a bijection (SplitMix64's
finaliser), the lane states become the next level's words, and so on until at most FINAL_STATES
states are left, which blake2b hashes on the host with the slot's length. Forging it means
matching the 64-bit state of every lane whose words changed from values within tolerance of the
right answer: a meet-in-the-middle of about 2^32 per lane, and a slot has thousands of lanes.
"""

from __future__ import annotations

import hashlib

import torch

LANE_WORDS = 16  # words each lane folds in turn
FINAL_STATES = 64  # a slot's last level, hashed on the host
_MIX1, _MIX2, _IV = 0x3F58476D1CE4E5B9, 0x14D049BB133111EB, 0x1E3779B97F4A7C15  # odd, below 2^63
_LOW32 = (1 << 32) - 1
KEPT_BYTES = 2 << 30  # device memory for the copies of one request's outputs
MAX_KEPT_CALLS = 2000  # calls one request may keep (their digests, 70 kB, travel in one channel message)
DIGEST_CHUNK_BYTES = 1 << 30  # kept outputs digested at once (their first level's states are an eighth of this)


def _shift(states: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 values (torch's >> is arithmetic)."""
    return torch.bitwise_and(torch.bitwise_right_shift(states, bits), (1 << (64 - bits)) - 1)


def _mix_(states: torch.Tensor) -> None:
    """SplitMix64's finaliser, in place, modulo 2^64 (int64 products wrap)."""
    states.bitwise_xor_(_shift(states, 30))
    states.mul_(_MIX1)
    states.bitwise_xor_(_shift(states, 27))
    states.mul_(_MIX2)
    states.bitwise_xor_(_shift(states, 31))


def _level(words: torch.Tensor, level: int, kernel: bool) -> torch.Tensor:
    """(rows, W) int32 words -> (rows, ceil(W / LANE_WORDS)) int64 lane states: lane l folds words
    l, lanes + l, 2 * lanes + l, ... (a word past the end reads 0). With `kernel`, on a GPU, one
    Triton kernel reads each word once; else (and as its reference) plain torch ops, LANE_WORDS passes."""
    if kernel and words.is_cuda:
        return _level_kernel(words, level)
    return _level_torch(words, level)


def _level_torch(words: torch.Tensor, level: int) -> torch.Tensor:
    rows, count = words.shape
    lanes = max(1, -(-count // LANE_WORDS))
    states = torch.arange(1, lanes + 1, dtype=torch.int64, device=words.device).add_(level << 40).mul_(_IV)
    states = states.expand(rows, lanes).clone()
    word = torch.zeros(rows, lanes, dtype=torch.int64, device=words.device)
    for j in range(LANE_WORDS):
        chunk = words[:, j * lanes:(j + 1) * lanes]
        word.zero_()
        word[:, :chunk.shape[1]] = chunk
        states.bitwise_xor_(word.bitwise_and_(_LOW32))
        _mix_(states)
    return states


_KERNEL: list = []  # the Triton kernel, made on first use (the parent never needs triton for this)
LANES_PER_PROGRAM = 512


def _kernel():
    if _KERNEL:
        return _KERNEL[0]
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["n_words", "n_lanes", "level_add"])  # one compiled variant for every size
    def lane_hash_kernel(words_ptr, states_ptr, n_words, n_lanes, level_add, MIX1: tl.constexpr,
                         MIX2: tl.constexpr, IV: tl.constexpr, LANE_WORDS: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(1)
        lanes = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = lanes < n_lanes
        start = (lanes + 1).to(tl.uint64) + level_add.to(tl.uint64)
        state = start * tl.full([BLOCK], IV, tl.uint64)
        base = words_ptr + row.to(tl.int64) * n_words
        for j in tl.static_range(LANE_WORDS):
            index = j * n_lanes + lanes
            word = tl.load(base + index, mask=live & (index < n_words), other=0)
            state = state ^ word.to(tl.uint32, bitcast=True).to(tl.uint64)
            state = state ^ (state >> 30)
            state = state * tl.full([BLOCK], MIX1, tl.uint64)
            state = state ^ (state >> 27)
            state = state * tl.full([BLOCK], MIX2, tl.uint64)
            state = state ^ (state >> 31)
        tl.store(states_ptr + row.to(tl.int64) * n_lanes + lanes, state.to(tl.int64, bitcast=True), mask=live)

    _KERNEL.append(lane_hash_kernel)
    return lane_hash_kernel


def warm_digest(device: str | torch.device = "cuda") -> None:
    """Compile the digest kernel in this process ahead of its first use (a candidate job's standby)."""
    _level_kernel(torch.zeros(1, LANE_WORDS, dtype=torch.int32, device=device), 0)


def _level_kernel(words: torch.Tensor, level: int) -> torch.Tensor:
    import triton

    rows, count = words.shape
    lanes = max(1, -(-count // LANE_WORDS))
    words = words.contiguous()
    states = torch.empty(rows, lanes, dtype=torch.int64, device=words.device)
    grid = (triton.cdiv(lanes, LANES_PER_PROGRAM), rows)
    _kernel()[grid](words, states, count, lanes, level << 40, MIX1=_MIX1, MIX2=_MIX2, IV=_IV,
                    LANE_WORDS=LANE_WORDS, BLOCK=LANES_PER_PROGRAM)
    return states


def digest_rows(words: torch.Tensor, nbytes: int, kernel: bool = True) -> list[str]:
    """One digest (hex) per row of `words` ((rows, W) int32: each row the bytes of one kept output,
    zero-padded to whole words), `nbytes` the length of what each row holds. `kernel`: on a GPU,
    the Triton kernel (the child, the trusted job); off, torch ops only (the parent, which
    compiles no Triton; bit for bit the same)."""
    if words.dim() != 2 or words.dtype != torch.int32:
        raise ValueError("digest_rows takes a 2-D int32 tensor")
    rows_at_once = max(1, DIGEST_CHUNK_BYTES // max(1, 4 * words.shape[1]))
    digests = []
    for first in range(0, words.shape[0], rows_at_once):
        states, level = _level(words[first:first + rows_at_once], 0, kernel), 1
        while states.shape[1] > FINAL_STATES:
            states, level = _level(states.view(torch.int32), level, kernel), level + 1
        digests += [hashlib.blake2b(nbytes.to_bytes(8, "little") + row.numpy().tobytes(), digest_size=16).hexdigest()
                    for row in states.cpu()]
    return digests


def digest_bytes(raw: torch.Tensor) -> str:
    """The digest of one output's bytes (a 1-D uint8 tensor), as `Kept.digests` makes it, with torch
    ops only (the parent's check of a copy it was handed)."""
    nbytes = raw.numel()
    padded = torch.zeros(-(-nbytes // 4) * 4, dtype=torch.uint8, device=raw.device)
    padded[:nbytes] = raw
    return digest_rows(padded.view(torch.int32).view(1, -1), nbytes, kernel=False)[0]


def nbytes_of(specs: list) -> list[int]:
    """Bytes of each output, from [shape, dtype name] specs (verifier.output_specs)."""
    sizes = []
    for shape, dtype_name in specs:
        dtype = getattr(torch, str(dtype_name), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown dtype {dtype_name!r}")
        numel = 1
        for dim in shape:
            numel *= int(dim)
        sizes.append(numel * torch.empty(0, dtype=dtype).element_size())
    return sizes


def capacity(output_bytes: int) -> int:
    """How many calls' outputs one request keeps: as many as KEPT_BYTES holds, 1 to MAX_KEPT_CALLS."""
    return max(1, min(MAX_KEPT_CALLS, KEPT_BYTES // max(1, output_bytes)))


def split(raw: torch.Tensor, like: list) -> list[torch.Tensor]:
    """One kept output's bytes (1-D uint8) as tensors shaped and typed like the tensors of `like`
    (the reference's outputs)."""
    tensors, offset = [], 0
    for ref in (t for t in like if isinstance(t, torch.Tensor)):
        size = ref.numel() * ref.element_size()
        piece = raw[offset:offset + size].clone()
        tensors.append(piece.view(ref.dtype).reshape(ref.shape))
        offset += size
    return tensors


class Kept:
    """Copies of the outputs of one request's timed calls (`keep` after each), digests of them all
    (`digests`, before the request is answered), and the bytes of any (`raw`)."""

    def __init__(self, specs: list, calls: int, device: str | torch.device):
        self.sizes = nbytes_of(specs)
        self.nbytes = sum(self.sizes)
        words = max(1, -(-self.nbytes // 4))
        self.words = torch.zeros(max(1, calls), words, dtype=torch.int32, device=device)
        self.bytes = self.words.view(torch.uint8)
        self.count = 0
        # each slot's place for each output, made once: keeping a call's outputs is one copy each
        starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self._slots = [[row[start:start + size] for start, size in zip(starts, self.sizes)] for row in self.bytes]

    @property
    def calls(self) -> int:
        return self.words.shape[0]

    def reset(self) -> None:
        self.count = 0

    def keep(self, outputs: list) -> None:
        """Copy one call's outputs (a forward's flattened outputs: its tensors are kept) into the next
        slot; a ValueError where they are not the sizes the trial outputs had (the verdict says so)."""
        outputs = _plain([out for out in outputs if isinstance(out, torch.Tensor)])
        if self.count >= self.calls:
            raise ValueError(f"more than {self.calls} timed calls in one request")
        if len(outputs) != len(self.sizes):
            raise ValueError(f"a timed call returned {len(outputs)} outputs, the trials {len(self.sizes)}")
        for index, (place, out, size) in enumerate(zip(self._slots[self.count], outputs, self.sizes)):
            if out.numel() * out.element_size() != size:
                raise ValueError(f"a timed call's output {index} is not the size of the trials' ({size} bytes)")
            place.copy_(out.detach().reshape(-1).view(torch.uint8))
        self.count += 1

    def keep_all(self, held: list[list], shared_ok: bool = False) -> bool:
        """After a replayed window's calls (its "keep" step): every call's outputs (`held`, one
        forward's flattened outputs per call) copied into the slots at once, a few launches per
        output. False (nothing kept) where two calls' outputs share memory (a capture refuses such a
        forward: only its last output would be there). `shared_ok`: the trusted job's overhead window,
        whose calls all "return" the reference's one output: the same work, and kept all the same.
        A plain window keeps each call's outputs as the call ends (`keep`)."""
        calls = [_plain([out for out in outputs if isinstance(out, torch.Tensor)]) for outputs in held]
        if len(calls) > self.calls:
            raise ValueError(f"more than {self.calls} timed calls in one request")
        places = {out.untyped_storage().data_ptr() for outputs in calls for out in outputs if out.numel()}
        if len(places) < sum(1 for outputs in calls for out in outputs if out.numel()) and not shared_ok:
            return False
        for outputs in calls:
            if len(outputs) != len(self.sizes):
                raise ValueError(f"a timed call returned {len(outputs)} outputs, the trials {len(self.sizes)}")
        start = 0
        for index, size in enumerate(self.sizes):
            rows = []
            for outputs in calls:
                out = outputs[index]
                if out.numel() * out.element_size() != size:
                    raise ValueError(f"a timed call's output {index} is not the size of the trials' ({size} bytes)")
                rows.append(out.detach().reshape(-1).view(torch.uint8))
            if rows and size:
                self.bytes[:len(rows), start:start + size].copy_(torch.stack(rows))
            start += size
        self.count = len(calls)
        return True

    def digests(self) -> list[str]:
        return digest_rows(self.words[:self.count], self.nbytes)

    def raw(self, index: int) -> torch.Tensor:
        if not 0 <= index < self.count:
            raise IndexError(f"no kept call {index} (this request kept {self.count})")
        return self.bytes[index, :self.nbytes]


def _plain(outputs: list) -> list:
    """A timed call's output tensors, each a plain torch.Tensor (as a checked call's must be: harness.run_one):
    a subclass could compute its values when the copy reads them, outside the timed calls."""
    for index, out in enumerate(outputs):
        if type(out) is not torch.Tensor:
            raise ValueError(f"tensor subclass: a timed call's output {index} is a {type(out).__name__}, "
                             "not a plain torch.Tensor")
    return outputs
