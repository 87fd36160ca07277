"""SwiGLU's activation forward and backward (BACKWARD = True): silu(gate) * up on bf16 MLP
activations, in float32. The gradients of gate and up are judged; workloads at the MLP widths of
Llama 3 8B (14336) and 70B (28672), and 1000 tokens."""

import torch
import torch.nn as nn

from kernelloop.evals.problems.training import _shapes as s

BACKWARD = True
TOLERANCE = s.BF16_TOLERANCE


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return (torch.nn.functional.silu(gate.float()) * up.float()).to(gate.dtype)


def _inputs(tokens: int, width: int) -> list:
    return [torch.randn(tokens, width, dtype=torch.bfloat16), torch.randn(tokens, width, dtype=torch.bfloat16)]


def get_inputs():
    return _inputs(s.TOKENS, s.MLP_8B)


def get_workloads():
    return {"mlp_14336": get_inputs, "mlp_28672": lambda: _inputs(s.TOKENS // 2, s.MLP_70B),
            "tokens_1000": lambda: _inputs(s.IRREGULAR_TOKENS, s.MLP_8B)}


def get_init_inputs():
    return []
