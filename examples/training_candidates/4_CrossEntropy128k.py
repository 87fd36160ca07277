"""Hand-written starter kernel (not made by the agent loop) for the training suite's 4_CrossEntropy128k:
cross-entropy forward and backward in Triton, wrapped in a torch.autograd.Function. The forward streams
each row once (an online max and sum of exponentials, float32) to its log-sum-exp and loss, and one
program sums the losses in a fixed order to the mean; the backward makes (softmax - one_hot) * grad /
tokens a block at a time from the kept log-sum-exp. Targets lie in [0, vocab) as the problem draws them
(no ignore_index). Not yet tuned on a GPU."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096  # vocabulary columns a program holds at once
BLOCK_SUM = 1024  # losses the mean's program adds at once


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
def _row_loss(logits_ptr, targets_ptr, loss_ptr, lse_ptr, vocab, BLOCK: tl.constexpr):
    """One row: lse = log(sum(exp(logits))), loss = lse - logits[target]."""
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * vocab
    running_max = -float("inf")
    running_sum = 0.0
    for start in range(0, vocab, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(base + cols, mask=cols < vocab, other=-float("inf")).to(tl.float32)
        new_max = tl.maximum(running_max, tl.max(x, 0))  # finite: a block has a live column
        running_sum = running_sum * tl.exp(running_max - new_max) + tl.sum(tl.exp(x - new_max), 0)
        running_max = new_max
    lse = running_max + tl.log(running_sum)
    target = tl.load(base + tl.load(targets_ptr + row)).to(tl.float32)
    tl.store(loss_ptr + row, lse - target)
    tl.store(lse_ptr + row, lse)


@triton.jit
def _mean(loss_ptr, out_ptr, rows, BLOCK_SUM: tl.constexpr):
    acc = tl.zeros([BLOCK_SUM], tl.float32)
    for start in range(0, rows, BLOCK_SUM):
        r = start + tl.arange(0, BLOCK_SUM)
        acc += tl.load(loss_ptr + r, mask=r < rows, other=0.0)
    tl.store(out_ptr, tl.sum(acc, 0) / rows)


@triton.jit
def _backward(logits_ptr, targets_ptr, lse_ptr, grad_ptr, dlogits_ptr, rows, vocab, BLOCK: tl.constexpr,
              INTERPRETED: tl.constexpr):
    """d loss / d logits[row, block] = (softmax - one_hot(target)) * grad / rows."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = cols < vocab
    x = tl.load(logits_ptr + row * vocab + cols, mask=live, other=0.0).to(tl.float32)
    p = tl.exp(x - tl.load(lse_ptr + row))
    p = tl.where(cols == tl.load(targets_ptr + row), p - 1.0, p)
    scale = tl.load(grad_ptr).to(tl.float32) / rows
    tl.store(dlogits_ptr + row * vocab + cols, _to(p * scale, dlogits_ptr.dtype.element_ty, INTERPRETED), mask=live)


class CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        logits, targets = logits.contiguous(), targets.contiguous()
        rows, vocab = logits.shape
        losses = torch.empty(rows, device=logits.device, dtype=torch.float32)
        lse = torch.empty(rows, device=logits.device, dtype=torch.float32)
        out = torch.empty((), device=logits.device, dtype=torch.float32)
        _row_loss[(rows,)](logits, targets, losses, lse, vocab, BLOCK=BLOCK, num_warps=8)
        _mean[(1,)](losses, out, rows, BLOCK_SUM=BLOCK_SUM)
        ctx.save_for_backward(logits, targets, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        logits, targets, lse = ctx.saved_tensors
        rows, vocab = logits.shape
        dlogits = torch.empty_like(logits)
        _backward[(rows, triton.cdiv(vocab, BLOCK))](logits, targets, lse, grad.contiguous(), dlogits, rows, vocab,
                                                     BLOCK=BLOCK, INTERPRETED=not logits.is_cuda, num_warps=8)
        return dlogits, None


class ModelNew(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return CrossEntropy.apply(logits, targets)
