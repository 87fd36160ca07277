"""The outputs of one request's timed calls, kept until the parent has picked which to check, and
the digests that bind the candidate's child to them.

The parent checks timed calls picked at random (tools/verify/timed_checks.py). Which ones can't be
said before the calls (the candidate shares its process with anything that knows), so the child
keeps a copy of every timed call's output (`Kept`, after the call's stop event: outside the timed
region) and answers each request with a digest of every copy. Only then does the parent pick,
and the child hands over the copies picked; the parent digests them itself and compares. A child
that returned something cheap from its timed calls and computed the right answer only for the
calls picked (after the pick, outside every clock) can't match the digest it sent before it knew.

The digest runs on the device with plain torch integer ops, the same code in the child, the
trusted job (its overhead is measured there, tools/verify/timing_driver.py) and the parent, so it
is bit-for-bit the same wherever it runs. A slot's bytes, as 32-bit words, are hashed in lanes:
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
KEPT_BYTES = 1 << 30  # device memory for the copies of one request's outputs
MAX_KEPT_CALLS = 2000  # calls one request may keep (their digests, 70 kB, travel in one channel message)
DIGEST_CHUNK_BYTES = 128 << 20  # kept outputs digested at once (their 64-bit copy is twice this)


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


def _level(words: torch.Tensor, level: int) -> torch.Tensor:
    """(rows, W) int32 words -> (rows, ceil(W / LANE_WORDS)) int64 lane states."""
    rows, count = words.shape
    lanes = max(1, -(-count // LANE_WORDS))
    wide = torch.zeros(rows, lanes * LANE_WORDS, dtype=torch.int64, device=words.device)
    wide[:, :count] = words.to(torch.int64).bitwise_and_(_LOW32)
    wide = wide.view(rows, LANE_WORDS, lanes)  # lane l folds words l, lanes + l, 2 * lanes + l, ...
    states = torch.arange(1, lanes + 1, dtype=torch.int64, device=words.device).add_(level << 40).mul_(_IV)
    states = states.expand(rows, lanes).clone()
    for j in range(LANE_WORDS):
        states.bitwise_xor_(wide[:, j])
        _mix_(states)
    return states


def digest_rows(words: torch.Tensor, nbytes: int) -> list[str]:
    """One digest (hex) per row of `words` ((rows, W) int32: each row the bytes of one kept output,
    zero-padded to whole words), `nbytes` the length of what each row holds."""
    if words.dim() != 2 or words.dtype != torch.int32:
        raise ValueError("digest_rows takes a 2-D int32 tensor")
    rows_at_once = max(1, DIGEST_CHUNK_BYTES // max(1, 4 * words.shape[1]))  # its int64 copy stays bounded
    digests = []
    for first in range(0, words.shape[0], rows_at_once):
        states, level = _level(words[first:first + rows_at_once], 0), 1
        while states.shape[1] > FINAL_STATES:
            states, level = _level(states.view(torch.int32), level), level + 1
        digests += [hashlib.blake2b(nbytes.to_bytes(8, "little") + row.numpy().tobytes(), digest_size=16).hexdigest()
                    for row in states.cpu()]
    return digests


def digest_bytes(raw: torch.Tensor) -> str:
    """The digest of one output's bytes (a 1-D uint8 tensor), as `Kept.digests` makes it."""
    nbytes = raw.numel()
    padded = torch.zeros(-(-nbytes // 4) * 4, dtype=torch.uint8, device=raw.device)
    padded[:nbytes] = raw
    return digest_rows(padded.view(torch.int32).view(1, -1), nbytes)[0]


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
    """One kept output's bytes (1-D uint8) as tensors shaped and typed like `like` (the reference's)."""
    tensors, offset = [], 0
    for ref in like:
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

    @property
    def calls(self) -> int:
        return self.words.shape[0]

    def reset(self) -> None:
        self.count = 0

    def keep(self, outputs: list) -> None:
        """Copy one call's outputs into the next slot; a ValueError where they are not the sizes the
        trial outputs had (the verdict then says so)."""
        if self.count >= self.calls:
            raise ValueError(f"more than {self.calls} timed calls in one request")
        if len(outputs) != len(self.sizes):
            raise ValueError(f"a timed call returned {len(outputs)} outputs, the trials {len(self.sizes)}")
        row, offset = self.bytes[self.count], 0
        for index, (out, size) in enumerate(zip(outputs, self.sizes)):
            if not isinstance(out, torch.Tensor) or out.numel() * out.element_size() != size:
                raise ValueError(f"a timed call's output {index} is not the size of the trials' ({size} bytes)")
            row[offset:offset + size].copy_(out.detach().reshape(-1).view(torch.uint8))
            offset += size
        self.count += 1

    def digests(self) -> list[str]:
        return digest_rows(self.words[:self.count], self.nbytes)

    def raw(self, index: int) -> torch.Tensor:
        if not 0 <= index < self.count:
            raise IndexError(f"no kept call {index} (this request kept {self.count})")
        return self.bytes[index, :self.nbytes]
