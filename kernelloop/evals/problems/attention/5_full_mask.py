"""Full attention: no mask, no bias (every query attends to every key).

out = softmax(q k^T / sqrt(D)) v, q/k/v bf16 (B, H, S, D) = (4, 16, 4096, 64). Shared math: _common.
"""

from kernelloop.evals.problems.attention import _common as attn

SHAPE = attn.Shape(batch=4, heads=16, seq_len=4096, head_dim=64)
TOLERANCE = attn.TOLERANCE


def mods(q):
    return None, None


VARIANT = attn.Variant("full mask", mods)


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
    return {attn.FLEX_BASELINE: FlexAttention, **attn.sdpa_baselines(causal=False, head_dim=SHAPE.head_dim)}
