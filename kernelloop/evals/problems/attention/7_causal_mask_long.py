"""Causal attention, long sequence: query i attends to keys 0..i.

Same math as 1_causal_mask at q/k/v bf16 (B, H, S, D) = (1, 16, 16384, 64). The reference
works in query chunks (see _common), so it needs a few GiB, not a 16 GiB score matrix.
"""

from kernelloop.evals.problems.attention import _common as attn

SHAPE = attn.Shape(batch=1, heads=16, seq_len=16384, head_dim=64)
TOLERANCE = attn.TOLERANCE


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def mods(q):
    return None, causal


VARIANT = attn.Variant("causal mask, long", mods)


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
    # SDPA computes this variant too: its flash and cuDNN backends, where they run here
    return {attn.FLEX_BASELINE: FlexAttention, **attn.sdpa_baselines(causal=True, head_dim=SHAPE.head_dim)}
