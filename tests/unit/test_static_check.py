"""Each static rule on a small snippet that breaks it, and honest code that passes them all."""

import pytest

from kernelloop.tools.verify.static_check import first_violation

HONEST = '''
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.linear = nn.Linear(dim, dim)
        self._block = 1024

    def forward(self, x):
        y = torch.empty_like(x)
        k[(triton.cdiv(x.numel(), self._block),)](x, y, x.numel(), BLOCK=self._block)
        return y
'''


def test_honest_code_passes():
    assert first_violation(HONEST) is None


@pytest.mark.parametrize("snippet, expected", [
    ("import subprocess", "forbidden import"),
    ("import os", "forbidden import"),
    ("from socket import socket", "forbidden import"),
    ("import ctypes", "forbidden import"),
    ("import torch.multiprocessing", "forbidden import"),
    ("from . import x", "forbidden import"),
    ("x = eval('1')", "forbidden call"),
    ("f = open('/etc/passwd')", "forbidden call"),
    ("import torch\ntorch.save(1, 'x')", "forbidden call"),
    ("import torch\nx = torch._C", "forbidden call"),
    ("y = (1).__class__.__bases__", "forbidden call"),
    ("b = __builtins__", "forbidden call"),
    ("import torch\nsrc = torch.utils.cpp_extension.load_inline('m', cpp_sources='int f(){ system(\"ls\"); }')", "forbidden call"),
    ("try:\n    x = 1\nexcept Exception:\n    x = 2", "try/except"),
    ("class ModelNew(Model):\n    pass", "reference model"),
    ("import torch\ntorch.allclose = lambda *a, **k: True", "monkeypatch"),
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True", "monkeypatch"),
    ("from torch import Tensor\nTensor.__eq__ = None", "monkeypatch"),
    ("def f():\n    global g\n    g = 1", "monkeypatch"),
    ("import torch\ns = torch.cuda.Stream()", "stream or thread"),
    ("import torch\nwith torch.cuda.stream(None):\n    pass", "stream or thread"),
])
def test_each_rule_rejects_its_snippet(snippet, expected):
    reason = first_violation(snippet)
    assert reason is not None and reason.startswith(expected), reason


def test_triton_load_is_not_file_io():
    assert first_violation("import triton.language as tl\ndef f(p):\n    return tl.load(p)") is None
