"""Each static rule on a small snippet that breaks it, and honest code that passes them all."""

import pytest

from kernelloop.problem import Candidate
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
    # a name bound nowhere is the reference's (shared_names.py): `torch` the candidate never imported
    ("torch.equal = lambda *a: True", "monkeypatch"),
    ("t = torch\nt.equal = None", "monkeypatch"),
    ("def f():\n    helper().equal = None", "monkeypatch"),
    # numpy's unpicklers run what a crafted .npy names (issue 35: claims forged through a pickle exec)
    ("import numpy as np\nx = np.lib.format.read_array(r, allow_pickle=True)", "forbidden"),
    ("import numpy as np\nx = np.lib.format.read_array(r)", "forbidden"),
    ("from numpy.lib.format import read_array", "forbidden import"),
    ("import numpy as np\nz = np.lib.npyio.NpzFile(f)", "forbidden"),
    ("import numpy as np\nx = np.asarray(r, allow_pickle=True)", "forbidden call"),
    ("import torch\ns = torch.cuda.Stream()", "stream or thread"),
    ("import torch\nwith torch.cuda.stream(None):\n    pass", "stream or thread"),
])
def test_each_rule_rejects_its_snippet(snippet, expected):
    reason = first_violation(snippet)
    assert reason is not None and reason.startswith(expected), reason


def test_triton_load_is_not_file_io():
    assert first_violation("import triton.language as tl\ndef f(p):\n    return tl.load(p)") is None


# Ways round the rules an adversarial review found; each must be caught with its reason.
BYPASSES = {
    # modules re-exported by allowed packages, reached by a from-import or a dotted import
    "from torch import os": ("from torch import os\nos.abort()", "forbidden import"),
    "from torch import sys": ("from torch import sys", "forbidden import"),
    "from torch import threading": ("from torch import threading", "forbidden import"),
    "from torch import builtins": ("from torch import builtins", "forbidden import"),
    "from torch import load": ("from torch import load", "forbidden import"),
    "from torch import save as": ("from torch import save as keep", "forbidden import"),
    "from numpy import load": ("from numpy import load", "forbidden import"),
    "from numpy import fromregex": ("from numpy import fromregex", "forbidden import"),
    "import torch.os": ("import torch.os as tos", "forbidden import"),
    "from enum import bltns": ("from enum import bltns", "forbidden import"),
    "from cpp_extension import subprocess": ("from torch.utils.cpp_extension import subprocess", "forbidden import"),
    "from tunable import mp": ("from torch.cuda.tunable import mp", "forbidden import"),
    "triton.runtime.build": ("from triton.runtime.build import compile_module_from_src", "forbidden import"),
    "import torch._C as": ("import torch._C as C", "forbidden import"),
    "from torch import _C": ("from torch import _C", "forbidden import"),
    "star import": ("from operator import *", "forbidden import"),
    "enum.bltns attribute": ("import enum\nf = enum.bltns", "forbidden call"),
    "triton.knobs": ("import triton\nv = triton.knobs.getenv", "forbidden call"),
    "kernel .src": ("import triton\n@triton.jit\ndef k(x):\n    pass\ns = k.src", "forbidden call"),
    # attributes looked up by a string
    "attrgetter": ("import operator\ng = operator.attrgetter('__globals__')", "forbidden call"),
    "attrgetter dotted": ("import operator, torch\ne = operator.attrgetter('os.environ')(torch)", "forbidden call"),
    "methodcaller": ("import operator\nm = operator.methodcaller('__reduce__')", "forbidden call"),
    "from operator import attrgetter": ("from operator import attrgetter", "forbidden import"),
    "dunder string": ("name = '__glo' 'bals__'", "forbidden call"),
    "dunder string built": ("part = 'glob'\nname = f'__{part}als__'", "forbidden call"),
    "subclasses string": ("name = '__subclasses__'", "forbidden call"),
    "frame name string": ("name = 'f_back'", "forbidden call"),
    "format field attribute": ("import torch\nkey = '{0.os.environ[KEY]}'.format(torch)", "forbidden call"),
    "get_type_hints": ("import typing\ndef f(x: 'int'):\n    pass\nh = typing.get_type_hints(f)", "forbidden call"),
    # frames and their builtins
    "f_back": ("def f(frame):\n    return frame.f_back", "forbidden call"),
    "gi_frame": ("def g():\n    yield\nb = g().gi_frame.f_builtins", "forbidden call"),
    "tb_frame": ("def f(tb):\n    return tb.tb_frame", "forbidden call"),
    "cr_frame": ("def f(coro):\n    return coro.cr_frame", "forbidden call"),
    "__traceback__": ("def f(e):\n    return e.__traceback__", "forbidden call"),
    "__exit__ swallows": ("class C:\n    def __exit__(self, kind, error, tb):\n        return True", "try/except"),
    "__file__ name": ("path = __file__", "forbidden call"),
    "__spec__ name": ("spec = __spec__", "forbidden call"),
    "__del__ def": ("class C:\n    def __del__(self):\n        pass", "forbidden call"),
    # registering, overriding or intercepting operators
    "torch.library.impl": ("import torch\n@torch.library.impl('aten::relu', 'CPU')\ndef r(x):\n    return x", "monkeypatch"),
    "Library": ("import torch\nlib = torch.library.Library('aten', 'IMPL')", "monkeypatch"),
    "from torch.library import": ("from torch.library import Library", "monkeypatch"),
    "register_kernel": ("import torch\ntorch.library.register_kernel('aten::relu', 'cpu')", "monkeypatch"),
    "custom_op": ("import torch\n@torch.library.custom_op('kl::f', mutates_args=())\ndef f(x: torch.Tensor) -> torch.Tensor:\n"
                  "    return x", "monkeypatch"),
    "py_impl": ("import torch\nh = torch.ops.aten.relu.default.py_impl", "monkeypatch"),
    "python_dispatch": ("from torch.utils._python_dispatch import TorchDispatchMode", "monkeypatch"),
    "TorchFunctionMode": ("from torch.overrides import TorchFunctionMode", "monkeypatch"),
    "__torch_function__ def": ("class M:\n    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
                               "        return True", "monkeypatch"),
    "__torch_dispatch__ def": ("class M:\n    def __torch_dispatch__(self, func, types, args=(), kwargs=None):\n"
                               "        return True", "monkeypatch"),
    # writes through an alias of a module or a class
    "alias torch": ("import torch\nt = torch\nt.equal = lambda a, b: True", "monkeypatch"),
    "alias functional": ("import torch\nF = torch.nn.functional\nF.relu = lambda x: x", "monkeypatch"),
    "alias Tensor": ("import torch\nT = torch.Tensor\nT.allclose = None", "monkeypatch"),
    "alias chain": ("import torch\na = torch\nb = a\nb.equal = None", "monkeypatch"),
    "alias tuple": ("import torch\na, b = torch, 1\na.equal = None", "monkeypatch"),
    "alias walrus": ("import torch\nif (a := torch):\n    a.equal = None", "monkeypatch"),
    "alias for": ("import torch\nfor m in (torch, torch.Tensor):\n    m.allclose = None", "monkeypatch"),
    "alias list item": ("import torch\nms = [torch]\nms[0].equal = None", "monkeypatch"),
    "alias type()": ("def f(x):\n    T = type(x)\n    T.equal = None", "monkeypatch"),
    "type() target": ("def f(x):\n    type(x).equal = None", "monkeypatch"),
    "alias parameter": ("import torch\ndef patch(m):\n    m.assert_close = None\npatch(torch.testing)", "monkeypatch"),
    "alias keyword": ("import torch\ndef patch(x, m=None):\n    m.equal = None\npatch(1, m=torch)", "monkeypatch"),
    "alias default": ("import torch\ndef patch(m=torch):\n    m.equal = None", "monkeypatch"),
    "alias returned": ("import torch\ndef g():\n    return torch\ng().equal = None", "monkeypatch"),
    "alias self attribute": ("import torch\nclass C:\n    def __init__(self):\n        self.F = torch.nn.functional\n"
                             "        self.F.relu = None", "monkeypatch"),
    "alias class attribute": ("import torch\nclass C:\n    t = torch\nC.t.equal = None", "monkeypatch"),
    "alias del": ("import torch\nt = torch\ndel t.equal", "monkeypatch"),
    "torch.__dict__": ("import torch\ntorch.__dict__['equal'] = None", "monkeypatch"),
    "vars(torch)": ("import torch\nvars(torch)['equal'] = None", "forbidden call"),
    # native code held in variables or built from pieces
    "native in variable": ("src = 'int f(){ system(\"ls\"); return 0; }'", "forbidden call"),
    "native concatenated": ("src = 'int f(){ sys' + 'tem(\"ls\"); }'", "forbidden call"),
    "native f-string": ("n = 'sys'\nsrc = f'{n}tem(\"ls\");'", "forbidden call"),
    "native format": ("src = '{}en(\"env\", \"r\");'.format('pop')", "forbidden call"),
    "native join": ("src = ''.join(['sys', 'tem(\"ls\");'])", "forbidden call"),
    "native augmented": ("src = 'sys'\nsrc += 'tem(\"ls\");'", "forbidden call"),
    "native percent": ("src = '%stem(\"ls\");' % 'sys'", "forbidden call"),
    "native reversed": ("src = ';)\"sl\"(metsys'[::-1]", "forbidden call"),
    "native chr": ("src = ''.join(map(chr, [115, 121, 115, 116, 101, 109, 40]))", "forbidden call"),
    "native fromhex": ("src = bytes.fromhex('73797374656d28').decode()", "forbidden call"),
    "native line splice": ("src = 'sys\\\\\\ntem(\"ls\");'", "forbidden call"),
    "native function pointer": ("src = 'auto f = &system;'", "forbidden call"),
    "native token pasting": ("src = '#define S(a, b) a##b\\nS(sys, tem)(\"ls\");'", "forbidden call"),
    "native getenv": ("src = 'auto k = getenv(\"KEY\");'", "forbidden call"),
    "native environ": ("src = 'extern char** environ;'", "forbidden call"),
    "native asm": ("src = 'asm volatile(\"syscall\");'", "forbidden call"),
    "native unistd": ("src = '#include <unistd.h>'", "forbidden call"),
    "native dlopen": ("src = 'void* h = dlopen(\"libc.so.6\", 1);'", "forbidden call"),
    "native fstream": ("src = '#include <fstream>\\nstd::ofstream o(\"/tmp/x\");'", "forbidden call"),
    "native cstdlib": ("src = '#include <cstdlib>'", "forbidden call"),
    "compiler plugin flag": ("flags = ['-O3', '-fplugin=/tmp/evil.so']", "forbidden call"),
    "host compiler flag": ("flags = ['-ccbin', '/tmp/evil']", "forbidden call"),
    "native in comment": ("import triton\n@triton.jit\ndef k(x):\n    # system(\"ls\");\n    pass", "forbidden call"),
    "python open in string": ("def f(x: 'open(\"/etc/passwd\").read()'):\n    pass", "forbidden call"),
    "submodule as attribute": ("import torch\ntorch.utils.collect_env.run('id')", "forbidden import: torch.utils.collect_env"),
    "benchmark timer": ("import torch\nt = torch.utils.benchmark.Timer(stmt=s)", "forbidden import: torch.utils.benchmark"),
    "submodule via alias": ("import torch as t\nm = t\nm.utils.benchmark.Timer", "forbidden import: torch.utils.benchmark"),
    "shell in build flags": ("from torch.utils.cpp_extension import load_inline\n"
                             "m = load_inline(name='k', cpp_sources='', extra_cflags=['-O2`id`'])", "forbidden call"),
    "built build flags": ("import torch\nfrom torch.utils.cpp_extension import load_inline\nf = ['-O3']\nf.append(x)\n"
                          "m = load_inline(name='k', cpp_sources='', extra_cuda_cflags=f)", "forbidden call"),
    "build flags by position": ("from torch.utils.cpp_extension import load_inline\n"
                                "m = load_inline('k', '', '', ['f'], ['-O3'])", "forbidden call"),
    "build flags by **": ("from torch.utils.cpp_extension import load_inline\nm = load_inline(**kw)", "forbidden call"),
    "builder handed on": ("import functools\nfrom torch.utils.cpp_extension import load_inline\n"
                          "b = functools.partial(load_inline, extra_cflags=x)", "forbidden call"),
    "shell in module name": ("import torch\nm = torch.utils.cpp_extension.load_inline(name='k;id', cpp_sources='')",
                             "forbidden call"),
    "huge built string": ("a0 = 'x'\n" + "".join(f"a{i + 1} = a{i} + a{i}\n" for i in range(24)), "forbidden call"),
}


@pytest.mark.parametrize("snippet, expected", list(BYPASSES.values()), ids=list(BYPASSES))
def test_each_bypass_is_caught(snippet, expected):
    reason = first_violation(snippet)
    assert reason is not None and reason.startswith(expected), reason
    assert "\n" not in reason


HONEST_CUDA = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdio>
#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")

__device__ __forceinline__ float relu1(float a) { return fmaxf(a, 0.f); }

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    __shared__ float tile[256];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) y[i] = relu1(tile[threadIdx.x]);
}

torch::Tensor relu(torch::Tensor x) {
    CHECK_CUDA(x);
    auto y = torch::empty_like(x);
    int n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    if (cudaGetLastError() != cudaSuccess) printf("%s failed\n", __func__);
    return y;
}
"""
cpp_source = "torch::Tensor relu(torch::Tensor x);"
ext = load_inline("relu_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu"],
                  extra_cuda_cflags=["-O3", "--use_fast_math"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu(x)
'''


@pytest.mark.parametrize("snippet", [
    HONEST_CUDA,
    "import torch\ndef f(x):\n    y = torch.empty_like(x)\n    y[torch.arange(3)] = 0\n    return y",
    "import torch\ndef fill(out, value, dtype):\n    out[:] = value\n    return out\nfill(1, 2, torch.float16)",
    "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    dtype = torch.float16\n"
    "    def __init__(self):\n        super().__init__()\n        self.dtype = torch.float32\n        self.act = torch.relu",
    "import torch\ndef act():\n    return torch.relu\nf = act()\ny = f(torch.ones(3))",
    "def f(x, out):\n    out.view(-1)[:3] = x\n    return out",
    "if __name__ == '__main__':\n    print('{:.3f} ms, {0:>8}'.format(1.0, 'a'), '%.2f' % 1.0)",
    "## helpers\nx = 1  # load the block and store it",
    "from typing import cast, Optional\nfrom functools import cache\nx = cast(int, 1)",
    "from triton.language.extra import libdevice\nfrom triton.language import load, store",
    "import triton.language as tl\ndef f(x):\n    return tl.inline_asm_elementwise(asm='tanh.approx.f32 $0, $1;', "
    "constraints='=r,r', args=[x], dtype=tl.float32, is_pure=True, pack=1)",
    "class Launcher:\n    def __init__(self, k):\n        self.k = k\n    def __call__(self, x):\n        return self.k(x)",
    "from torch.utils.cpp_extension import load_inline\nflags = ['-O3', '--use_fast_math']\n"
    "m = load_inline(name='relu_ext', cpp_sources='', cuda_sources='', functions=['f'], extra_cflags=[''],\n"
    "                extra_cuda_cflags=flags, extra_ldflags=[''], verbose=True)",
    "import torch\nb = torch.backends.cudnn.benchmark",
], ids=["cuda", "index-assign", "dtype-param", "class-attrs", "returned-fn", "view-assign", "format-specs",
        "comments", "typing", "triton-imports", "inline-asm", "launcher", "build-flags", "cudnn-benchmark-flag"])
def test_honest_patterns_pass(snippet):
    assert first_violation(snippet) is None


def test_a_tensor_subclass_torch_function_is_left_to_the_runtime_check():
    """A Tensor subclass output is the verifier's to reject at run time, with its own reason
    ("tensor subclass"; tests/fixtures/cheats/tensor_subclass_output.py); the same method on any
    other class (a mode) is a monkeypatch."""
    subclass = ("import torch\nclass R(torch.Tensor):\n    @classmethod\n"
                "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                "        with torch.DisableTorchFunctionSubclass():\n            return func(*args, **(kwargs or {}))")
    assert first_violation(subclass) is None
    assert first_violation(subclass.replace("(torch.Tensor)", "")).startswith("monkeypatch")


def test_a_module_attribute_as_a_comprehension_target_is_a_monkeypatch_not_a_crash():
    """`[0 for torch.y in ...]` writes torch.y; an ast.comprehension has no line of its own."""
    reason = first_violation("import torch\nx = [0 for torch.y in range(3)]\n")
    assert reason is not None and reason.startswith("monkeypatch: assignment to torch.y at line 2"), reason


def test_a_module_too_deep_to_check_is_a_syntax_verdict_not_a_crash():
    """A sum of thousands of terms is an AST thousands of levels deep: the token count refuses it
    before the parser or the checks recurse over it (source_ast.nesting), a one-line syntax verdict,
    not a RecursionError out of the verifier; a sum of a hundred terms is checked as usual."""
    assert first_violation("import torch\nx = " + " + ".join(["1"] * 100) + "\n") is None
    for terms in (1000, 50000):
        deeper = Candidate(source="import torch.nn as nn\nclass ModelNew(nn.Module):\n    pass\nx = " + " + ".join(["1"] * terms))
        found = deeper.syntax_problem()
        assert found is not None and "nested too deeply" in found[1]


@pytest.mark.parametrize("snippet, setter", [
    ('import torch\ntorch.set_float32_matmul_precision("high")', "torch.set_float32_matmul_precision"),
    ("import torch\np = 'high'\ntorch.set_float32_matmul_precision(p)", "torch.set_float32_matmul_precision"),
    ("import torch\ns = torch.set_float32_matmul_precision\ns('highest')", "torch.set_float32_matmul_precision"),
    ("from torch import set_float32_matmul_precision as s", "torch.set_float32_matmul_precision"),
    ("import torch\ntorch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)",
     "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp"),
    ("import torch\nwith torch.backends.cudnn.flags(enabled=False):\n    pass", "torch.backends.cudnn.flags"),
    ("import torch\nb = torch.backends.mkldnn\nb.set_flags(True)", "b.set_flags"),
    ("from torch.backends.cudnn import flags", "torch.backends.cudnn.flags"),
])
def test_a_call_that_changes_torchs_precision_is_refused(snippet, setter):
    """Assignments to torch.backends are monkeypatches; the setters that are calls (and the backends'
    flags(), TF32 on by default) are refused as what they do, in the runtime lock's words."""
    reason = first_violation(snippet)
    assert reason is not None and reason.startswith(f"changes precision: `{setter}` at line"), reason


@pytest.mark.parametrize("snippet", [
    'import torch\ntorch.set_float32_matmul_precision("highest")',  # the declared setting: a no-op
    "import torch\ntorch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False)",
    "import torch\nx = torch.backends.cuda.matmul.allow_tf32",  # reading one
    "import numpy as np\nx = np.zeros(3)\ny = x.flags",  # an array's flags, not a backend's
])
def test_the_declared_precision_and_other_flags_pass(snippet):
    assert first_violation(snippet) is None
