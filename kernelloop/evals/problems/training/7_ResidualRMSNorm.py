"""A residual add fused with RMSNorm, forward and backward (BACKWARD = True), as transformer blocks
run it: h = x + residual (bf16), y = rmsnorm(h) * weight (float32 statistics); both h and y are
outputs. The gradients of x, residual and weight are judged; workloads at hidden 4096 and 8192,
and 1000 tokens."""

import torch
import torch.nn as nn

from kernelloop.evals.problems.training import _shapes as s

BACKWARD = True
EPS = 1e-5
TOLERANCE = s.BF16_TOLERANCE


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor):
        h = x + residual
        hf = h.float()
        y = (hf * torch.rsqrt(hf.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight).to(x.dtype)
        return y, h


def _inputs(tokens: int, hidden: int) -> list:
    return [torch.randn(tokens, hidden, dtype=torch.bfloat16), torch.randn(tokens, hidden, dtype=torch.bfloat16),
            1.0 + 0.1 * torch.randn(hidden)]


def get_inputs():
    return _inputs(s.TOKENS, s.HIDDEN_8B)


def get_workloads():
    return {"hidden_4096": get_inputs, "hidden_8192": lambda: _inputs(s.TOKENS // 2, s.HIDDEN_70B),
            "tokens_1000": lambda: _inputs(s.IRREGULAR_TOKENS, s.HIDDEN_8B)}


def get_init_inputs():
    return []
