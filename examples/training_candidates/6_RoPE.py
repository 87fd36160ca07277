"""Hand-written starter kernel (not made by the agent loop) for the training suite's 6_RoPE:
rotary embedding forward and backward in Triton, wrapped in a torch.autograd.Function. One kernel, one
program per token: its 64 angles (position * inv_freq, float32, reduced to [-pi, pi] before cos and sin)
once, applied to all its heads; the backward is the same rotation by minus the angle. Not yet tuned on a GPU."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

THETA = 500000.0
HEAD_DIM = 128
# 2*pi in two parts: TWO_PI_HI has few mantissa bits, so k * TWO_PI_HI is exact for the k here
TWO_PI_HI, TWO_PI_LO = tl.constexpr(6.28125), tl.constexpr(0.0019353071795864769)


@triton.jit
def _to(x, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    """x in `dtype`, rounded to nearest: a GPU does; Triton's interpreter truncates float32 to bfloat16 (a
    bias the verifier's bias check sees), so there the rounding is done here."""
    if INTERPRETED and dtype == tl.bfloat16:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _rotate(src_ptr, pos_ptr, inv_freq_ptr, dst_ptr, seq, heads, INVERSE: tl.constexpr, BLOCK_H: tl.constexpr,
            HALF: tl.constexpr, INTERPRETED: tl.constexpr):
    """dst = src rotated by +angle (INVERSE false: the forward) or -angle (the backward), for one token
    (b, s) of a contiguous (B, S, H, 2 * HALF) tensor: x1 the first half of each head, x2 the second."""
    token = tl.program_id(0).to(tl.int64)
    freq = tl.arange(0, HALF)
    angle = tl.load(pos_ptr + token % seq).to(tl.float32) * tl.load(inv_freq_ptr + freq)
    # Positions reach thousands of radians: reduce to [-pi, pi] first, so any cos/sin is accurate
    k = tl.floor(angle * (0.5 / 3.141592653589793) + 0.5)
    angle = (angle - k * TWO_PI_HI) - k * TWO_PI_LO
    cos, sin = tl.cos(angle)[None, :], tl.sin(angle)[None, :]
    if INVERSE:
        sin = -sin
    head = tl.arange(0, BLOCK_H)
    where = token * heads * 2 * HALF + head[:, None] * 2 * HALF + freq[None, :]
    live = (head < heads)[:, None]
    x1 = tl.load(src_ptr + where, mask=live, other=0.0).to(tl.float32)
    x2 = tl.load(src_ptr + where + HALF, mask=live, other=0.0).to(tl.float32)
    out = dst_ptr.dtype.element_ty
    tl.store(dst_ptr + where, _to(x1 * cos - x2 * sin, out, INTERPRETED), mask=live)
    tl.store(dst_ptr + where + HALF, _to(x2 * cos + x1 * sin, out, INTERPRETED), mask=live)


def _launch(src, positions, inv_freq, inverse: bool):
    batch, seq, heads, dim = src.shape
    dst = torch.empty_like(src)
    _rotate[(batch * seq,)](src, positions, inv_freq, dst, seq, heads, INVERSE=inverse,
                            BLOCK_H=triton.next_power_of_2(heads), HALF=dim // 2, INTERPRETED=not src.is_cuda)
    return dst


class RoPE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, positions, inv_freq):
        positions = positions.contiguous()
        ctx.save_for_backward(positions, inv_freq)
        return _launch(q.contiguous(), positions, inv_freq, inverse=False)

    @staticmethod
    def backward(ctx, grad):
        positions, inv_freq = ctx.saved_tensors
        return _launch(grad.contiguous(), positions, inv_freq, inverse=True), None, None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        # the reference's own table of frequencies, made once as it makes it
        self.register_buffer("inv_freq", 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))

    def forward(self, q: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return RoPE.apply(q, positions, self.inv_freq)
