"""Spatial neighborhood attention (2D, dilated): image tokens attend to a window of their grid neighbours.

The S tokens are a square grid, row-major: token t sits at row t // W, column t % W, W = sqrt(S)
(64 x 64 here, as a 512 x 512 image in 8 x 8 patches). Each query attends to a KERNEL_SIZE x
KERNEL_SIZE window of tokens, dilated: head h uses dilation d = 1 + h % 4, so the four dilations
1-4 each have a quarter of the heads (as DiNAT mixes dilated and dense neighborhoods).

Per axis this is neighborhood attention as NATTEN defines it: with dilation d a coordinate x
belongs to the sub-grid of coordinates with the same x % d; along that sub-grid the window of
KERNEL_SIZE positions is centred on the query and shifted inwards at the edges (the centre is
clamped), so every query has exactly KERNEL_SIZE**2 keys. For d = 1 this is attention-gym's
NATTEN mask (attn_gym/masks/natten.py). Every sub-grid needs KERNEL_SIZE positions: W >= 4 * 7.

FlexAttention gets it as a mask_mod with a BlockMask per head (built once per length); the
mask reads positions and the head only. q/k/v bf16 (B, H, S, D) = (4, 16, 4096, 64). Shared math: _common.
"""

import math

import torch

from kernelloop.evals.problems.attention import _common as attn

SHAPE = attn.Shape(batch=4, heads=16, seq_len=64 * 64, head_dim=64)
TOLERANCE = attn.TOLERANCE
KERNEL_SIZE = 7  # NATTEN's and DiNAT's usual window
DILATIONS = 4  # head h: dilation 1 + h % DILATIONS
# The CPU tests' shape: the smallest grid every dilation fits (28 = 4 x 7), S = 784 is no multiple of 64.
TEST_SHAPE = attn.Shape(batch=1, heads=4, seq_len=28 * 28, head_dim=16)
IRREGULAR = attn.Shape(batch=1, heads=4, seq_len=36 * 36, head_dim=64)  # S = 1296: no multiple of 64 either


def grid_width(seq_len: int) -> int:
    """W of the square W x W grid of `seq_len` tokens."""
    width = math.isqrt(seq_len)
    if width * width != seq_len or width < DILATIONS * KERNEL_SIZE:
        raise ValueError(f"S = {seq_len} is no square grid of side >= {DILATIONS * KERNEL_SIZE}")
    return width


def _in_window(q, kv, dilation, length):
    """Along one axis: kv is in q's dilated, edge-clamped window of KERNEL_SIZE positions."""
    radius = KERNEL_SIZE // 2
    group = q % dilation
    count = (length - group + dilation - 1) // dilation  # positions of q's sub-grid along the axis
    centre = torch.minimum((q // dilation).clamp(min=radius), count - 1 - radius)
    return (kv % dilation == group) & ((centre - kv // dilation).abs() <= radius)


def mods(q):
    width = grid_width(q.shape[-2])

    def neighborhood(b, h, q_idx, kv_idx):
        dilation = 1 + h % DILATIONS
        return (_in_window(q_idx // width, kv_idx // width, dilation, width)
                & _in_window(q_idx % width, kv_idx % width, dilation, width))

    return None, neighborhood


VARIANT = attn.Variant("neighborhood 2d", mods, mask_per_head=True)


class Model(attn.EagerAttention):
    """forward(q, k, v) -> (B, H, S, D) bf16."""

    variant = VARIANT


class FlexAttention(attn.FlexAttentionBaseline):
    variant = VARIANT


def get_inputs(shape=SHAPE):
    return attn.make_inputs(VARIANT, shape)


def get_init_inputs():
    return []


def get_input_variants():
    return [attn.make_inputs(VARIANT, IRREGULAR)]


def get_baselines():
    return {attn.FLEX_BASELINE: FlexAttention}
