"""Attention with a learned relative position bias (T5 / Swin style), no mask.

score(q_idx, kv_idx) += bias[h, kv_idx - q_idx + S - 1], bias a bf16 (H, 2S - 1) table given
as an input. q/k/v bf16 (B, H, S, D) = (4, 16, 4096, 64). Shared math: _common.

Not the reference work's relative positional variant (that is 3_relative_positional: a bias
computed from the positions, no table); this one was the suite's number 3 before, as 3_relative_bias.

FlexAttention is a weak baseline here: on torch 2.11 / an H100 its fused kernel for a score_mod
that gathers from a captured table took 23 ms per call, against 0.7 ms with no score_mod
(measured; docs/results/h100_attention_baselines/report.md). Read speedups over it with that in mind.
"""

from kernelloop.evals.problems.attention import _common as attn

SHAPE = attn.Shape(batch=4, heads=16, seq_len=4096, head_dim=64)
TOLERANCE = attn.TOLERANCE


def mods(q, bias):
    offset = q.shape[-2] - 1

    def relative_bias(score, b, h, q_idx, kv_idx):
        return score + bias[h, kv_idx - q_idx + offset]

    return relative_bias, None


VARIANT = attn.Variant("learned relative bias", mods, extra_inputs=attn.random_relative_bias)


class Model(attn.EagerAttention):
    """forward(q, k, v, bias) -> (B, H, S, D) bf16."""

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
