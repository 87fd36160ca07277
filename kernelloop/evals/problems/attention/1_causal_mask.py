"""Causal attention: query i attends to keys 0..i.

out = softmax(q k^T / sqrt(D), masked to kv_idx <= q_idx) v, bf16, q/k/v (B, H, S, D) =
(4, 16, 4096, 64). The shared math (reference, FlexAttention baseline, inputs) is in _common.
"""

from kernelloop.evals.problems.attention import _common as attn

SHAPE = attn.Shape(batch=4, heads=16, seq_len=4096, head_dim=64)
TOLERANCE = attn.TOLERANCE


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def mods(q):
    return None, causal


VARIANT = attn.Variant("causal mask", mods)


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
