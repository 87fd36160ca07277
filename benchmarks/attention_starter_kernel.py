"""The hand-written starter kernel of the attention suite: ONE Triton flash-attention forward, and
the hooks that make it each variant. `render(name)` is the candidate file for problem `name`;
examples/attention_candidates/<name>.py are these files, written by

    python benchmarks/attention_starter_kernel.py --write      # after editing anything here
    python benchmarks/attention_starter_kernel.py --check      # exit 1 if a shipped file differs

A candidate runs in the sandbox as one self-contained file (it may import torch and triton, not
this repository), so each file carries the whole kernel; the common part is the same text in
every file and only the hooks differ (tests/evals/test_attention_starters.py holds them to that).

The kernel, written for the H100 (Hopper):
- one program per (BLOCK_M queries, batch x head), queries in the log2 domain (scale * log2(e)
  folded into one multiply, exp2 instead of exp), online softmax in float32, P rounded to bf16
  for the second matmul as the reference does;
- the keys a query block needs are one range [lo, hi) from the hook `kv_range`: blocks outside it
  are never loaded (causal: past the diagonal; document: outside the block's documents;
  neighborhood: outside its window's rows); inside it, [lo, mid) needs no mask at all and runs
  a loop with no mask, bounds check or select, and only [mid, hi) evaluates the mask;
- heavy query blocks first (the causal diagonal's end), so the last wave has the short ones;
- block sizes, warps and stages per variant in CONFIGS below, measured on the H100
  (benchmarks/attention_starters.py --sweep).
Under TRITON_INTERPRET (CPU tensors) the two matmuls run in float32 on bf16-rounded values: the
interpreter's bf16 tl.dot is wrong (triton-lang/triton#11584); on a GPU they are bf16 tensor-core dots.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "attention_candidates"

# Block sizes, warps and stages per variant; missing: DEFAULT_CONFIG. Hopper's wgmma gives each
# warpgroup (4 warps) 64 query rows: 128 x 64 with 8 warps holds the scores, P and the
# accumulator in ~110-190 registers a thread with no spills for every variant (ptxas for sm_90a,
# `hopper_build` below), where 128 rows on 4 warps need 230-255 and spill for two variants.
# CONFIGS: the sweep on the H100 (docs/results/h100_attention_starters/sweep.jsonl, timed in one
# process's interleaved rounds) where its fastest config beat the default by SWEEP_GAIN or more:
# 64 x 64 on 4 warps (136-202 registers, no spills) for the masks that skip blocks, whose finer
# query blocks skip more; 128 x 64 on 4 warps for the learned bias, faster although it spills
# 160 bytes. tests/evals/test_attention_starters.py holds CONFIGS to that file.
DEFAULT_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3}
SWEEP_GAIN = 1.03
_SMALL = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
CONFIGS: dict[str, dict[str, int] | None] = {
    "1_causal_mask": _SMALL,  # 1.04x over the default
    "2_document_mask": _SMALL,  # 1.34x
    "8_document_mask_long": _SMALL,  # 1.31x
    "9_learned_relative_bias": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},  # 1.18x
    "10_neighborhood_2d": _SMALL,  # 1.29x
}

COMMON = '''
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
'''

IDENTITY_SCORE = '''
@triton.jit
def score_mod(qk, b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, HEADS: tl.constexpr,
              FAST_TANH: tl.constexpr):
    return qk  # scores as they are
'''

NO_MASK = '''
@triton.jit
def mask_mod(b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, grid_w):
    return offs_n[None, :] >= 0  # every key (the bounds check is the kernel's)
'''

ALL_KEYS = '''
@triton.jit
def kv_range(b, h, pid_m, extra_ptr, extra_stride, seq_len, grid_w, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             SEARCH_STEPS: tl.constexpr):
    """Every key; only the last, partial block needs the bounds check."""
    return 0, (seq_len // BLOCK_N) * BLOCK_N, seq_len
'''

CAUSAL = '''
@triton.jit
def mask_mod(b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, grid_w):
    return offs_m[:, None] >= offs_n[None, :]


@triton.jit
def kv_range(b, h, pid_m, extra_ptr, extra_stride, seq_len, grid_w, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             SEARCH_STEPS: tl.constexpr):
    """Keys before the block's first query need no mask; the diagonal block(s) do; later ones are skipped."""
    first = pid_m * BLOCK_M
    return 0, (first // BLOCK_N) * BLOCK_N, tl.minimum(first + BLOCK_M, seq_len)
'''

DOCUMENT = '''
@triton.jit
def mask_mod(b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, grid_w):
    ids_q = tl.load(extra_ptr + b * extra_stride + offs_m, mask=offs_m < seq_len, other=-1)
    ids_k = tl.load(extra_ptr + b * extra_stride + offs_n, mask=offs_n < seq_len, other=-2)
    return ids_q[:, None] == ids_k[None, :]


@triton.jit
def _first_at_least(ids_ptr, seq_len, value, SEARCH_STEPS: tl.constexpr):
    """Binary search in a non-decreasing row: the first index whose id is >= value (seq_len if none)."""
    lo = seq_len * 0
    hi = seq_len + 0
    for _ in range(SEARCH_STEPS):  # SEARCH_STEPS >= log2(seq_len + 1): always converged
        open_ = lo < hi
        mid = (lo + hi) // 2
        right = open_ & (tl.load(ids_ptr + mid, mask=open_ & (mid < seq_len), other=0) < value)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(open_ & ~right, mid, hi)
    return lo


@triton.jit
def kv_range(b, h, pid_m, extra_ptr, extra_stride, seq_len, grid_w, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             SEARCH_STEPS: tl.constexpr):
    """Document ids never decrease: the keys of the block's documents are one range, from the first
    key of the first query's document to the last key of the last query's. All of it is masked."""
    row = extra_ptr + b * extra_stride
    first = pid_m * BLOCK_M
    last = tl.minimum(first + BLOCK_M, seq_len) - 1
    lo = _first_at_least(row, seq_len, tl.load(row + first), SEARCH_STEPS)
    hi = _first_at_least(row, seq_len, tl.load(row + last) + 1, SEARCH_STEPS)
    lo = (lo // BLOCK_N) * BLOCK_N
    return lo, lo, hi
'''

NEIGHBORHOOD = '''
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
'''


def _score(body: str, doc: str) -> str:
    return f'''
@triton.jit
def score_mod(qk, b, h, offs_m, offs_n, extra_ptr, extra_stride, seq_len, HEADS: tl.constexpr,
              FAST_TANH: tl.constexpr):
    """{doc}"""
{textwrap.indent(textwrap.dedent(body).strip(), "    ")}
'''


RELATIVE_POSITIONAL = _score('''
    return qk + (offs_m[:, None] - offs_n[None, :]).to(tl.float32) * LOG2E
''', "score + (q_idx - kv_idx), in the log2 domain the kernel keeps scores in.")

ALIBI = _score('''
    slope = tl.math.exp2(-8.0 * (h + 1) / HEADS)
    distance = tl.abs(offs_m[:, None] - offs_n[None, :]).to(tl.float32)
    return qk - (slope * LOG2E) * distance
''', "score - slope_h * |q_idx - kv_idx|, slope_h = 2 ** (-8 (h + 1) / H), in the log2 domain.")

SOFTCAP = _score('''
    cap = SOFTCAP * LOG2E  # the cap in log2 units: cap * tanh(qk / cap) is the capped score there
    x = qk / cap
    if FAST_TANH:  # the GPU's tanh instruction (max relative error 2**-11)
        t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32,
                                      is_pure=True, pack=1)
    else:
        t = 2.0 / (1.0 + tl.math.exp2(x * (-2.0 * LOG2E))) - 1.0  # tanh(x) = 2 sigmoid(2x) - 1
    return t * cap
''', "SOFTCAP * tanh(score / SOFTCAP), in the log2 domain.")

LEARNED_BIAS = _score('''
    index = offs_n[None, :] - offs_m[:, None] + seq_len - 1
    ok = (offs_m[:, None] < seq_len) & (offs_n[None, :] < seq_len)
    bias = tl.load(extra_ptr + h * extra_stride + index, mask=ok, other=0.0)
    return qk + bias.to(tl.float32) * LOG2E
''', "score + bias[h, kv_idx - q_idx + S - 1] (the bf16 table given as an input), in the log2 domain.")


@dataclass(frozen=True)
class Starter:
    what: str  # one line for the docstring
    hooks: str  # score_mod, mask_mod, kv_range
    forward: str  # ModelNew.forward's signature and body
    constants: str = ""


def _forward(extra: str | None = None, grid: bool = False) -> str:
    args = f"q, k, v, {extra}" if extra else "q, k, v"
    call = ", ".join(["q, k, v"] + ([extra] if extra else []) + (["grid_w=math.isqrt(q.shape[-2])"] if grid else []))
    return f"    def forward(self, {args}):\n        return attention({call})\n"


STARTERS = {
    "1_causal_mask": Starter("causal mask: keys after the query's position are masked", IDENTITY_SCORE + CAUSAL,
                             _forward()),
    "2_document_mask": Starter("document mask: a query sees only its own document's keys", IDENTITY_SCORE + DOCUMENT,
                               _forward("document_ids")),
    "3_relative_positional": Starter("relative positional: score + (q_idx - kv_idx), computed, no table",
                                     RELATIVE_POSITIONAL + NO_MASK + ALL_KEYS, _forward()),
    "4_alibi_bias": Starter("ALiBi: score - slope_h * |q_idx - kv_idx|", ALIBI + NO_MASK + ALL_KEYS, _forward()),
    "5_full_mask": Starter("full attention: no mask, no bias", IDENTITY_SCORE + NO_MASK + ALL_KEYS, _forward()),
    "6_tanh_softcap": Starter("tanh soft-capping: SOFTCAP * tanh(score / SOFTCAP)", SOFTCAP + NO_MASK + ALL_KEYS,
                              _forward(), constants="SOFTCAP = tl.constexpr(10.0)  # the problem's cap\n"),
    "7_causal_mask_long": Starter("causal mask at S = 16384", IDENTITY_SCORE + CAUSAL, _forward()),
    "8_document_mask_long": Starter("document mask at S = 16384", IDENTITY_SCORE + DOCUMENT, _forward("document_ids")),
    "9_learned_relative_bias": Starter("learned relative bias: score + bias[h, kv_idx - q_idx + S - 1]",
                                       LEARNED_BIAS + NO_MASK + ALL_KEYS, _forward("bias")),
    "10_neighborhood_2d": Starter("2D neighborhood attention, 7 x 7 windows, dilation 1 + h % 4 on a W x W grid",
                                  IDENTITY_SCORE + NEIGHBORHOOD, _forward(grid=True)),
}

HEADER = '''"""Hand-written starter kernel (not made by the agent loop) for the attention suite's {name}:
{what}.

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
CONFIG = {config}
'''


def config_of(name: str) -> dict[str, int]:
    return dict(CONFIGS.get(name) or DEFAULT_CONFIG)


def render(name: str) -> str:
    """The candidate file for problem `name`."""
    starter = STARTERS[name]
    text = HEADER.format(name=name, what=starter.what, config=config_of(name))
    text += starter.constants
    text += COMMON.rstrip() + "\n\n"
    text += starter.hooks.strip() + "\n\n\n"
    text += "class ModelNew(nn.Module):\n" + starter.forward
    # two blank lines before each top-level def (a decorator and its def stay together)
    return re.sub(r"(?<!@triton\.jit)\n+(?=@triton\.jit|class |def )", "\n\n\n", text)


def hopper_build(name: str, config: dict[str, int] | None = None, heads: int = 16, seq_len: int = 4096,
                 head_dim: int = 64) -> dict:
    """Compile a starter for the H100 (sm_90a) with no GPU: Triton's own compiler and ptxas, with the
    argument specialisations the launcher would give the realistic shape. What it shows: whether
    the two matmuls are wgmma, the K/V loads pipelined (cp.async), and the registers and spills."""
    import re
    import subprocess
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    from kernelloop.problem import import_source

    module = import_source(EXAMPLES / f"{name}.py", f"hopper_{name}")
    config = config or module.CONFIG
    pointers = ["q_ptr", "k_ptr", "v_ptr", "out_ptr", "extra_ptr"]
    ints = {"seq_len": seq_len, "grid_w": math.isqrt(seq_len), "extra_stride": 2 * seq_len - 1 if "learned" in name
            else seq_len, "stride_b": heads * seq_len * head_dim, "stride_h": seq_len * head_dim, "stride_s": head_dim}
    signature = {**{p: "*bf16" for p in pointers}, "qk_scale": "fp32", **{i: "i32" for i in ints}}
    if "document" in name:
        signature["extra_ptr"] = "*i32"
    order = ["q_ptr", "k_ptr", "v_ptr", "out_ptr", "extra_ptr", "qk_scale", "seq_len", "grid_w", "extra_stride",
             "stride_b", "stride_h", "stride_s"]
    signature = {arg: signature[arg] for arg in order}
    # the launcher marks 16-aligned pointers and ints divisible by 16; without it nothing vectorises
    attrs = {(i,): [["tt.divisibility", 16]] for i, arg in enumerate(order)
             if arg in pointers or ints.get(arg, 1) % 16 == 0}
    constants = {"HEADS": heads, "HEAD_DIM": head_dim, "BLOCK_M": config["BLOCK_M"], "BLOCK_N": config["BLOCK_N"],
                 "DOT_F32": False, "FAST_TANH": True, "SEARCH_STEPS": seq_len.bit_length()}
    signature.update({c: "constexpr" for c in constants})
    kernel = triton.compile(ASTSource(module.attention_fwd, signature, constants, attrs),
                            target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": config["num_warps"], "num_stages": config["num_stages"]})
    ptx = kernel.asm["ptx"]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "k.ptx").write_text(ptx)
        done = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", str(Path(tmp) / "k.ptx"), "-o",
                               str(Path(tmp) / "k.cubin")], capture_output=True, text=True, check=True)
    return {"wgmma": len(re.findall(r"wgmma\.mma_async", ptx)), "cp_async": len(re.findall(r"cp\.async\.cg", ptx)),
            "exp2": len(re.findall(r"ex2\.approx", ptx)), "shared": kernel.metadata.shared,
            "registers": int(re.search(r"Used (\d+) registers", done.stderr).group(1)),
            "spill_bytes": sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", done.stderr))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write examples/attention_candidates/<variant>.py")
    parser.add_argument("--check", action="store_true", help="exit 1 when a shipped file differs from render()")
    args = parser.parse_args()
    stale = [name for name in STARTERS if not (EXAMPLES / f"{name}.py").is_file()
             or (EXAMPLES / f"{name}.py").read_text() != render(name)]
    if args.write:
        for name in stale:
            (EXAMPLES / f"{name}.py").write_text(render(name))
        print(f"wrote {len(stale)} of {len(STARTERS)} starters")
        return 0
    if stale:
        print("stale starters (run --write): " + ", ".join(stale))
        return 1
    print(f"all {len(STARTERS)} starters are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
