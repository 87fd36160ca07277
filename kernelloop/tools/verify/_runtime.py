"""What both of the verifier's child programs need: seeding, device moves, the op recorder.

The trusted reference job (reference_job.py) and the candidate's child (harness.py) run in
different processes; this module holds only code with no say in a verdict by itself.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

INIT_SEED = 42
# aten ops that move, view or allocate memory but compute nothing: they don't count as
# "the reference's compute", and a candidate may call them freely around its kernels.
NON_COMPUTE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill", "fill_",
    "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "permute", "transpose",
    "t", "as_strided", "select", "slice", "unsqueeze", "squeeze", "contiguous", "clone", "copy_",
    "_to_copy", "detach", "alias", "lift_fresh", "split", "split_with_sizes", "chunk", "unbind",
    "flatten", "view_as", "arange", "randn", "rand", "normal_", "uniform_", "lift_fresh_copy",
    "_local_scalar_dense", "item", "sym_size", "sym_stride", "sym_numel", "is_contiguous",
    "unsafe_split", "narrow", "diagonal", "movedim", "unflatten", "expand_as", "resize_", "set_",
})


class OpRecorder(TorchDispatchMode):
    """Records the aten ops a forward dispatches (names without overload)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func._schema.name.split("::")[-1]] += 1
        return func(*args, **(kwargs or {}))

    def compute_ops(self) -> dict[str, int]:
        """Each compute op with how many times it ran (a count, not only a name: a candidate that
        replaces 8 of 28 `add_` calls still runs `add_`, and has done part of the work itself)."""
        return {op: self.ops[op] for op in sorted(self.ops)
                if op.rstrip("_") not in NON_COMPUTE_OPS and op not in NON_COMPUTE_OPS}


@contextmanager
def declared_precision() -> Iterator[None]:
    """Float32 computed in float32: TF32 off for cuBLAS matmuls and cuDNN convolutions while the
    block runs, then both flags as they were. The trusted job computes the reference outputs, by
    which correctness is judged, under it: by default PyTorch lets cuDNN convolve float32 in TF32
    (a 10-bit mantissa, relative error ~1e-3 on a large reduction: the whole float32 `rel` bound),
    and a problem may switch matmuls to TF32 too. The baselines are timed outside it, as PyTorch
    runs them by default (what a candidate is measured against is what a user would get)."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def make_inputs(problem, seed: int, device: str) -> list:
    """The problem's inputs for `seed`, made on `device`. On a GPU, torch's factory functions
    (randn, rand, ...) then fill device memory directly: making multi-GB inputs on the CPU was most
    of a large reference's time (KernelBench main, level 1: up to 17 GB a set). The values differ
    from a CPU run with the same seed, which nothing relies on: the trusted job makes every set a
    verification uses, and hands the candidate a file. A get_inputs that only works on the CPU
    (numpy, .tolist() of a device tensor...) gets the CPU."""
    seed_all(seed)
    if device.startswith("cuda"):
        try:
            with torch.device(device):
                return list(problem.get_inputs())
        except Exception:  # noqa: BLE001 - any failure on the device: the CPU path decides
            seed_all(seed)
    return list(problem.get_inputs())


def to_device(values: list, device: str) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextmanager
def no_collection() -> Iterator[None]:
    """Python's garbage collector held off while a back-to-back window runs (timeit's habit): a
    collection in a process holding torch and triton takes milliseconds, which the parent's clock
    around a window would count as the calls' time, in one window and not the next."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()

