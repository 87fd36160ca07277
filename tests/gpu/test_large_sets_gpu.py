"""The path large input sets take on a GPU: made on the device, written to tensor-set files
through one pinned stage, read back through it.

Run on the H100: `pytest tests/gpu/test_large_sets_gpu.py -q`.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from kernelloop.tools.verify import tensor_files
from kernelloop.tools.verify._runtime import make_inputs
from kernelloop.tools.verify.tensor_files import load_sets, save_sets

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_device_tensors_cross_in_slices_through_one_stage_and_come_back_exact(tmp_path, monkeypatch):
    monkeypatch.setattr(tensor_files, "CHUNK_BYTES", 4096)  # many slices, so the stage is reused
    big = torch.randn(64, 1000, device="cuda")  # rows over a slice: split within the row
    strided = torch.randn(300, 70, device="cuda").t()  # non-contiguous slices
    halves = torch.randn(5000, device="cuda", dtype=torch.float16)
    flags = torch.rand(3000, device="cuda") > 0.5
    complex_conj = torch.randn(700, dtype=torch.complex64, device="cuda").conj()  # a lazy conj view
    cpu = torch.arange(10)
    sets = [[big, strided, 3], [halves, flags, complex_conj, cpu]]
    path = tmp_path / "sets.bin"
    save_sets(path, sets)
    for device in ("cpu", "cuda"):
        with path.open("rb") as handle:
            got, _ = load_sets(handle, path.stat().st_size, device)
        for want, have in zip([v for s in sets for v in s], [v for s in got for v in s]):
            if isinstance(want, torch.Tensor):
                assert have.device.type == device and have.dtype == want.dtype and have.shape == want.shape
                assert torch.equal(have.cpu(), want.resolve_conj().cpu())
            else:
                assert have == want


def test_inputs_are_made_on_the_device_the_same_for_a_seed_and_on_the_cpu_where_only_it_works():
    on_device = SimpleNamespace(get_inputs=lambda: [torch.randn(1000, 10), 7])
    first, again, other = (make_inputs(on_device, seed, "cuda") for seed in (5, 5, 6))
    assert first[0].device.type == "cuda" and first[1] == 7
    assert torch.equal(first[0], again[0]) and not torch.equal(first[0], other[0])
    # numpy needs host memory: on the device this raises, and the CPU makes the set instead
    cpu_only = SimpleNamespace(get_inputs=lambda: [torch.from_numpy(torch.randn(8).numpy() * np.float32(2))])
    made = make_inputs(cpu_only, 5, "cuda")
    assert made[0].device.type == "cpu" and torch.equal(made[0], make_inputs(cpu_only, 5, "cpu")[0])
