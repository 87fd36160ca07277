"""The reference outputs the verifier compares with, and the device it compares on.

Only the parent's compare counts (the child's is a gate before timing, in code the candidate
shares a process with). On a GPU worker the parent compares on the worker's GPU: the reference
outputs stay there between candidates and each candidate's outputs cross once. On the H100
machine that took 0.02-0.07 s against 0.4-0.6 s on its 16 CPU cores, for up to 200 MB of outputs
(docs/results/verifier_bench). The GPU is idle meanwhile: the candidate's process has ended and
the next one waits for its job.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path

import torch

# Reference outputs kept on the GPU across candidates, all problems together; a larger reference
# is moved over in chunks at each compare instead.
GPU_CACHE_BYTES = 2 << 30


def compare_device(device: str, gpu_index: int | None, on_gpu: bool = True) -> torch.device:
    """This process's name for the worker's GPU, or the CPU when it has none or cannot see it.

    gpu_index is the physical index the sandbox gives its child; a process started with
    CUDA_VISIBLE_DEVICES (a Ray actor, a pool worker) numbers its GPUs from 0 within that list."""
    if not on_gpu or device != "cuda" or not torch.cuda.is_available():
        return torch.device("cpu")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return torch.device("cuda", gpu_index or 0)
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    if gpu_index is None:
        return torch.device("cuda", 0) if ids else torch.device("cpu")
    if str(gpu_index) in ids:
        return torch.device("cuda", ids.index(str(gpu_index)))
    return torch.device("cpu")


def _nbytes(sets: list) -> int:
    return sum(t.numel() * t.element_size() for outputs in sets for t in outputs if isinstance(t, torch.Tensor))


class ReferenceOutputs:
    """Per reference file: its output sets memory-mapped on the CPU (loaded once), and a copy on
    the compare device while they fit in GPU_CACHE_BYTES (least recently used go first)."""

    def __init__(self, device: torch.device):
        self.device = device
        self._mapped: dict[Path, list] = {}
        self._resident: OrderedDict[Path, list] = OrderedDict()

    def mapped(self, path: Path) -> list:
        """The output sets as saved (CPU, memory-mapped; the file also holds the inputs)."""
        if path not in self._mapped:
            self._mapped[path] = torch.load(path, weights_only=True, mmap=True)["outputs"]
        return self._mapped[path]

    def for_compare(self, path: Path) -> list:
        """The output sets on the compare device where they fit, else as mapped."""
        if self.device.type == "cpu":
            return self.mapped(path)
        if path in self._resident:
            self._resident.move_to_end(path)
            return self._resident[path]
        sets = self.mapped(path)
        size = _nbytes(sets)
        if size > GPU_CACHE_BYTES:
            return sets
        while self._resident and size + sum(map(_nbytes, self._resident.values())) > GPU_CACHE_BYTES:
            self._resident.popitem(last=False)
        self._resident[path] = [[t.to(self.device) if isinstance(t, torch.Tensor) else t for t in outputs]
                                for outputs in sets]
        return self._resident[path]
