"""Softmax cross-entropy over Llama 3's 128256-token vocabulary, forward and backward (BACKWARD =
True): bf16 logits, int64 targets, the mean loss in float32. The gradient of the logits is judged
(the targets are integers: none); workloads at 4096 and 1000 tokens, and a 32000-token vocabulary."""

import torch
import torch.nn as nn

from kernelloop.evals.problems.training import _shapes as s

BACKWARD = True
TOLERANCE = s.BF16_TOLERANCE


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits.float(), targets)


def _inputs(tokens: int, vocab: int) -> list:
    return [torch.randn(tokens, vocab, dtype=torch.bfloat16) * 2.0, torch.randint(0, vocab, (tokens,))]


def get_inputs():
    return _inputs(4096, s.VOCAB)


def get_workloads():
    return {"vocab_128256": get_inputs, "tokens_1000": lambda: _inputs(s.IRREGULAR_TOKENS, s.VOCAB),
            "vocab_32000": lambda: _inputs(s.TOKENS, 32000)}


def get_init_inputs():
    return []
