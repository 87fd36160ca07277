"""What the attention problems share: the eager reference, the FlexAttention baseline, the inputs.

Every attention problem computes, over bf16 tensors q, k, v of shape (B, H, S, D):

    scores = (q @ k^T) * D**-0.5                       in float32
    scores = score_mod(scores, b, h, q_idx, kv_idx)    a bias or a cap (identity when None)
    scores = -inf where not mask_mod(b, h, q_idx, kv_idx)   a mask (nothing masked when None)
    out    = softmax(scores, dim=-1).to(bf16) @ v      (B, H, S, D) bf16

`score_mod` and `mask_mod` have FlexAttention's signatures. The eager reference calls them
once per chunk of heads (or of query rows) with broadcast index tensors (b: (B,1,1,1),
h: (1,heads,1,1), q_idx: (1,1,rows,1), kv_idx: (1,1,1,S)); FlexAttention calls them inside its
fused kernel.
So a variant writes its math once, and the reference and the baseline run exactly that math.

A variant's extra inputs (document ids, a bias table) follow q, k, v in forward's arguments.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn as nn
from torch import Tensor

ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]
MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
Mods = tuple[ScoreMod | None, MaskMod | None]

FLEX_BASELINE = "flex_attention"  # the name get_baselines() gives FlexAttention; scores are speedups over it
DTYPE = torch.bfloat16
# Exact implementations land ~4e-3 apart in relative error and 1 bf16 ulp (0.016 at |x| >= 2)
# elementwise; each variant's mod moves the output well past these bounds (tested).
TOLERANCE = {"bfloat16": {"atol": 2e-2, "rtol": 2e-2, "rel": 1e-2}}
# The reference materialises scores one chunk at a time, at most this many float32 elements
# (1 GiB), so even S = 16384 needs a few GiB, not the 16 GiB of a full score matrix.
CHUNK_ELEMENTS = 1 << 28


@dataclass(frozen=True)
class Shape:
    """Sizes of q, k and v: (batch, heads, seq_len, head_dim)."""

    batch: int
    heads: int
    seq_len: int
    head_dim: int


TINY = Shape(batch=2, heads=2, seq_len=200, head_dim=16)  # CPU tests: seconds, not minutes
IRREGULAR = Shape(batch=1, heads=4, seq_len=1000, head_dim=64)  # S not a multiple of any block size


def _no_extra_inputs(shape: Shape) -> list[Tensor]:
    return []


@dataclass(frozen=True)
class Variant:
    """One attention variant: its mods, its extra inputs, and how FlexAttention must build its mask."""

    name: str
    mods: Callable[..., Mods]  # (q, *extra_inputs) -> (score_mod, mask_mod)
    extra_inputs: Callable[[Shape], list[Tensor]] = _no_extra_inputs
    mask_reads_inputs: bool = False  # True: the block mask depends on an input and is built per call
    mask_per_head: bool = False  # True: the mask depends on h, so the block mask has one entry per head


def make_inputs(variant: Variant, shape: Shape) -> list[Tensor]:
    """q, k, v ~ N(0, 1) in bf16 (scores ~ N(0, 1) after scaling), then the variant's extra inputs."""
    size = (shape.batch, shape.heads, shape.seq_len, shape.head_dim)
    return [torch.randn(size, dtype=DTYPE) for _ in range(3)] + variant.extra_inputs(shape)


def chunking(shape: Shape, chunk_elements: int = CHUNK_ELEMENTS) -> tuple[int, int]:
    """(heads, query rows) per chunk of the reference: whole heads while they fit, else rows of one head."""
    per_head = shape.batch * shape.seq_len * shape.seq_len
    if per_head <= chunk_elements:
        return max(1, min(shape.heads, chunk_elements // per_head)), shape.seq_len
    return 1, max(1, chunk_elements // (shape.batch * shape.seq_len))


def eager_attention(q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod | None = None,
                    mask_mod: MaskMod | None = None, chunk_elements: int = CHUNK_ELEMENTS) -> Tensor:
    """Attention as plain PyTorch code writes it (bf16 matmuls, float32 softmax), a chunk at a time.

    Chunks are whole heads where they fit (every shape in the suite), so every chunk sees the
    same positions: torch.compile then makes one kernel for all chunks of a variant whose mods
    do not read h, where chunks of query rows bake each chunk's row offset into a kernel of its
    own, each compiled (and tuned) apart: causal attention in 16 chunks of rows compiled to 17
    kernels, in 16 chunks of heads to 2 (Inductor's CPU backend, torch 2.13), for the same work.
    """
    batch, heads, q_len, head_dim = q.shape
    kv_len = k.shape[-2]
    head_step, rows = chunking(Shape(batch, heads, max(q_len, kv_len), head_dim), chunk_elements)
    scale = head_dim ** -0.5
    b = torch.arange(batch, device=q.device).view(-1, 1, 1, 1)
    kv_idx = torch.arange(kv_len, device=q.device).view(1, 1, 1, -1)
    head_chunks = []
    for h_start in range(0, heads, head_step):
        h_stop = min(h_start + head_step, heads)
        h = torch.arange(h_start, h_stop, device=q.device).view(1, -1, 1, 1)
        keys, values = k[:, h_start:h_stop], v[:, h_start:h_stop]
        row_chunks = []
        for start in range(0, q_len, rows):
            stop = min(start + rows, q_len)
            q_idx = torch.arange(start, stop, device=q.device).view(1, 1, -1, 1)
            scores = torch.matmul(q[:, h_start:h_stop, start:stop], keys.transpose(-2, -1)).float() * scale
            if score_mod is not None:
                scores = score_mod(scores, b, h, q_idx, kv_idx)
            if mask_mod is not None:
                scores = scores.masked_fill(~mask_mod(b, h, q_idx, kv_idx), float("-inf"))
            row_chunks.append(torch.matmul(torch.softmax(scores, dim=-1).to(v.dtype), values))
        head_chunks.append(row_chunks[0] if len(row_chunks) == 1 else torch.cat(row_chunks, dim=2))
    return head_chunks[0] if len(head_chunks) == 1 else torch.cat(head_chunks, dim=1)


class EagerAttention(nn.Module):
    """The reference: a variant's attention in eager PyTorch. Subclasses set `variant`."""

    variant: ClassVar[Variant]

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *extra_inputs: Tensor) -> Tensor:
        score_mod, mask_mod = self.variant.mods(q, *extra_inputs)
        return eager_attention(q, k, v, score_mod, mask_mod)


@functools.cache
def _compiled(fn: Callable) -> Callable:
    """One compiled copy per process, as users keep a module-level torch.compile(flex_attention)."""
    return torch.compile(fn)


class FlexAttentionBaseline(nn.Module):
    """FlexAttention as its users run it: torch.compile(flex_attention) with a BlockMask.

    A mask that reads only positions (causal) gets its BlockMask once per sequence length,
    reused on every call, as a model reuses it across layers and steps; it is built uncompiled,
    since it is built once and outside every timed call, and compiling create_block_mask would
    only add a compile to the cost of timing the baseline. A mask that reads an input (document
    ids) gets a new BlockMask on every call from a compiled create_block_mask, as packed-sequence
    training builds one per batch (that build is part of each timed call). `compiled=False` runs
    FlexAttention unfused (for CPU tests only: it materialises the scores).
    """

    variant: ClassVar[Variant]

    def __init__(self, compiled: bool = True):
        super().__init__()
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        flex: Callable[..., Any] = flex_attention  # one declared type for both branches below
        self.flex_attention = _compiled(flex) if compiled else flex
        self.create_block_mask = _compiled(create_block_mask) if compiled else create_block_mask
        self.create_static_block_mask = create_block_mask
        self._static_masks: dict[tuple, object] = {}

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *extra_inputs: Tensor) -> Tensor:
        score_mod, mask_mod = self.variant.mods(q, *extra_inputs)
        block_mask = None if mask_mod is None else self._block_mask(mask_mod, q, k)
        return self.flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask)

    def _block_mask(self, mask_mod: MaskMod, q: Tensor, k: Tensor):
        q_len, kv_len = q.shape[-2], k.shape[-2]
        # None broadcasts the mask over heads: right only where the mask does not read h
        heads = q.shape[1] if self.variant.mask_per_head else None
        if self.variant.mask_reads_inputs:
            return self.create_block_mask(mask_mod, q.shape[0], heads, q_len, kv_len, device=q.device)
        key = (q_len, kv_len, heads, str(q.device))
        if key not in self._static_masks:
            self._static_masks[key] = self.create_static_block_mask(mask_mod, None, heads, q_len, kv_len,
                                                                    device=q.device)
        return self._static_masks[key]


# Where SDPA computes a variant (no mask, or causal), its fused backends are the strongest
# baselines there are: each is timed as its own baseline, so a report can name the faster.
SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}


class SdpaBaseline(nn.Module):
    """F.scaled_dot_product_attention held to one backend (no fallback: a name never hides another
    backend's time). Subclasses set `backend` (a key of SDPA_BACKENDS) and `causal`."""

    backend: ClassVar[str]
    causal: ClassVar[bool]

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(getattr(SDPBackend, SDPA_BACKENDS[self.backend])):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=self.causal)


def sdpa_baseline(name: str, causal: bool) -> type[SdpaBaseline]:
    """The SdpaBaseline class for backend `name` ('sdpa_flash', 'sdpa_cudnn')."""
    return type(f"Sdpa_{name}_{'causal' if causal else 'full'}", (SdpaBaseline,), {"backend": name, "causal": causal})


@functools.cache
def _sdpa_runs(name: str, causal: bool, head_dim: int) -> bool:
    """Whether backend `name` runs bf16 attention of this head size on this process's GPU."""
    if not torch.cuda.is_available():
        return False
    q = torch.randn(1, 2, 256, head_dim, device="cuda", dtype=DTYPE)
    try:
        sdpa_baseline(name, causal)()(q, q, q)
        torch.cuda.synchronize()
    except RuntimeError:  # "No available kernel": this backend can't run these inputs here
        return False
    return True


def sdpa_baselines(causal: bool, head_dim: int) -> dict[str, type[SdpaBaseline]]:
    """The SDPA backends that run here, by baseline name; none without a GPU (SDPA is timed only there)."""
    return {name: sdpa_baseline(name, causal) for name in SDPA_BACKENDS if _sdpa_runs(name, causal, head_dim)}


# --------------------------------------------------------------------------- extra inputs


def random_document_ids(shape: Shape, docs_per_row: float = 8.0) -> list[Tensor]:
    """Packed sequences: int32 (B, S) document ids, non-decreasing along S, starting at 0.

    Each position after the first starts a new document with probability docs_per_row / S,
    so lengths vary (geometric), including documents of a single token.
    """
    starts = torch.rand(shape.batch, shape.seq_len) < docs_per_row / shape.seq_len
    starts[:, 0] = False
    return [starts.cumsum(dim=-1).to(torch.int32)]


def random_relative_bias(shape: Shape) -> list[Tensor]:
    """A learned-style relative position table: bf16 (H, 2S - 1), entry j for offset kv - q = j - (S - 1)."""
    return [torch.randn(shape.heads, 2 * shape.seq_len - 1, dtype=DTYPE)]


def memory_per_chunk_bytes(shape: Shape) -> int:
    """Peak extra bytes of the reference per chunk (bf16 scores + two float32 copies)."""
    head_step, rows = chunking(shape)
    return shape.batch * head_step * rows * shape.seq_len * (2 + 4 + 4)
