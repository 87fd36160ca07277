"""References at their declared precision: a float32 conv and matmul computed in the trusted job's
`declared_precision()` (TF32 off) against the same in float64, beside TF32 on. cuDNN convolves
float32 in TF32 by default, an error of the order of float32's whole `rel` bound (1e-3)."""

import pytest
import torch

from kernelloop.tools.verify._runtime import declared_precision
from kernelloop.tools.verify.compare import tolerance_for

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _relative(value: torch.Tensor, exact: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(value.double() - exact) / torch.linalg.vector_norm(exact))


def _errors(fn, *inputs) -> tuple[float, float]:
    """(TF32 off, TF32 on) errors of fn in float32 against fn in float64."""
    exact = fn(*(x.double() for x in inputs))
    with declared_precision():
        off = _relative(fn(*inputs), exact)
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    try:
        on = _relative(fn(*inputs), exact)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    return off, on


@pytest.mark.parametrize("op", ["conv2d", "matmul"])
def test_a_float32_reference_at_declared_precision_is_float32_accurate(op):
    torch.manual_seed(0)
    if op == "conv2d":
        inputs = (torch.randn(16, 64, 56, 56, device="cuda"), torch.randn(128, 64, 3, 3, device="cuda"))
        fn = lambda x, w: torch.nn.functional.conv2d(x, w, padding=1)  # noqa: E731
    else:
        inputs = (torch.randn(2048, 4096, device="cuda"), torch.randn(4096, 2048, device="cuda"))
        fn = torch.matmul
    off, on = _errors(fn, *inputs)
    print(f"{op}: relative error against float64 with TF32 off {off:.2e}, on {on:.2e}")
    assert off < 1e-5  # float32 rounding over a few thousand products
    assert on < 2 * tolerance_for(torch.float32)["rel"]
    if op == "matmul" and torch.cuda.get_device_capability() >= (8, 0):  # cuBLAS: TF32 from Ampere on
        assert on > 5 * off  # cuDNN may pick an algorithm without TF32 for a conv: printed, not asserted


def test_declared_precision_restores_the_settings_it_found():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with declared_precision():
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
