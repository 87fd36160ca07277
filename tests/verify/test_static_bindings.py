"""The static rules judge what a name refers to (its binding), not its spelling: honest code that
names a variable `input`, `custom_op` or `library` passes, and every way to reach the real builtin,
torch.library or a private torch internal under another name is still caught (bindings.py)."""

import ast

import pytest

from kernelloop.records import Status
from kernelloop.tools.verify.bindings import Bindings
from kernelloop.tools.verify.static_check import first_violation
from tests.verify.test_adversarial import FIXTURES, parse_header

H = 'import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n'
EXT = "ext = load_inline('m', cpp_sources='int f();', functions=['f'])\n"


def J(*lines: str) -> str:
    return "\n".join(lines)

# Each reaches the builtin, torch.library (or an override) or a private internal; `next(iter([torch]))`
# stands for a module the alias tracking cannot follow, handed to a method as its `self`.
BYPASSES = {
    'alias input': ('x = input\nx()', 'forbidden call'),
    'builtins.input': ('import builtins\nbuiltins.input()', 'forbidden import'),
    'getattr builtins': ("f = getattr(__builtins__, 'input')", 'forbidden call'),
    'default input': ('def f(input=input):\n    return input()', 'forbidden call'),
    'class scope skipped': ('class C:\n    input = 1\n    def m(self):\n        return input()', 'forbidden call'),
    'del at module': ('input = 1\ndel input\ninput()', 'forbidden call'),
    'conditional module': ('if False:\n    input = 1\ninput()', 'forbidden call'),
    'call before binding': ('def f():\n    return input()\nf()\ninput = 1', 'forbidden call'),
    'use before binding': ('input()\ninput = 1', 'forbidden call'),
    'comp first iter': ('x = [input for input in [input]]', 'forbidden call'),
    'lambda default': ('f = lambda input=input: input', 'forbidden call'),
    'global': ('def f():\n    global input\n    input = 1\ninput()', 'monkeypatch'),
    'class comp': ('class C:\n    input = 1\n    x = [input() for _ in range(1)]', 'forbidden call'),
    'pass builtin': ('def f(input):\n    pass\nf(input)', 'forbidden call'),
    'module for': ('for input in []:\n    pass\ninput()', 'forbidden call'),
    'module with': ('with x as input:\n    pass\ninput()', 'forbidden call'),
    'walrus module': ('(input := 1)\ninput()', 'forbidden call'),
    'annotation only': ('input: int\ninput()', 'forbidden call'),
    'class def skipped': ('class C:\n    def input(self):\n        pass\n    def m(self):\n        return input()', 'forbidden call'),
    'nested free': ('def outer():\n    def inner():\n        return input()\n    return inner', 'forbidden call'),
    'augassign module': ("input += ''", 'forbidden call'),
    'tuple default': ('def f(a=[input]):\n    pass', 'forbidden call'),
    'decorator': ('@input\ndef f():\n    pass', 'forbidden call'),
    'class base': ('class C(input):\n    pass', 'forbidden call'),
    'annotation': ('def f() -> input:\n    pass', 'forbidden call'),
    'match': ('match 1:\n    case input:\n        pass\ninput()', 'forbidden call'),
    'class level del': ('class C:\n    input = 1\n    del input\n    x = input()', 'forbidden call'),
    'class use before': ('class C:\n    x = input()\n    input = 1', 'forbidden call'),
    'except': ('try:\n    pass\nexcept E as input:\n    pass', 'try/except'),
    'open builtin': ('def f(p):\n    return open(p)', 'forbidden call'),
    'exec via default': ("def f(e=exec):\n    e('1')", 'forbidden call'),
    'star import': ('from math import *\ninput()', 'forbidden import'),
    'from torch.library import custom_op as c': ('from torch.library import custom_op as c', 'monkeypatch'),
    'import torch.library as L': ('import torch.library as L\nL.custom_op', 'monkeypatch'),
    'torch.library.custom_op': (H + 'c = torch.library.custom_op', 'monkeypatch'),
    'torch.library': (H + 'L = torch.library', 'monkeypatch'),
    'alias torch library': (H + 't = torch\nL = t.library', 'monkeypatch'),
    'unbound custom_op': ("custom_op('kl::f', mutates_args=())", 'monkeypatch'),
    'plain function self': (H + 'def f(self):\n    return self.library\nf(torch)', 'monkeypatch'),
    'class laundering': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                               '        return self.library', 'L = C.get(next(iter([torch])))'), 'monkeypatch'),
    'class body fns': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                             '        return self.library', '    fns = [get]',
                             'L = C().fns[0](next(iter([torch])))'), 'monkeypatch'),
    'type()': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                     '        return self.library', 'L = type(C()).get(next(iter([torch])))'), 'monkeypatch'),
    'classmethod super': (H + J('class B:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                                '        return self.library', 'class D(B):', '    @classmethod',
                                '    def f(cls, t):', '        return super().get(t)',
                                'L = D().f(next(iter([torch])))'), 'monkeypatch'),
    'decorator laundering': (H + J('def deco(f):', '    return lambda self: f(next(iter([torch])))', 'class C:',
                                   '    def __init__(self):', '        self.library = 1',
                                   '    @deco', '    def get(self):', '        return self.library'), 'monkeypatch'),
    'self rebound': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                           '        self = next(iter([torch]))', '        return self.library'), 'monkeypatch'),
    'not stored': (H + 'class C(nn.Module):\n    def get(self):\n        return self.library', 'monkeypatch'),
    'nested def self': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def m(self):',
                              '        def g(self):', '            return self.library',
                              '        return g(next(iter([torch])))'), 'monkeypatch'),
    'metaclass': (H + J('class C(metaclass=M):', '    def __init__(self):', '        self.library = 1',
                        '    def get(self):', '        return self.library'), 'monkeypatch'),
    'untrusted base': (H + J('class C(torch.autograd.Function):', '    def __init__(self):', '        self.library = 1',
                             '    def get(self):', '        return self.library'), 'monkeypatch'),
    'super second arg class': (H + J('class B:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                                     '        return self.library', 'class D(B):', '    pass',
                                     'L = super(B, D).get(next(iter([torch])))'), 'monkeypatch'),
    'class alias': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                          '        return self.library', 'K = C', 'L = K.get(next(iter([torch])))'), 'monkeypatch'),
    'ext rebound': (H + EXT + 'ext = next(iter([torch]))\nL = ext.library', 'monkeypatch'),
    'load_inline shadowed': (H + J('def load_inline(*a, **k):', '    return next(iter([torch]))', "ext = load_inline('m')",
                                   'L = ext.library'), 'monkeypatch'),
    'load_inline rebound': (H + J('load_inline = lambda *a, **k: next(iter([torch]))',
                                  "ext = load_inline('m', cpp_sources='int f();', functions=['f'])",
                                  'L = ext.library'), 'monkeypatch'),
    'self.ext mixed': (H + EXT + J('class C(nn.Module):', '    def __init__(self):', '        super().__init__()',
                                   '        self.ext = ext', '    def f(self):',
                                   '        self.ext = next(iter([torch]))',
                                   '        return self.ext.library'), 'monkeypatch'),
    'dunder store': (H + 'class C:\n    __torch_function__ = None', 'monkeypatch'),
    'library annotation': (H + 'library: int\nx = library.custom_op', 'monkeypatch'),
    'Library name': ("Library('aten', 'IMPL')", 'monkeypatch'),
    'register_fake attr': (H + 'f = torch.library.register_fake', 'monkeypatch'),
    'py_impl': (H + 'h = torch.ops.aten.relu.default.py_impl', 'monkeypatch'),
    'overrides import': ('from torch.overrides import TorchFunctionMode', 'monkeypatch'),
    'private via param': (H + 'def f(nn):\n    return nn.init._calculate_fan_in_and_fan_out', 'forbidden call'),
    'private rebound': (H + 'nn = 1\nx = nn.init._calculate_fan_in_and_fan_out', 'forbidden call'),
    'private not allowlisted': (H + 'x = nn.init._no_grad_uniform_', 'forbidden call'),
    'private other path': (H + 'x = torch._C._calculate_fan_in_and_fan_out', 'forbidden call'),
    'private import not allowlisted': ('from torch.nn.init import _no_grad_uniform_', 'forbidden import'),
    'private import other module': ('from torch.nn import _calculate_fan_in_and_fan_out', 'forbidden import'),
    'kernel src': ('import triton\n@triton.jit\ndef k(x):\n    pass\ns = k.src', 'forbidden call'),
    'self.k.src': (H + J('import triton', '@triton.jit', 'def k(x):', '    pass', 'class C(nn.Module):',
                         '    def __init__(self):', '        super().__init__()',
                         '        self.k = k', '    def f(self):', '        return self.k.src'), 'forbidden call'),
    'os laundering': (H + J('class C:', '    def __init__(self):', '        self.os = 1', '    def get(self):',
                            '        return self.os', 'L = C.get(next(iter([torch])))'), 'forbidden call'),
    'subclass escapes': (H + J('class B:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                               '        return self.library', 'class D(B):', '    pass',
                               'L = D.get(next(iter([torch])))'), 'monkeypatch'),
    'local class returned': (H + J('def make():', '    class C:', '        def __init__(self):', '            self.library = 1',
                                   '        def get(self):', '            return self.library',
                                   '    return C', 'L = make().get(next(iter([torch])))'), 'monkeypatch'),
    'lambda method': (H + J('class C:', '    def __init__(self):', '        self.library = 1',
                            '    get = lambda self: self.library'), 'monkeypatch'),
    'same name twice': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                              '        return self.library', 'class C:', '    pass',
                              'L = C.get(next(iter([torch])))'), 'monkeypatch'),
    'vararg self': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(*self):',
                          '        return self[0].library'), 'monkeypatch'),
    'comp rebinds self': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                                '        return [self.library for self in (next(iter([torch])),)]'), 'monkeypatch'),
    'del self': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                       '        del self', '        return self.library'), 'monkeypatch'),
    'init via class': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '        x = self.library',
                             'C.__init__(next(iter([torch])))'), 'monkeypatch'),
    'hook via class': (H + J('class C(nn.Module):', '    def __init__(self):', '        super().__init__()',
                             '        self.library = 1', '    def get(self):',
                             '        return self.library', '    def forward(self, x):',
                             '        self.register_forward_pre_hook(C.get)'), 'monkeypatch'),
    'dataclass': (H + J('import dataclasses', '@dataclasses.dataclass', 'class C:', '    library: int = 1',
                        '    def get(self):', '        return self.library'), 'monkeypatch'),
    'staticmethod self': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    @staticmethod',
                                '    def get(self):', '        return self.library',
                                'L = C().get(next(iter([torch])))'), 'monkeypatch'),
    'property setter chain': (H + J('class C:', '    def __init__(self):', '        self.library = 1', '    def get(self):',
                                    '        return self.library', '    g = property(get)'), 'monkeypatch'),
    'pybind import': (H + 'src = \'m.attr("x") = py::module_::import("torch.library").attr("custom_op");\'', 'forbidden call'),
    'pybind import old': (H + 'src = \'auto lib = pybind11::module::import("os");\'', 'forbidden call'),
    'PyImport': (H + 'src = \'PyObject* m = PyImport_ImportModule("os");\'', 'forbidden call'),
    'py eval': (H + 'src = \'py::eval("__import__(1)");\'', 'forbidden call'),
    'tl param load': (H + "def f(tl):\n    return tl.load('/tmp/x')\nf(torch)", 'forbidden call'),
    'tl rebound': ("import triton.language as tl\nimport torch\ntl = torch\nx = tl.load('/tmp/x')", 'forbidden call'),
    'torch.mp': (H + 'm = torch.cuda.tunable.mp', 'forbidden call'),
    'ext attr of non-ext': (H + 'x = torch.nn\ny = x.types', 'forbidden call'),
    "pybind attr": ("src = 'void f(py::object t) { t.attr(\"os\").attr(\"system\")(\"ls\"); }'", "forbidden call"),
    "C API attr": ("src = 'PyObject_GetAttrString(o, \"os\");'", "forbidden call"),
}


@pytest.mark.parametrize("snippet, expected", list(BYPASSES.values()), ids=list(BYPASSES))
def test_each_way_to_the_real_thing_is_caught(snippet, expected):
    reason = first_violation(snippet)
    assert reason is not None and reason.startswith(expected), reason


# Honest code from the KernelBench leaderboard's model output, reduced: names that are the candidate's own.
HONEST = {
    'forward input': H + 'class ModelNew(nn.Module):\n    def forward(self, input):\n        return input * 2',
    'local input': 'def f(x):\n    input = x\n    return input',
    'comp input': 'def f(xs):\n    return [input for input in xs]',
    'module input': 'import torch\ninput = torch.ones(3)\ny = input * 2\ndef f():\n    return input',
    'nested input': 'def outer(input):\n    def inner():\n        return input + 1\n    return inner',
    'autograd ctx input': H + J('class F(torch.autograd.Function):', '    @staticmethod', '    def forward(ctx, input):',
                                '        ctx.save_for_backward(input)', '        return input',
                                'y = F.apply(torch.ones(2))'),
    # the extensions define what they bind: a prototype alone is no function of their own (native_scan.py)
    'custom_op ext': H + J("custom_op = load_inline('m', cpp_sources='int f() { return 0; }', functions=['f'])",
                           'class ModelNew(nn.Module):', '    def __init__(self):',
                           '        super(ModelNew, self).__init__()',
                           '        self.custom_op = custom_op', '    def forward(self, x):',
                           '        return self.custom_op.f(x)'),
    'ext.custom_op': H + J("ext = load_inline('m', cpp_sources='int custom_op() { return 0; }', functions=['custom_op'])",
                           'def f(x):',
                           '    return ext.custom_op(x)'),
    'fan in': H + J('import math', 'class ModelNew(nn.Module):', '    def __init__(self):',
                    '        super().__init__()',
                    '        self.weight = nn.Parameter(torch.empty(3, 3))',
                    '        self.bias = nn.Parameter(torch.empty(3))',
                    '    def reset_parameters(self):',
                    '        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.weight)',
                    '        bound = 1 / math.sqrt(fan_in)',
                    '        nn.init.uniform_(self.bias, -bound, bound)'),
    'fan import': J('from torch.nn.init import _calculate_fan_in_and_fan_out, _calculate_correct_fan',
                    'import torch.nn.init as init', 'x = init._calculate_correct_fan'),
    'locals named': J('def f(x):', '    mp = 2', '    src = x', '    io = 3', '    queue = [x]', '    types = {1}',
                      '    Path = 4', '    library = 5',
                      '    return mp, src, io, queue.pop(), types, Path, library'),
    'self attrs named': H + J('class ModelNew(nn.Module):', '    def __init__(self):', '        super().__init__()',
                              '        self.src = 1', '        self.mp = 2',
                              "        self.library = load_inline('m', cpp_sources='int f() { return 0; }', functions=['f'])",
                              '    @torch.no_grad()', '    def forward(self, x):',
                              '        return self.library.f(x) + self.src + self.mp'),
    'tl load': 'import triton\nimport triton.language as tl\n@triton.jit\ndef k(p):\n    x = tl.load(p)',
}


@pytest.mark.parametrize("snippet", list(HONEST.values()), ids=list(HONEST))
def test_the_candidates_own_names_pass(snippet):
    assert first_violation(snippet) is None


def _lookup(source: str, line: int, name: str):
    tree = ast.parse(source)
    bindings = Bindings(tree)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name and n.lineno == line
                and isinstance(n.ctx, ast.Load))
    return bindings.lookup(node)


@pytest.mark.parametrize("source, line, builtin", [
    ("def f(input):\n    return input", 2, False),
    ("input = 1\nx = input", 2, False),
    ("x = input\ninput = 1", 1, True),
    ("if x:\n    input = 1\ny = input", 3, True),
    ("input = 1\ndel input\ny = input", 3, True),
    ("class C:\n    input = 1\n    def m(self):\n        return input", 4, True),
    ("class C:\n    input = 1\n    y = input", 3, False),
    ("def f(input=input):\n    pass", 1, True),
    ("y = [0 for input in input]", 1, True),
    ("def f():\n    return [input for input in (1,)]", 2, False),
    ("def f():\n    def g():\n        return input\n    input = 1", 3, False),
    ("def f():\n    [(input := 1) for _ in (1,)]\n    return input", 3, False),
])
def test_lookup_follows_pythons_scopes(source, line, builtin):
    found = _lookup(source, line, "input")
    assert found.builtin is builtin and not found.unknown


def test_a_global_statement_makes_every_lookup_unknown():
    assert _lookup("def f():\n    global x\ny = input", 3, "input").unknown


def test_imported_path_needs_every_binding_to_be_that_import():
    tree = ast.parse("import torch.nn as nn\nfrom torch.nn import init\nx = nn.init.f\ny = init.g\n"
                     "def h(nn):\n    return nn.init.f")
    bindings = Bindings(tree)
    paths = [bindings.imported_path(n) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
             and isinstance(n.ctx, ast.Load) and n.attr in ("f", "g")]
    assert sorted(map(str, paths)) == ["None", "torch.nn.init.f", "torch.nn.init.g"]


# The lint alone, on the adversarial corpus (fast, so every CPU run checks it, CUDA fixtures included).
LINT_REASONS = ("forbidden import", "forbidden call", "monkeypatch", "try/except", "reference model", "stream or thread")


@pytest.mark.parametrize("path", sorted((FIXTURES / "honest").glob("*.py")), ids=lambda path: path.stem)
def test_every_honest_control_passes_the_lint(path):
    assert first_violation(path.read_text()) is None


def _linted_cheats() -> list:
    """Cheats whose promised verdict is a static rule's."""
    return [path for path in sorted((FIXTURES / "cheats").glob("*.py"))
            if parse_header(path).expect is Status.rejected
            and all(reason in LINT_REASONS for reason in parse_header(path).reasons)]


@pytest.mark.parametrize("path", _linted_cheats(), ids=lambda path: path.stem)
def test_the_lint_alone_gives_each_linted_cheat_its_reason(path):
    reason = first_violation(path.read_text())
    assert reason is not None and reason.startswith(parse_header(path).reasons), reason
