"""Rotary position embedding forward and backward (BACKWARD = True), Llama 3 style (theta 500000,
the half-split rotation): bf16 queries (B, S, H, D), int64 positions; the angles in float32. The
gradient of the queries is judged (positions are integers); workloads with 32 query heads, 8 KV
heads at 8192 tokens, and 1000 positions."""

import torch
import torch.nn as nn

BACKWARD = True
THETA = 500000.0
HEAD_DIM = 128
TOLERANCE = {"bfloat16": {"atol": 2e-2, "rtol": 2e-2, "rel": 1e-2}}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))

    def forward(self, q: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        angles = positions.float()[:, None] * self.inv_freq[None, :]  # (S, D/2)
        cos, sin = angles.cos()[None, :, None, :], angles.sin()[None, :, None, :]
        x1, x2 = q.float().chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(q.dtype)


def _inputs(batch: int, seq: int, heads: int) -> list:
    return [torch.randn(batch, seq, heads, HEAD_DIM, dtype=torch.bfloat16), torch.arange(seq)]


def get_inputs():
    return _inputs(4, 2048, 32)


def get_workloads():
    return {"heads_32": get_inputs, "kv_heads_8": lambda: _inputs(1, 8192, 8), "positions_1000": lambda: _inputs(8, 1000, 32)}


def get_init_inputs():
    return []
