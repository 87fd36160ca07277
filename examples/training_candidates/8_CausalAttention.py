"""Hand-written starter kernel (not made by the agent loop) for the training suite's 8_CausalAttention:
causal attention forward and backward in Triton, wrapped in a torch.autograd.Function.

Flash attention: the forward runs an online softmax over the key blocks a query block may see and
keeps each row's log-sum-exp; the backward recomputes each block's probabilities from it instead of
storing them: one kernel per key block accumulates dK and dV over the query blocks that see it, one
per query block accumulates dQ, after a small kernel makes each row's D = rowsum(dO * O), the term
the softmax's gradient subtracts. Everything is accumulated in float32. Not yet tuned on a GPU: the
floor the loop starts from.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CONFIG_GPU = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}
CONFIG_CPU = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 1, "num_stages": 1}  # Triton's interpreter: small blocks


@triton.jit
def _dot(a, b, DOT_F32: tl.constexpr):
    """a @ b accumulated in float32 (bf16 tensor cores on a GPU; float32 throughout in the interpreter)."""
    if DOT_F32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    return tl.dot(a, b)


@triton.jit
def _to(x, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    """x in `dtype`, rounded to nearest: a GPU does; Triton's interpreter truncates float32 to bfloat16 (a
    bias of a quarter of a percent, which the verifier's bias check sees), so there the rounding is done here."""
    if INTERPRETED and dtype == tl.bfloat16:
        bits = x.to(tl.float32).to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _forward(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, scale, seq_len, stride_bh, stride_s, HEAD_DIM: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * stride_bh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < seq_len
    q = tl.load(q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=rows[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    hi = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)  # keys after the block's last query are masked for all
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        cols = offs_n < seq_len
        k = tl.load(k_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=cols[:, None], other=0.0)
        v = tl.load(v_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=cols[:, None], other=0.0)
        qk = _dot(q, tl.trans(k), DOT_F32) * scale
        qk = tl.where((offs_m[:, None] >= offs_n[None, :]) & cols[None, :], qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a padded row with no key: 0, not NaN
        p = tl.exp(qk - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(_to(p, v.dtype, DOT_F32), v, DOT_F32)  # bf16 probabilities, as the reference
        m_i = m_new
    l_safe = tl.where(l_i > 0, l_i, 1.0)
    tl.store(o_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], _to(acc / l_safe[:, None], o_ptr.dtype.element_ty, DOT_F32),
             mask=rows[:, None])
    tl.store(lse_ptr + bh * seq_len + offs_m, m_i + tl.log(l_safe), mask=rows)


@triton.jit
def _row_delta(o_ptr, do_ptr, delta_ptr, seq_len, stride_bh, stride_s, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """D = rowsum(dO * O) per query row: the softmax gradient's subtracted term."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < seq_len
    where = bh * stride_bh + offs_m[:, None] * stride_s + offs_d[None, :]
    o = tl.load(o_ptr + where, mask=rows[:, None], other=0.0).to(tl.float32)
    do = tl.load(do_ptr + where, mask=rows[:, None], other=0.0).to(tl.float32)
    tl.store(delta_ptr + bh * seq_len + offs_m, tl.sum(o * do, 1), mask=rows)


@triton.jit
def _backward_dkdv(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dk_ptr, dv_ptr, scale, seq_len, stride_bh, stride_s,
                   HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr):
    """dK and dV of one key block, over every query block that sees it (from the block holding its first key on)."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * stride_bh
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    cols = offs_n < seq_len
    k = tl.load(k_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=cols[:, None], other=0.0)
    v = tl.load(v_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=cols[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], tl.float32)
    for start_m in range((pid_n * BLOCK_N // BLOCK_M) * BLOCK_M, seq_len, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)
        rows = offs_m < seq_len
        q = tl.load(q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=rows[:, None], other=0.0)
        do = tl.load(do_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=rows[:, None], other=0.0)
        lse = tl.load(lse_ptr + bh * seq_len + offs_m, mask=rows, other=0.0)
        delta = tl.load(delta_ptr + bh * seq_len + offs_m, mask=rows, other=0.0)
        qk = _dot(q, tl.trans(k), DOT_F32) * scale
        keep = (offs_m[:, None] >= offs_n[None, :]) & rows[:, None] & cols[None, :]
        p = tl.where(keep, tl.exp(qk - lse[:, None]), 0.0)
        dv += _dot(tl.trans(_to(p, do.dtype, DOT_F32)), do, DOT_F32)
        dp = _dot(do, tl.trans(v), DOT_F32)
        ds = p * (dp - delta[:, None])
        dk += _dot(tl.trans(_to(ds, q.dtype, DOT_F32)), q, DOT_F32)
    where = base + offs_n[:, None] * stride_s + offs_d[None, :]
    tl.store(dk_ptr + where, _to(dk * scale, dk_ptr.dtype.element_ty, DOT_F32), mask=cols[:, None])
    tl.store(dv_ptr + where, _to(dv, dv_ptr.dtype.element_ty, DOT_F32), mask=cols[:, None])


@triton.jit
def _backward_dq(q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, delta_ptr, dq_ptr, scale, seq_len, stride_bh, stride_s,
                 HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr):
    """dQ of one query block, over the key blocks it sees."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * stride_bh
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < seq_len
    q = tl.load(q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=rows[:, None], other=0.0)
    do = tl.load(do_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=rows[:, None], other=0.0)
    lse = tl.load(lse_ptr + bh * seq_len + offs_m, mask=rows, other=0.0)
    delta = tl.load(delta_ptr + bh * seq_len + offs_m, mask=rows, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, tl.minimum((pid_m + 1) * BLOCK_M, seq_len), BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        cols = offs_n < seq_len
        k = tl.load(k_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=cols[:, None], other=0.0)
        v = tl.load(v_ptr + base + offs_n[:, None] * stride_s + offs_d[None, :], mask=cols[:, None], other=0.0)
        qk = _dot(q, tl.trans(k), DOT_F32) * scale
        keep = (offs_m[:, None] >= offs_n[None, :]) & rows[:, None] & cols[None, :]
        p = tl.where(keep, tl.exp(qk - lse[:, None]), 0.0)
        dp = _dot(do, tl.trans(v), DOT_F32)
        ds = p * (dp - delta[:, None])
        dq += _dot(_to(ds, k.dtype, DOT_F32), k, DOT_F32)
    tl.store(dq_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], _to(dq * scale, dq_ptr.dtype.element_ty, DOT_F32),
             mask=rows[:, None])


def _launch(q: torch.Tensor) -> tuple[dict, bool]:
    on_gpu = q.is_cuda  # False only under TRITON_INTERPRET
    return (CONFIG_GPU if on_gpu else CONFIG_CPU), not on_gpu


class CausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, seq_len, head_dim = q.shape
        cfg, dot_f32 = _launch(q)
        out = torch.empty_like(q)
        lse = torch.empty(batch * heads, seq_len, device=q.device, dtype=torch.float32)
        grid = (triton.cdiv(seq_len, cfg["BLOCK_M"]), batch * heads)
        _forward[grid](q, k, v, out, lse, head_dim ** -0.5, seq_len, q.stride(1), q.stride(2), HEAD_DIM=head_dim,
                       BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], DOT_F32=dot_f32,
                       num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        batch, heads, seq_len, head_dim = q.shape
        cfg, dot_f32 = _launch(q)
        delta = torch.empty_like(lse)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        rows = (triton.cdiv(seq_len, cfg["BLOCK_M"]), batch * heads)
        _row_delta[rows](out, grad_out, delta, seq_len, q.stride(1), q.stride(2), HEAD_DIM=head_dim, BLOCK_M=cfg["BLOCK_M"])
        common = dict(HEAD_DIM=head_dim, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], DOT_F32=dot_f32,
                      num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
        _backward_dkdv[(triton.cdiv(seq_len, cfg["BLOCK_N"]), batch * heads)](
            q, k, v, grad_out, lse, delta, dk, dv, head_dim ** -0.5, seq_len, q.stride(1), q.stride(2), **common)
        _backward_dq[rows](q, k, v, grad_out, lse, delta, dq, head_dim ** -0.5, seq_len, q.stride(1), q.stride(2), **common)
        return dq, dk, dv


class ModelNew(nn.Module):
    """forward(q, k, v) -> (B, H, S, D) bf16, causal; its backward is CausalAttention's."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return CausalAttention.apply(q, k, v)
