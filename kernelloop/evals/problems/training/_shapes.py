"""Shapes the training suite's workloads share: tokens (batch x sequence) and the widths of Llama 3
8B and 70B, and an irregular token count no kernel sized for powers of two covers."""

TOKENS = 8192
IRREGULAR_TOKENS = 1000
HIDDEN_8B, HIDDEN_70B = 4096, 8192
MLP_8B, MLP_70B = 14336, 28672
VOCAB = 128256

# bf16 activations, float32 statistics: a reduction over thousands of bf16 values lands within a few
# bf16 ulps of the float32 reference, its gradients likewise
BF16_TOLERANCE = {"bfloat16": {"atol": 2e-2, "rtol": 2e-2, "rel": 1e-2}, "float32": {"atol": 1e-3, "rtol": 1e-3, "rel": 2e-3}}
