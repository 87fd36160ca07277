"""Hand-written starter kernel (not made by the agent loop) for the training suite's 3_SwiGLU:
silu(gate) * up forward and backward in Triton, one elementwise kernel each way, in float32 between
bf16 loads and stores, wrapped in a torch.autograd.Function. Not yet tuned on a GPU."""

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
def _forward(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr, INTERPRETED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    g = tl.load(gate_ptr + offs, mask=live, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, _to(g * tl.sigmoid(g) * u, out_ptr.dtype.element_ty, INTERPRETED), mask=live)


@triton.jit
def _backward(gate_ptr, up_ptr, grad_ptr, dgate_ptr, dup_ptr, n, BLOCK: tl.constexpr, INTERPRETED: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    g = tl.load(gate_ptr + offs, mask=live, other=0.0).to(tl.float32)
    u = tl.load(up_ptr + offs, mask=live, other=0.0).to(tl.float32)
    dy = tl.load(grad_ptr + offs, mask=live, other=0.0).to(tl.float32)
    s = tl.sigmoid(g)
    tl.store(dgate_ptr + offs, _to(dy * u * s * (1.0 + g * (1.0 - s)), dgate_ptr.dtype.element_ty, INTERPRETED), mask=live)
    tl.store(dup_ptr + offs, _to(dy * g * s, dup_ptr.dtype.element_ty, INTERPRETED), mask=live)


class SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty_like(gate)
        n = gate.numel()
        _forward[(triton.cdiv(n, BLOCK),)](gate, up, out, n, BLOCK=BLOCK, INTERPRETED=not gate.is_cuda)
        ctx.save_for_backward(gate, up)
        return out

    @staticmethod
    def backward(ctx, grad):
        gate, up = ctx.saved_tensors
        grad = grad.contiguous()
        dgate, dup = torch.empty_like(gate), torch.empty_like(up)
        n = gate.numel()
        _backward[(triton.cdiv(n, BLOCK),)](gate, up, grad, dgate, dup, n, BLOCK=BLOCK, INTERPRETED=not gate.is_cuda)
        return dgate, dup


class ModelNew(nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return SwiGLU.apply(gate, up)
