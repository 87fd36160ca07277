"""Hand-written starter kernel (not made by the agent loop) for the training suite's 5_GELU: GELU's
tanh approximation forward and backward in Triton, one elementwise kernel each way, in float32
between bf16 loads and stores, wrapped in a torch.autograd.Function. Not yet tuned on a GPU."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024


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
def _inner_tanh(x):
    """tanh(sqrt(2 / pi) * (x + 0.044715 x^3)), through the sigmoid."""
    return 2.0 * tl.sigmoid(2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x)) - 1.0


@triton.jit
def _forward(x_ptr, out_ptr, n, BLOCK: tl.constexpr, INTERPRETED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    x = tl.load(x_ptr + offs, mask=live, other=0.0).to(tl.float32)
    t = _inner_tanh(x)
    tl.store(out_ptr + offs, _to(0.5 * x * (1.0 + t), out_ptr.dtype.element_ty, INTERPRETED), mask=live)


@triton.jit
def _backward(x_ptr, grad_ptr, dx_ptr, n, BLOCK: tl.constexpr, INTERPRETED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    x = tl.load(x_ptr + offs, mask=live, other=0.0).to(tl.float32)
    dy = tl.load(grad_ptr + offs, mask=live, other=0.0).to(tl.float32)
    t = _inner_tanh(x)
    slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
    tl.store(dx_ptr + offs, _to(dy * slope, dx_ptr.dtype.element_ty, INTERPRETED), mask=live)


class GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _forward[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK, INTERPRETED=not x.is_cuda)
        ctx.save_for_backward(x)
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        _backward[(triton.cdiv(x.numel(), BLOCK),)](x, grad.contiguous(), dx, x.numel(), BLOCK=BLOCK,
                                                    INTERPRETED=not x.is_cuda)
        return dx


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return GELU.apply(x)
