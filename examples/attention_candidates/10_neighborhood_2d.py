"""Hand-written starter kernel (not made by the agent loop) for the attention suite's 10_neighborhood_2d:
2D neighborhood attention, 7 x 7 windows, dilation 1 + h % 4 on a W x W grid.

One Triton flash-attention forward written for the H100, the same in every variant's starter;
this variant is only its hooks (score_mod, mask_mod, kv_range: the keys a query block needs, and
which of them need the mask). Written from benchmarks/attention_starter_kernel.py, which says how
the kernel works; edit it there and run `python benchmarks/attention_starter_kernel.py --write`.
These starters are the floor the loop starts from: timings in docs/results/h100_attention_starters.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

# block sizes, warps and stages on the H100 (benchmarks/attention_starters.py --sweep)
CONFIG = {'BLOCK_M': 64, 'BLOCK_N': 64, 'num_warps': 4, 'num_stages': 3}

LOG2E = tl.constexpr(1.4426950408889634)  # a kernel reads module globals only as constexprs


@triton.jit
def _tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, extra_ptr, b, h, offs_m, start_n, qk_scale, seq_len, grid_w,
          extra_stride, stride_s, HEADS: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
          DOT_F32: tl.constexpr, FAST_TANH: tl.constexpr):
    """One key block: scores, the variant's score_mod (and mask where MASKED), online softmax."""
    offs_n = start_n + tl.arange(0, BLOCK_N)
    if MASKED:  # only the blocks that can hold masked or out-of-range keys pay for the checks
        k = tl.load(k_ptrs + start_n * stride_s, mask=offs_n[:, None] < seq_len, other=0.0)
        v = tl.load(v_ptrs + start_n * stride_s, mask=offs_n[:, None] < seq_len, other=0.0)
    else:
        k = tl.load(k_ptrs + start_n * stride_s)
        v = tl.load(v_ptrs + start_n * stride_s)
    if DOT_F32:
        qk = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)))
    else:
        qk = tl.dot(q, tl.trans(k))
    qk = score_mod(qk * qk_scale, b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, HEADS, FAST_TANH)
    if MASKED:
        keep = (offs_n[None, :] < seq_len) & mask_mod(b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, grid_w)
        qk = tl.where(keep, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, 1))
    if MASKED:  # a row with no key allowed yet: subtract 0, so its p and alpha are 0, not NaN
        m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new_safe = m_new
    p = tl.math.exp2(qk - m_new_safe[:, None])
    alpha = tl.math.exp2(m_i - m_new_safe)
    l_i = l_i * alpha + tl.sum(p, 1)
    p = p.to(v.dtype)  # bf16 probabilities into the second matmul, as the reference rounds them
    if DOT_F32:
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float32), v.to(tl.float32))
    else:
        acc = tl.dot(p, v, acc * alpha[:, None])
    return acc, l_i, m_new


@triton.jit
def attention_fwd(q_ptr, k_ptr, v_ptr, out_ptr, extra_ptr, qk_scale, seq_len, grid_w, extra_stride,
                  stride_b, stride_h, stride_s, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_F32: tl.constexpr,
                  FAST_TANH: tl.constexpr, SEARCH_STEPS: tl.constexpr):
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # the longest query blocks first
    pid_bh = tl.program_id(1)
    b = pid_bh // HEADS
    h = pid_bh % HEADS
    base = b * stride_b + h * stride_h
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows_ok = offs_m[:, None] < seq_len
    q = tl.load(q_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], mask=rows_ok, other=0.0)
    k_ptrs = k_ptr + base + tl.arange(0, BLOCK_N)[:, None] * stride_s + offs_d[None, :]
    v_ptrs = v_ptr + base + tl.arange(0, BLOCK_N)[:, None] * stride_s + offs_d[None, :]
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    lo, mid, hi = kv_range(b, h, pid_m, extra_ptr, extra_stride, seq_len, grid_w, BLOCK_M, BLOCK_N, SEARCH_STEPS)
    for start_n in range(lo, mid, BLOCK_N):  # blocks every query of this block may see in full
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, extra_ptr, b, h, offs_m, start_n, qk_scale,
                              seq_len, grid_w, extra_stride, stride_s, HEADS, BLOCK_N, False, DOT_F32, FAST_TANH)
    for start_n in range(mid, hi, BLOCK_N):  # blocks that need the mask (or hold the sequence's end)
        acc, l_i, m_i = _tile(acc, l_i, m_i, q, k_ptrs, v_ptrs, extra_ptr, b, h, offs_m, start_n, qk_scale,
                              seq_len, grid_w, extra_stride, stride_s, HEADS, BLOCK_N, True, DOT_F32, FAST_TANH)
    out = acc / l_i[:, None]
    tl.store(out_ptr + base + offs_m[:, None] * stride_s + offs_d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=rows_ok)


def attention(q, k, v, extra=None, grid_w=0, config=None):
    """The forward: q, k, v (B, H, S, D); `extra` the variant's one extra input (or None)."""
    cfg = {**CONFIG, **(config or {})}
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, heads, seq_len, head_dim = q.shape
    out = torch.empty_like(q)
    extra = q if extra is None else extra.contiguous()  # a placeholder pointer where the variant reads none
    on_gpu = q.is_cuda  # False only under TRITON_INTERPRET
    grid = (triton.cdiv(seq_len, cfg["BLOCK_M"]), batch * heads)
    attention_fwd[grid](q, k, v, out, extra, head_dim ** -0.5 * math.log2(math.e), seq_len, grid_w,
                        extra.stride(0) if extra.dim() > 1 else 0, q.stride(0), q.stride(1), q.stride(2),
                        HEADS=heads, HEAD_DIM=head_dim, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                        DOT_F32=not on_gpu, FAST_TANH=on_gpu, SEARCH_STEPS=seq_len.bit_length(),
                        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])
    return out


@triton.jit
def score_mod(qk, b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, HEADS: tl.constexpr,
              FAST_TANH: tl.constexpr):
    return qk  # scores as they are

KERNEL_SIZE = tl.constexpr(7)  # the problem's window and dilations (head h: dilation 1 + h % 4)
DILATIONS = tl.constexpr(4)


@triton.jit
def _window_start(x, dilation, length):
    """Along one axis: the first coordinate of x's dilated, edge-clamped window (NATTEN's)."""
    radius: tl.constexpr = KERNEL_SIZE // 2
    group = x % dilation
    count = (length - group + dilation - 1) // dilation
    centre = tl.minimum(tl.maximum(x // dilation, radius), count - 1 - radius)
    return group + (centre - radius) * dilation


@triton.jit
def _in_window(x, y, dilation, length):
    radius: tl.constexpr = KERNEL_SIZE // 2
    group = x % dilation
    count = (length - group + dilation - 1) // dilation
    centre = tl.minimum(tl.maximum(x // dilation, radius), count - 1 - radius)
    distance = centre - y // dilation
    return (y % dilation == group) & (distance <= radius) & (distance >= -radius)


@triton.jit
def mask_mod(b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, grid_w):
    dilation = 1 + h % DILATIONS
    q_row = (offs_m // grid_w)[:, None]
    q_col = (offs_m % grid_w)[:, None]
    k_row = (offs_n // grid_w)[None, :]
    k_col = (offs_n % grid_w)[None, :]
    return _in_window(q_row, k_row, dilation, grid_w) & _in_window(q_col, k_col, dilation, grid_w)


@triton.jit
def kv_range(b, h, pid_m, extra_ptr, extra_stride, seq_len, grid_w, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             SEARCH_STEPS: tl.constexpr):
    """Only the grid rows some query of the block has in its window. A window's first row never
    decreases down one residue class of rows, so the earliest is among the block's first
    `dilation` rows, and the latest last row among its last `dilation` rows."""
    radius: tl.constexpr = KERNEL_SIZE // 2
    dilation = 1 + h % DILATIONS
    first_row = (pid_m * BLOCK_M) // grid_w
    last_row = (tl.minimum(pid_m * BLOCK_M + BLOCK_M, seq_len) - 1) // grid_w
    lo_row = _window_start(first_row, dilation, grid_w)
    hi_row = _window_start(last_row, dilation, grid_w)
    for i in range(1, DILATIONS):
        lo_row = tl.minimum(lo_row, _window_start(tl.minimum(first_row + i, last_row), dilation, grid_w))
        hi_row = tl.maximum(hi_row, _window_start(tl.maximum(last_row - i, first_row), dilation, grid_w))
    hi_row = hi_row + 2 * radius * dilation  # the window's last row
    lo = ((lo_row * grid_w) // BLOCK_N) * BLOCK_N
    return lo, lo, tl.minimum((hi_row + 1) * grid_w, seq_len)


class ModelNew(nn.Module):
    def forward(self, q, k, v):
        return attention(q, k, v, grid_w=math.isqrt(q.shape[-2]))
