"""RMSNorm forward and backward (BACKWARD = True), Llama style: bf16 tokens, a float32 weight given
as an input, the mean of squares in float32. The gradients of x and weight are judged; workloads at
hidden 4096 (8B) and 8192 (70B), and 1000 tokens."""

import torch
import torch.nn as nn

from kernelloop.evals.problems.training import _shapes as s

BACKWARD = True
EPS = 1e-5
TOLERANCE = s.BF16_TOLERANCE


class Model(nn.Module):
    """y = x / sqrt(mean(x^2, -1) + eps) * weight, in float32, returned in bf16."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight).to(x.dtype)


def _inputs(tokens: int, hidden: int) -> list:
    return [torch.randn(tokens, hidden, dtype=torch.bfloat16), 1.0 + 0.1 * torch.randn(hidden)]


def get_inputs():
    return _inputs(s.TOKENS, s.HIDDEN_8B)


def get_workloads():
    return {"hidden_4096": get_inputs, "hidden_8192": lambda: _inputs(s.TOKENS // 2, s.HIDDEN_70B),
            "tokens_1000": lambda: _inputs(s.IRREGULAR_TOKENS, s.HIDDEN_8B)}


def get_init_inputs():
    return []
