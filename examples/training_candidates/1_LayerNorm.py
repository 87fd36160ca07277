"""Hand-written starter kernel (not made by the agent loop) for the training suite's 1_LayerNorm:
LayerNorm forward and backward in Triton, wrapped in a torch.autograd.Function. The forward keeps each
row's mean and 1/std (float32); the backward makes dx a row at a time, and the weight's and bias's
gradients a block of columns at a time over every row, all in float32. Not yet tuned on a GPU."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

EPS = 1e-5
BLOCK_COLS, BLOCK_ROWS = 64, 64  # the weight and bias gradients' tiles


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
def _forward(x_ptr, w_ptr, b_ptr, out_ptr, mean_ptr, rstd_ptr, hidden, eps, BLOCK: tl.constexpr,
             INTERPRETED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    live = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)
    mean = tl.sum(x, 0) / hidden
    centred = tl.where(live, x - mean, 0.0)  # the padding lanes stay out of the variance
    rstd = tl.rsqrt(tl.sum(centred * centred, 0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=live, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=live, other=0.0).to(tl.float32)
    y = centred * rstd * w + b
    tl.store(out_ptr + row * hidden + cols, _to(y, out_ptr.dtype.element_ty, INTERPRETED), mask=live)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _backward_dx(x_ptr, w_ptr, grad_ptr, mean_ptr, rstd_ptr, dx_ptr, hidden, BLOCK: tl.constexpr,
                 INTERPRETED: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    live = cols < hidden
    x = tl.load(x_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=live, other=0.0).to(tl.float32)
    dy = tl.load(grad_ptr + row * hidden + cols, mask=live, other=0.0).to(tl.float32)
    xhat = tl.where(live, (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row), 0.0)
    g = dy * w
    # dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    dx = tl.load(rstd_ptr + row) * (g - tl.sum(g, 0) / hidden - xhat * (tl.sum(g * xhat, 0) / hidden))
    tl.store(dx_ptr + row * hidden + cols, _to(dx, dx_ptr.dtype.element_ty, INTERPRETED), mask=live)


@triton.jit
def _backward_dw_db(x_ptr, grad_ptr, mean_ptr, rstd_ptr, dw_ptr, db_ptr, rows, hidden, BLOCK_COLS: tl.constexpr,
                    BLOCK_ROWS: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    live = cols < hidden
    dw = tl.zeros([BLOCK_COLS], tl.float32)
    db = tl.zeros([BLOCK_COLS], tl.float32)
    for start in range(0, rows, BLOCK_ROWS):
        r = start + tl.arange(0, BLOCK_ROWS)
        ok = (r < rows)[:, None] & live[None, :]
        where = r.to(tl.int64)[:, None] * hidden + cols[None, :]
        x = tl.load(x_ptr + where, mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(grad_ptr + where, mask=ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + r, mask=r < rows, other=0.0)
        rstd = tl.load(rstd_ptr + r, mask=r < rows, other=0.0)
        dw += tl.sum(dy * (x - mean[:, None]) * rstd[:, None], 0)
        db += tl.sum(dy, 0)
    tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=live)
    tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=live)


class LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
        hidden = x.shape[-1]
        rows = x.numel() // hidden
        out = torch.empty_like(x)
        mean = torch.empty(rows, device=x.device, dtype=torch.float32)
        rstd = torch.empty(rows, device=x.device, dtype=torch.float32)
        block = triton.next_power_of_2(hidden)
        _forward[(rows,)](x, weight, bias, out, mean, rstd, hidden, EPS, BLOCK=block, INTERPRETED=not x.is_cuda,
                          num_warps=8 if block >= 4096 else 4)
        ctx.save_for_backward(x, weight, mean, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, mean, rstd = ctx.saved_tensors
        grad = grad.contiguous()
        hidden = x.shape[-1]
        rows = x.numel() // hidden
        dx, dw, db = torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight)
        block = triton.next_power_of_2(hidden)
        _backward_dx[(rows,)](x, weight, grad, mean, rstd, dx, hidden, BLOCK=block, INTERPRETED=not x.is_cuda,
                              num_warps=8 if block >= 4096 else 4)
        _backward_dw_db[(triton.cdiv(hidden, BLOCK_COLS),)](x, grad, mean, rstd, dw, db, rows, hidden,
                                                            BLOCK_COLS=BLOCK_COLS, BLOCK_ROWS=BLOCK_ROWS)
        return dx, dw, db


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return LayerNorm.apply(x, weight, bias)
