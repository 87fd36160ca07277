"""LayerNorm forward and backward (BACKWARD = True): bf16 tokens, float32 weight and bias given as
inputs (so the hidden size can differ per workload), float32 statistics. The gradients of x, weight
and bias are judged; workloads at hidden 4096 (8B) and 8192 (70B), and 1000 tokens."""

import torch
import torch.nn as nn

from kernelloop.evals.problems.training import _shapes as s

BACKWARD = True
EPS = 1e-5
TOLERANCE = s.BF16_TOLERANCE


class Model(nn.Module):
    """y = layer_norm(x, weight, bias) over the last dim, computed in float32, returned in bf16."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.layer_norm(x.float(), (x.shape[-1],), weight, bias, EPS)
        return y.to(x.dtype)


def _inputs(tokens: int, hidden: int) -> list:
    return [torch.randn(tokens, hidden, dtype=torch.bfloat16), 1.0 + 0.1 * torch.randn(hidden), 0.1 * torch.randn(hidden)]


def get_inputs():
    return _inputs(s.TOKENS, s.HIDDEN_8B)


def get_workloads():
    return {"hidden_4096": get_inputs, "hidden_8192": lambda: _inputs(s.TOKENS // 2, s.HIDDEN_70B),
            "tokens_1000": lambda: _inputs(s.IRREGULAR_TOKENS, s.HIDDEN_8B)}


def get_init_inputs():
    return []
