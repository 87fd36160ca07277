"""Causal attention forward and backward (BACKWARD = True): query i attends to keys 0..i, bf16
q/k/v (B, H, S, D) with Llama 3's 32 heads of 128, softmax in float32 (the attention suite's eager
reference, differentiated by autograd). The gradients of q, k and v are judged; workloads at 2048
and 8192 tokens, and 1000 (no block size divides it). FlexAttention is the baseline."""

from kernelloop.evals.problems.attention import _common as attn

BACKWARD = True
SHAPE = attn.Shape(batch=4, heads=32, seq_len=2048, head_dim=128)
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


def get_workloads():
    return {"seq_2048": get_inputs,
            "seq_8192": lambda: attn.make_inputs(VARIANT, attn.Shape(batch=1, heads=32, seq_len=8192, head_dim=128)),
            "seq_1000": lambda: attn.make_inputs(VARIANT, attn.Shape(batch=4, heads=32, seq_len=1000, head_dim=128))}


def get_init_inputs():
    return []


def get_baselines():
    return {attn.FLEX_BASELINE: FlexAttention}
