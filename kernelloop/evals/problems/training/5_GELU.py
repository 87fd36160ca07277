"""GELU (tanh approximation) forward and backward (BACKWARD = True) on bf16 MLP activations, in
float32. The gradient of x is judged; workloads at the MLP widths of Llama 3 8B and 70B, and 1000
tokens."""

import torch
import torch.nn as nn

from kernelloop.evals.problems.training import _shapes as s

BACKWARD = True
TOLERANCE = s.BF16_TOLERANCE


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x.float(), approximate="tanh").to(x.dtype)


def _inputs(tokens: int, width: int) -> list:
    return [torch.randn(tokens, width, dtype=torch.bfloat16)]


def get_inputs():
    return _inputs(s.TOKENS, s.MLP_8B)


def get_workloads():
    return {"mlp_14336": get_inputs, "mlp_28672": lambda: _inputs(s.TOKENS // 2, s.MLP_70B),
            "tokens_1000": lambda: _inputs(s.IRREGULAR_TOKENS, s.MLP_8B)}


def get_init_inputs():
    return []
