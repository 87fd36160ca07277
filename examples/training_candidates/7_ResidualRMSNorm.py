"""Hand-written starter kernel (not made by the agent loop) for the training suite's 7_ResidualRMSNorm:
residual add and RMSNorm fused, forward and backward in Triton, wrapped in a torch.autograd.Function. The
forward rounds h = x + residual to bf16 (as the reference does) and normalises that h in float32, keeping
each row's 1/rms; the backward makes dh (h's own gradient plus the norm's: x's and residual's) a row at a
time, and the weight's gradient a block of columns at a time over every row. Not yet tuned on a GPU."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

EPS = 1e-5
BLOCK_COLS, BLOCK_ROWS = 64, 64  # the weight gradient's tiles


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
def _forward(x_ptr, res_ptr, w_ptr, out_ptr, h_ptr, rstd_ptr, hidden, eps, BLOCK: tl.constexpr,
             INTERPRETED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    live = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)
    res = tl.load(res_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)
    h = _to(x + res, h_ptr.dtype.element_ty, INTERPRETED)  # h is bf16, and the norm is of that h
    tl.store(h_ptr + row * hidden + cols, h, mask=live)
    h = h.to(tl.float32)
    w = tl.load(w_ptr + cols, mask=live, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(h * h, 0) / hidden + eps)
    tl.store(out_ptr + row * hidden + cols, _to(h * rstd * w, out_ptr.dtype.element_ty, INTERPRETED), mask=live)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _backward_dh(h_ptr, w_ptr, grad_y_ptr, grad_h_ptr, rstd_ptr, dx_ptr, dres_ptr, hidden, BLOCK: tl.constexpr,
                 INTERPRETED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    live = cols < hidden
    h = tl.load(h_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=live, other=0.0).to(tl.float32)
    dy = tl.load(grad_y_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)
    rstd = tl.load(rstd_ptr + row)
    hhat = h * rstd
    g = dy * w
    dh = rstd * (g - hhat * (tl.sum(g * hhat, 0) / hidden))  # through the norm
    dh += tl.load(grad_h_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)  # h's own
    # h = x + residual: both get dh
    tl.store(dx_ptr + row * hidden + cols, _to(dh, dx_ptr.dtype.element_ty, INTERPRETED), mask=live)
    tl.store(dres_ptr + row * hidden + cols, _to(dh, dres_ptr.dtype.element_ty, INTERPRETED), mask=live)


@triton.jit
def _backward_dw(h_ptr, grad_ptr, rstd_ptr, dw_ptr, rows, hidden, BLOCK_COLS: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    live = cols < hidden
    acc = tl.zeros([BLOCK_COLS], tl.float32)
    for start in range(0, rows, BLOCK_ROWS):
        r = start + tl.arange(0, BLOCK_ROWS)
        ok = (r < rows)[:, None] & live[None, :]
        where = r.to(tl.int64)[:, None] * hidden + cols[None, :]
        h = tl.load(h_ptr + where, mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(grad_ptr + where, mask=ok, other=0.0).to(tl.float32)
        rstd = tl.load(rstd_ptr + r, mask=r < rows, other=0.0)
        acc += tl.sum(dy * h * rstd[:, None], 0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=live)


class ResidualRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight):
        x, residual, weight = x.contiguous(), residual.contiguous(), weight.contiguous()
        hidden = x.shape[-1]
        rows = x.numel() // hidden
        out, h = torch.empty_like(x), torch.empty_like(x)
        rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
        block = triton.next_power_of_2(hidden)
        _forward[(rows,)](x, residual, weight, out, h, rstd, hidden, EPS, BLOCK=block, INTERPRETED=not x.is_cuda,
                          num_warps=8 if block >= 4096 else 4)
        ctx.save_for_backward(h, weight, rstd)
        return out, h

    @staticmethod
    def backward(ctx, grad_y, grad_h):
        h, weight, rstd = ctx.saved_tensors
        grad_y, grad_h = grad_y.contiguous(), grad_h.contiguous()
        hidden = h.shape[-1]
        rows = h.numel() // hidden
        dx, dres, dw = torch.empty_like(h), torch.empty_like(h), torch.empty_like(weight)
        block = triton.next_power_of_2(hidden)
        _backward_dh[(rows,)](h, weight, grad_y, grad_h, rstd, dx, dres, hidden, BLOCK=block,
                              INTERPRETED=not h.is_cuda, num_warps=8 if block >= 4096 else 4)
        _backward_dw[(triton.cdiv(hidden, BLOCK_COLS),)](h, grad_y, rstd, dw, rows, hidden, BLOCK_COLS=BLOCK_COLS,
                                                        BLOCK_ROWS=BLOCK_ROWS)
        return dx, dres, dw


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
        return ResidualRMSNorm.apply(x, residual, weight)
