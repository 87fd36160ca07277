"""A hand-written, honest candidate for KernelBench level 1 problem 11 (4D tensor-matrix product,
a 6.4 GB output in the v0 release): C[b,i,j,:] = A[b,i,j,:] @ B as one (b*i*j, l) @ (l, k) Triton
GEMM in full float32 (input_precision="ieee", as the float32 reference computes). It exists to run
the verifier's large-output path end to end on a GPU, not to be fast."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None].to(tl.int64) * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None].to(tl.int64) * N + cols[None, :], acc, mask=mask)


class ModelNew(nn.Module):
    def forward(self, A, B):
        b, i, j, l = A.shape  # noqa: E741 - KernelBench's own index names
        k = B.shape[1]
        a2 = A.reshape(b * i * j, l).contiguous()
        out = torch.empty((b * i * j, k), device=A.device, dtype=A.dtype)
        grid = (triton.cdiv(a2.shape[0], 128), triton.cdiv(k, 128))
        matmul_kernel[grid](a2, B.contiguous(), out, a2.shape[0], k, l, BLOCK_M=128, BLOCK_N=128, BLOCK_K=32)
        return out.reshape(b, i, j, k)
