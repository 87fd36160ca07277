"""Relative positional attention as the reference work defines it: score + (q_idx - kv_idx), no mask.

The bias is computed from the positions (FlexAttention's own relative-position example), not read
from a table: the learned-table variant is 9_learned_relative_bias. Unscaled, the bias grows with
distance, so a query's weight falls mostly on the first keys; that is the math as given, and a
kernel is held to it on every input set. q/k/v bf16 (B, H, S, D) = (4, 16, 4096, 64). Shared math: _common.
"""

from kernelloop.evals.problems.attention import _common as attn

SHAPE = attn.Shape(batch=4, heads=16, seq_len=4096, head_dim=64)
TOLERANCE = attn.TOLERANCE


def relative_positional(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx)


def mods(q):
    return relative_positional, None


VARIANT = attn.Variant("relative positional", mods)


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
    return [attn.make_inputs(VARIANT, attn.IRREGULAR)]


def get_baselines():
    return {attn.FLEX_BASELINE: FlexAttention}
