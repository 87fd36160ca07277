"""Static rules a candidate must pass before it runs: small named checks, one entry point.

Each check walks the candidate's AST and returns a one-line reason or None. The reasons use
the vocabulary the verifier promises (see Verdict.reason): "forbidden import",
"forbidden call", "try/except", "reference model", "monkeypatch", "changes precision", "stream or thread".
When in doubt a check rejects: the coder gets the reason and can write it another way.

These rules are a cheap early lint with clear reasons, not the security boundary (the sandbox
is): they close the obvious ways round themselves (a module re-exported by an allowed package,
an attribute named by a string, a frame walk, an alias of torch, C++ text held in a variable)
and leave the rest to the process the candidate runs in.

A rule judges what a name refers to, not how it is spelled (bindings.py): `input(...)` is the
builtin only where nothing in an enclosing scope binds `input` (`def forward(self, input)` is
PyTorch's own idiom); `custom_op` is torch's only where an import or a module's attribute put it
there, not a variable holding the candidate's load_inline module; `self.src` is the candidate's
own where its class stores it and its methods can only run on an instance. Imports, attributes
of anything else and names that may be the builtin keep the strict, spelled rules.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import cast

from kernelloop import source_ast
from kernelloop.records import Code
from kernelloop.tools.verify.bindings import Bindings, Instances
from kernelloop.tools.verify.native_scan import first_unknown

# Modules a kernel may import. Anything else (os, sys, subprocess, socket, ctypes, threading,
# importlib, pickle, ...) can reach the process, the network or the checker.
ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "math", "numpy", "typing", "functools", "itertools", "operator",
    "collections", "dataclasses", "enum", "abc", "__future__",
})
# Submodules of allowed packages that still give a way out.
FORBIDDEN_SUBMODULES = ("torch.multiprocessing", "torch.distributed", "torch.hub", "torch.testing",
                        "torch.utils.data", "numpy.ctypeslib", "torch._dynamo", "torch._inductor",
                        "torch.package", "torch.xpu", "torch.utils.model_zoo", "torch.utils.tensorboard",
                        "triton.runtime.build", "triton.runtime.cache", "triton.tools", "numpy.f2py",
                        "torch.utils.collect_env",  # its run() is a shell (the sandbox holds it; the lint says why)
                        "torch.utils.benchmark",  # Timer, Fuzzer: compile and run code strings (exec in disguise)
                        "numpy.lib.format", "numpy.lib.npyio")  # read_array, NpzFile: unpickle what a file-like holds
FORBIDDEN_BUILTINS = frozenset({
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "setattr",
    "delattr", "getattr", "breakpoint", "input", "exit", "quit", "help", "memoryview",
})
# Names that read or write files, load native code or reach the interpreter. They are checked as
# attributes (torch.os), as names imported from an allowed package (`from torch import os`) and
# as parts of an imported module path (`import torch.os`).
FORBIDDEN_ATTRIBUTES = frozenset({
    "load", "save", "from_file", "fromfile", "tofile", "memmap", "loadtxt", "savetxt", "genfromtxt",
    "load_library", "ctypeslib", "hub", "system", "popen", "environ", "environb", "getenv",
    "open", "open_memmap", "fromregex", "savez", "savez_compressed", "dump", "DataSource", "Path",
    # modules that allowed packages re-export (torch.os, numpy.sys, ...): a way round the import rule
    "os", "sys", "subprocess", "ctypes", "socket", "importlib", "builtins", "threading", "multiprocessing",
    "signal", "shutil", "pathlib", "io", "inspect", "gc", "types", "pickle", "weakref", "atexit",
    # ... and the same under other names (enum.bltns is builtins, torch.cuda.tunable.mp is
    # multiprocessing), or modules that swallow errors, read files or walk frames
    "bltns", "mp", "python_multiprocessing", "contextlib", "copyreg", "linecache", "glob", "tempfile",
    "tarfile", "zipfile", "pkgutil", "traceback", "concurrent", "queue", "platform", "sysconfig",
    "logging", "urllib", "http", "request", "xpu", "package", "model_zoo", "tensorboard", "f2py",
    # process and file operations under any name
    "kill", "killpg", "fork", "forkpty", "spawn", "execv", "execve", "remove", "unlink", "rmdir", "rename",
    "chmod", "write_text", "write_bytes", "read_text", "read_bytes", "download_url_to_file", "urlopen",
    # imports, native builds and attribute lookups by a string name (attrgetter("os.environ")(torch))
    "import_module", "resolve_name", "get_data", "entry_points", "find_spec", "FunctionType", "CodeType",
    "compile_module_from_src", "compile_module_from_file", "compile_so_from_src", "compile_so_from_file",
    "get_cache_manager", "FileCacheManager", "RemoteCacheBackend", "RedisRemoteCacheBackend", "redis",
    "knobs",  # triton.knobs: getenv, setenv, env_str, the cache directory and launch hooks
    "attrgetter", "methodcaller", "get_type_hints", "ForwardRef", "src",
    # numpy's unpicklers: a .npy of object dtype read from a file-like class of the candidate's own runs
    # whatever its pickle names (issue 35: builtins.exec rewrote the claims)
    "read_array", "NpzFile", "npyio",
})
# Of those, the ones that look an attribute up by a string (or eval a string).
BY_NAME = frozenset({"attrgetter", "methodcaller", "get_type_hints", "ForwardRef", "resolve_name", "import_module"})
# Attributes of frames, generators, coroutines, tracebacks and code objects: from any of them a
# frame walk reaches every module's globals and the builtins (open, __import__, ...).
FRAME_ATTRIBUTES = frozenset({
    "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "gi_frame", "gi_code",
    "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await",
    "tb_frame", "tb_next", "co_code", "co_consts", "co_names", "func_globals",
})
# Ways to register or override operators, or to intercept every torch call: what the reference,
# the comparison or the op recorder compute would no longer be torch's.
OVERRIDE_NAMES = frozenset({
    "library", "Library", "custom_op", "triton_op", "register_kernel", "register_fake",
    "register_autograd", "register_torch_dispatch", "register_vmap", "impl_abstract", "py_impl",
    "py_kernels", "overrides", "TorchFunctionMode", "TorchDispatchMode", "BaseTorchFunctionMode",
    "_python_dispatch", "__torch_function__", "__torch_dispatch__",
})
# Private torch helpers a candidate may call, by the path its imports give them (never a parameter or
# a variable spelled the same): each is pure arithmetic on a tensor's shape, what nn.Linear and
# nn.Conv2d's own reset_parameters call, and reaches nothing else.
PRIVATE_ALLOWED = {
    "torch.nn.init._calculate_fan_in_and_fan_out": "fan in/out from tensor.dim() and tensor.size(): nn.Linear's init",
    "torch.nn.init._calculate_correct_fan": "picks fan in or fan out by mode: what kaiming_uniform_ calls",
}
# The only dunder a candidate needs is super().__init__().
ALLOWED_DUNDERS = frozenset({"__init__", "__name__"})
# Dunder methods a candidate may define (a launcher class with __call__, a config's __repr__ ...).
ALLOWED_DUNDER_DEFS = frozenset({"__init__", "__post_init__", "__repr__", "__str__", "__len__", "__iter__",
                                 "__getitem__", "__call__"})
# __exit__ receives the exception and may swallow it: a try/except in disguise.
EXCEPTION_DUNDERS = frozenset({"__exit__", "__aexit__"})
# torch's precision setters that are calls, not assignments (assignments to torch.backends are
# monkeypatches already), with the one argument each may be called with: the declared setting, a
# no-op (the candidate's child holds and locks them: precision_lock). The backends' flags() and
# set_flags() write TF32 (allow_tf32=True by default) and are refused on any module.
PRECISION_SETTERS = {"set_float32_matmul_precision": "highest", "allow_fp16_bf16_reduction_math_sdp": False}
PRECISION_FLAGS = frozenset({"flags", "set_flags"})
STREAM_NAMES = frozenset({"Stream", "stream", "set_stream", "ExternalStream", "StreamContext", "Event",
                          "Thread", "ThreadPoolExecutor"})
# A CUDA graph of the candidate's own: its replay is no aten op, so torch work captured in it runs with
# nothing recorded (review38_cuda_graph_hides_torch); the harness captures timed windows itself. Attribute
# and imported names only: a candidate's variable may well be called `graph`.
GRAPH_NAMES = frozenset({"graph", "graphs", "CUDAGraph", "make_graphed_callables", "graph_pool_handle",
                         "capture_begin", "capture_end"})
# Tokens in C++/CUDA source (load_inline) that leave the kernel's business (the OS, or Python itself). Every string in the
# module is scanned, and every string the module builds from its constants (+, f-strings, format,
# join, %), since a candidate's only legitimate C++ text is kernel source. English words
# (system, open, kill, ...) count only as calls or function pointers; the others count anywhere.
_NATIVE_CALLS = (r"system|popen|fork|vfork|execv\w*|execl\w*|posix_spawn\w*|socket|connect|fopen|freopen|open|"
                 r"openat|creat|dlopen|dlsym|kill|tgkill|ptrace|syscall|getenv|secure_getenv|setenv|putenv|"
                 r"mmap|mprotect|unlink|pthread_create|cudaStreamCreate\w*")
FORBIDDEN_NATIVE = re.compile(
    rf"\b(?:{_NATIVE_CALLS})\s*\("
    rf"|&\s*(?:::\s*)?(?:{_NATIVE_CALLS})\s*(?:[;,)\]]|$)|::\s*(?:{_NATIVE_CALLS})\b"
    r"|\b(?:popen|execv\w*|execl\w*|posix_spawn\w*|fopen|dlopen|dlsym|ptrace|syscall|getenv|secure_getenv|"
    r"environ|__environ|_environ|pthread_create|std::thread|std::async|std::[io]?fstream|std::system)\b"
    # Python from C++: pybind11's module import (py::module_::import("os")), an attribute by its name
    # (obj.attr("os") on a module passed in), the C API's import, run and attribute calls
    r"|::\s*import\s*\(|\.\s*attr\s*\(|\b(?:PyImport_|PyRun_|Py_CompileString|PyEval_|PySys_|PyObject_\w*Attr)\w*"
    r"|\b(?:asm|__asm__|__asm)\s*(?:volatile|__volatile__|goto)?\s*[({]"
    r"|#\s*include\s*[<\"]\s*(?:unistd|sys/|thread|fstream|dlfcn|spawn|signal|csignal|cstdlib|stdlib|"
    r"pthread|fcntl|filesystem|stdio_ext)"
    r"|\w\s*##\s*\w"
    r"|(?:^|[\s,=\"'])(?:-fplugin|-wrapper|-specs|-B|-include|-imacros|-ccbin|--compiler-bindir)\b"
)
# Python that only a string can hide (eval'd annotations, format fields, names for lookups).
STRING_ESCAPES = re.compile(
    r"\b__(?:globals|builtins|builtin|code|closure|subclasses|dict|class|bases|base|mro|import|reduce|reduce_ex|"
    r"getattribute|getattr|setattr|delattr|loader|spec|file|self|wrapped|traceback|context|cause|defaults|"
    r"kwdefaults|init_subclass|set_name|torch_function|torch_dispatch|getstate|setstate|objclass|weakref|"
    r"dir|class_getitem|enter|exit)__\b"
    rf"|\b(?:{'|'.join(sorted(FRAME_ATTRIBUTES))})\b"
    r"|\b(?:eval|exec|compile|getattr|setattr|delattr|breakpoint|globals|locals|vars)\s*\("
)
# A str.format field that reads an attribute: "{0.os.environ[KEY]}".format(torch).
FORMAT_FIELD = re.compile(r"(?<!\{)\{([^{}!:]*)(?:![rsa])?(?::[^{}]*)?\}")
# Longest string the folder builds, and most text the string scan reads: a kernel's C++ is a
# few kilobytes, and a candidate could otherwise double a string a few dozen times.
FOLD_LIMIT = 200_000
SCAN_LIMIT = 4_000_000


def _small_int(text: str) -> bool:
    """Whether int(text) is safe and small (no unicode digits, no 5,000-digit numbers)."""
    return text.isascii() and text.isdigit() and len(text) < 10


def _module_root(name: str) -> str:
    return name.split(".", 1)[0]


def _imported_names(tree: ast.Module) -> dict[str, str]:
    """Names bound by imports -> the module path they came from (`tl` -> `triton.language`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or _module_root(alias.name)] = alias.name if alias.asname else _module_root(alias.name)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _attribute_root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _forbidden_name(name: str, root: str) -> str | None:
    """Why an attribute, or a name imported from an allowed package, is off limits (None: it isn't)."""
    if name in FRAME_ATTRIBUTES:
        return "is a frame attribute; a kernel does not walk frames"
    if name in BY_NAME:
        return "looks attributes or modules up by a string name"
    # tl.load is Triton's memory op, not file I/O; nothing else under triton is exempt.
    if name in FORBIDDEN_ATTRIBUTES and not (name == "load" and root.startswith("triton")):
        return "reaches files, processes, the environment or the interpreter"
    if name.startswith("_") and name != "__future__":
        return "is private"
    return None


def check_imports(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return f"forbidden import: relative import at line {node.lineno}"
            base = node.module or ""
            if any(alias.name == "*" for alias in node.names):
                return f"forbidden import: `from {base} import *` (line {node.lineno}); import names one by one"
            modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            if _module_root(module) not in ALLOWED_IMPORTS:
                return (f"forbidden import: {module} (line {node.lineno}); kernels may import only "
                        f"{', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))}")
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN_SUBMODULES):
                return f"forbidden import: {module} (line {node.lineno})"
            for part in module.split(".")[1:]:
                why = _forbidden_name(part, _module_root(module)) if module not in PRIVATE_ALLOWED else None
                # OVERRIDE_NAMES are left to check_monkeypatch, which names them better.
                if why and part not in OVERRIDE_NAMES:
                    return (f"forbidden import: {module} (line {node.lineno}); `{part}` {why} "
                            "(even from an allowed package)")
    return None


# torch.utils.cpp_extension's builders write these arguments into build.ninja, whose commands run
# through /bin/sh: a flag "-O2`id`" is a shell. So each must be written out in the call, as plain
# flags and names (what every leaderboard solution does: [''], ['-O3'], ['--use_fast_math']).
BUILDERS = {"load_inline": 4, "load": 2}  # builder -> how many leading arguments may be positional
BUILD_TEXT_ARGUMENTS = frozenset({"name", "extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags",
                                  "extra_include_paths", "build_directory"})
SAFE_BUILD_TEXT = re.compile(r"[\w+\-=.,:/@%]*")


def _builder(node: ast.AST, bindings: Bindings) -> str | None:
    """`load_inline`/`load` of torch.utils.cpp_extension when `node` can be it: by its binding, or by
    its spelling where the base is not an import (a module held in a variable)."""
    path = bindings.qualified(node) or ""
    if path.startswith("torch.utils.cpp_extension."):
        name = path.rsplit(".", 1)[1]
        return name if name in BUILDERS else None
    spelled = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "load_inline" if spelled == "load_inline" else None


def _plain_build_text(value: ast.AST, listed: bool) -> bool:
    items = value.elts if listed and isinstance(value, (ast.List, ast.Tuple)) else [value] if not listed else None
    if items is None:
        return isinstance(value, ast.Constant) and value.value is None
    return all(isinstance(item, ast.Constant) and isinstance(item.value, str) and
               SAFE_BUILD_TEXT.fullmatch(item.value) for item in items)


def _written_once(value: ast.AST, bindings: Bindings, tree: ast.Module, passed: set[int]) -> ast.AST:
    """`flags` -> the literal list of `flags = ['-O3']` when that is its only binding and it is read
    only as a builder's argument (so nothing appends to it); otherwise `value` itself."""
    if not isinstance(value, ast.Name):
        return value
    found = bindings.lookup(value)
    if found.unknown or len(found.bindings) != 1 or found.bindings[0].kind != "assign":
        return value
    literal = found.bindings[0].value
    reads = [node for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == value.id
             and isinstance(node.ctx, ast.Load)]
    return literal if literal is not None and all(id(node) in passed for node in reads) else value


def check_build_arguments(tree: ast.Module) -> str | None:
    """load_inline's name, flags and build dir: literal plain text, passed in the call itself (or
    through a name bound once to such a literal and read nowhere else)."""
    bindings = Bindings(tree)
    passed = {id(keyword.value) for node in ast.walk(tree) if isinstance(node, ast.Call) and _builder(node.func, bindings)
              for keyword in node.keywords}
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (builder := _builder(node.func, bindings)):
            called.add(id(node.func))
            where = f"{builder} at line {node.lineno}"
            if len(node.args) > BUILDERS[builder] or any(isinstance(a, ast.Starred) for a in node.args):
                return f"forbidden call: {where} takes its flags by keyword (ninja runs them through a shell)"
            if any(keyword.arg is None for keyword in node.keywords):
                return f"forbidden call: {where} with **arguments; write its flags out (ninja runs them through a shell)"
            named: dict[str, ast.AST] = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
            if node.args:
                named.setdefault("name", node.args[0])
            for argument, value in named.items():
                value = _written_once(value, bindings, tree, passed)
                if argument in BUILD_TEXT_ARGUMENTS and not _plain_build_text(value, argument.startswith("extra_")):
                    return (f"forbidden call: {where}: `{argument}` must be written out as plain text (letters, digits "
                            "and + - = . , : / @ %): ninja runs the build's flags through a shell")
    for node in ast.walk(tree):  # held or handed on (partial(load_inline, ...)), its arguments go unread
        if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load) and id(node) not in called \
                and (builder := _builder(node, bindings)):
            return f"forbidden call: {builder} used at line {node.lineno} other than by a direct call"
    return None


SOURCE_ARGUMENTS = {"cpp_sources": 1, "cuda_sources": 2}  # load_inline's source arguments, by keyword or position


def check_extension_sources(tree: ast.Module) -> str | None:
    """The C++/CUDA of each load_inline call, all its sources together, holds only what kernels and their
    host wrappers need (native_scan.py, an allowlist); sources the lint can't read as text are refused."""
    bindings = Bindings(tree)
    folder = _Folder(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _builder(node.func, bindings) == "load_inline"):
            continue
        named = {keyword.arg: keyword.value for keyword in node.keywords if keyword.arg}
        texts: list[str] = []
        for argument, position in SOURCE_ARGUMENTS.items():
            value = named.get(argument, node.args[position] if len(node.args) > position else None)
            if value is None or (isinstance(value, ast.Constant) and value.value is None):
                continue
            try:
                parts: list[str | None] = [folder.fold(element) for element in value.elts] \
                    if isinstance(value, (ast.List, ast.Tuple)) else [folder.fold(value)]
                if parts == [None] and isinstance(value, ast.Name):  # a name bound to a list of sources
                    listed = folder.sequence(value)
                    parts = list(listed) if listed is not None else [None]
            except _TooMuchText:
                return None  # check_strings names it
            if any(part is None for part in parts):
                return (f"forbidden call: load_inline at line {node.lineno}: its {argument} is not text the lint can "
                        "read; write the C++/CUDA out as string constants")
            texts.extend(part for part in parts if part is not None)
        why = first_unknown("\n".join(texts))
        if why:
            return (f"forbidden call: load_inline at line {node.lineno}: {why}; an extension may use only CUDA, "
                    "ATen/torch, c10, math, standard containers and algorithms, TORCH_CHECK and PYBIND11_MODULE/m.def")
    return None


def check_submodule_paths(tree: ast.Module) -> str | None:
    """A forbidden submodule reached as an attribute instead of imported: `torch.utils.collect_env.run`
    after `import torch`, which loads that module itself. Judged by what the chain's base is bound
    to (an import of torch); a two-part path (utils.collect_env) is also refused by its spelling,
    whatever the base, since no honest name chain holds it."""
    bindings = Bindings(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        path, spelled = bindings.imported_path(node) or "", f".{_ref_path(node) or ''}."
        for bad in FORBIDDEN_SUBMODULES:
            inner = bad.split(".", 1)[1]
            if path == bad or path.startswith(bad + ".") or ("." in inner and f".{inner}." in spelled):
                return f"forbidden import: {bad}, reached as an attribute at line {node.lineno}"
    return None


def _ref_path(node: ast.AST) -> str | None:
    """`a.b[0].c` -> "a.b[].c" for a pure reference (names, attributes, subscripts); None otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _ref_path(node.value)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript):
        base = _ref_path(node.value)
        return f"{base}[]" if base else None
    return None


def _written(target: ast.AST) -> Iterator[ast.AST]:
    """What an assignment target writes: `a, (b.c, *d[0])` -> a, b.c, d[0] (not the names inside)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _written(element)
    elif isinstance(target, ast.Starred):
        yield from _written(target.value)
    else:
        yield target


def _prefixes(path: str) -> Iterator[str]:
    """Strict prefixes of a reference path: "a.b[].c" -> "a", "a.b", "a.b[]"."""
    for match in re.finditer(r"\.|\[\]", path):
        if match.start():
            yield path[:match.start()]


def _free_names(tree: ast.Module) -> set[str]:
    """Names read somewhere and bound nowhere in the module, and not builtins: at run time they are
    the reference's (shared_names.py) or a NameError."""
    bindings = _analysis(tree).bindings
    free = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found = bindings.lookup(node)
            if not found.bindings and not found.builtin:
                free.add(node.id)
    return free


class _Aliases:
    """Flow-insensitive tracking of names and attribute paths that may hold a module, or a class
    or function from one: `t = torch`, `F = torch.nn.functional`, `self.T = torch.Tensor`,
    `T = type(x)`, `for m in (torch,)`, a parameter some call passes `torch` to, a function that
    returns `torch`. Writing through any of them is writing into the module. A name the candidate
    reads and binds nowhere (no builtin either) comes from the reference's names (shared_names.py)
    or nowhere: it counts as an alias, and calling it as a function that may return one, since
    the lint can't see what the reference bound it to (a `torch` the candidate never imported)."""

    def __init__(self, tree: ast.Module):
        free = _free_names(tree)
        self.paths: set[str] = set(_imported_names(tree)) | {"type"} | free
        self.returners: set[str] = {"type"} | free  # functions that return a module (or part of one)
        self.tree = tree
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = defaultdict(list)
        self.classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name].append(node)
        changed = True
        while changed:
            before = len(self.paths) + len(self.returners)
            self._pass()
            changed = len(self.paths) + len(self.returners) != before

    def tainted(self, path: str | None) -> bool:
        return path is not None and (path in self.paths or any(p in self.paths for p in _prefixes(path)))

    def aliased(self, value: ast.AST | None) -> bool:
        """Whether an expression may evaluate to a module, or something taken from one, unchanged."""
        if value is None:
            return False
        if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript)):
            return self.tainted(_ref_path(value))
        if isinstance(value, ast.Call):
            func = value.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            return name in self.returners
        if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
            return any(self.aliased(element) for element in value.elts)
        if isinstance(value, ast.Dict):
            return any(self.aliased(element) for element in value.values)
        if isinstance(value, ast.IfExp):
            return self.aliased(value.body) or self.aliased(value.orelse)
        if isinstance(value, ast.BoolOp):
            return any(self.aliased(element) for element in value.values)
        if isinstance(value, (ast.NamedExpr, ast.Starred, ast.Await)):
            return self.aliased(value.value)
        if isinstance(value, ast.Lambda):
            return self.aliased(value.body)
        return False

    def _bind(self, target: ast.AST, value: ast.AST | None, *, iterated: bool = False) -> None:
        if (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
                and not iterated and len(target.elts) == len(value.elts)):
            for sub_target, sub_value in zip(target.elts, value.elts):
                self._bind(sub_target, sub_value)
            return
        if not self.aliased(value):
            return
        for written in _written(target):
            path = _ref_path(written)
            if path:
                self.paths.add(path)

    def _pass(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                self._bind(node.target, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                self._bind(node.target, node.iter, iterated=True)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        self._bind(item.optional_vars, item.context_expr)
            elif isinstance(node, ast.ClassDef):
                for statement in node.body:  # class C: t = torch  ->  C.t, self.t
                    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and self.aliased(statement.value):
                        targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
                        for target in targets:
                            if isinstance(target, ast.Name):
                                self.paths.update({f"{node.name}.{target.id}", f"self.{target.id}",
                                                   f"cls.{target.id}"})
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                self._bind_defaults(node)
                if not isinstance(node, ast.Lambda) and any(
                        isinstance(sub, (ast.Return, ast.Yield, ast.YieldFrom)) and self.aliased(sub.value)
                        for sub in ast.walk(node)):
                    self.returners.add(node.name)
            elif isinstance(node, ast.Call):
                self._bind_call(node)

    def _bind_defaults(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        args = node.args
        positional = args.posonlyargs + args.args
        for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
            if self.aliased(default):
                self.paths.add(arg.arg)
        for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults):  # None where a keyword has no default
            if self.aliased(kw_default):
                self.paths.add(arg.arg)

    def _bind_call(self, call: ast.Call) -> None:
        """`patch(torch)`: the parameter that receives torch is an alias inside `patch`."""
        func = call.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        for definition in self.functions.get(name or "", ()):
            args = definition.args
            positional = [arg.arg for arg in args.posonlyargs + args.args]
            # obj.method(torch): the first parameter is self, unless called on the class or static.
            static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in definition.decorator_list)
            on_class = (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                        and func.value.id in self.classes)
            shift = 1 if isinstance(func, ast.Attribute) and not static and not on_class and positional else 0
            for index, value in enumerate(call.args):
                if not self.aliased(value):
                    continue
                if isinstance(value, ast.Starred) or index + shift >= len(positional):
                    self.paths.update(positional)
                    if args.vararg:
                        self.paths.add(args.vararg.arg)
                else:
                    self.paths.add(positional[index + shift])
            for keyword in call.keywords:
                if self.aliased(keyword.value):
                    names = [keyword.arg] if keyword.arg else positional + [a.arg for a in args.kwonlyargs]
                    self.paths.update(names)
                    if args.kwarg:
                        self.paths.add(args.kwarg.arg)


def _tensor_subclass_methods(tree: ast.Module) -> set[int]:
    """Methods of classes deriving from a Tensor (`class R(torch.Tensor)`). Their __torch_function__
    is left to the verifier, which rejects a Tensor subclass output at run time by name ("tensor
    subclass"); anywhere else (a mode, a plain class) it intercepts torch calls."""
    methods: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any((_ref_path(base) or "").split(".")[-1] == "Tensor"
                                                  for base in node.bases):
            methods.update(id(statement) for statement in node.body)
    return methods


class _Analysis:
    """What the module's names and `self.x` attributes refer to (bindings.py), built once per tree."""

    def __init__(self, tree: ast.Module):
        self.bindings = Bindings(tree)
        self.instances = Instances(tree, self.bindings)

    def own_attribute(self, node: ast.Attribute) -> bool:
        """A public attribute that is certainly the candidate's own, whatever its name: `self.src`
        stored by its own class, or a function of a module load_inline built (`ext.custom_op`)."""
        return not node.attr.startswith("_") and (
            self.instances.owned(node) or self.instances.is_extension(node.value))

    def own_name(self, node: ast.Name) -> bool:
        """A public name the candidate bound itself (a variable, parameter, def...), never an import."""
        return not node.id.startswith("_") and self.bindings.lookup(node).only_candidate

    def may_be_builtin(self, node: ast.Name) -> bool:
        found = self.bindings.lookup(node)
        return found.builtin or found.unknown


def _analysis(tree: ast.Module) -> _Analysis:
    found = getattr(tree, "_kernelloop_analysis", None)
    if not isinstance(found, _Analysis):
        found = _Analysis(tree)
        tree._kernelloop_analysis = found  # type: ignore[attr-defined]
    return found


def _reads(node: ast.Name, parents: dict[int, ast.AST]) -> bool:
    """Whether a name is read here: a load, or the target of an augmented assignment (`x += 1` reads x)."""
    if isinstance(node.ctx, ast.Load):
        return True
    parent = parents.get(id(node))
    return isinstance(parent, ast.AugAssign) and parent.target is node


def _parents(tree: ast.Module) -> dict[int, ast.AST]:
    return {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}


def _override_name(node: ast.AST, tensor_methods: set[int], analysis: _Analysis) -> str | None:
    """The operator-override name this node uses or defines, if any. A name or attribute that is
    the candidate's own (a variable `custom_op` holding its load_inline module, `self.library`
    its class stored) is not torch's, whatever it is called."""
    if isinstance(node, ast.Attribute) and node.attr in OVERRIDE_NAMES and not analysis.own_attribute(node):
        return node.attr
    if isinstance(node, ast.Name) and node.id in OVERRIDE_NAMES and not (
            analysis.own_name(node) if isinstance(node.ctx, ast.Load) else not node.id.startswith("_")):
        return node.id
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in OVERRIDE_NAMES \
            and id(node) not in tensor_methods:
        return node.name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
        for alias in node.names:
            for part in [*module.split("."), *alias.name.split(".")]:
                if part in OVERRIDE_NAMES:
                    return part
    return None


_TRY_NODES: tuple[type[ast.stmt], ...] = (ast.Try, getattr(ast, "TryStar", ast.Try))  # try/except* from 3.11


def check_try(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, _TRY_NODES):
            return (f"try/except at line {node.lineno}: a candidate may not catch errors "
                    "(it could fall back to torch); let failures surface")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in EXCEPTION_DUNDERS:
            return (f"try/except at line {node.lineno}: `{node.name}` receives and can swallow errors "
                    "(it could fall back to torch); let failures surface")
    return None


def check_reference(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "Model":
            return f"reference model: the candidate names `Model` at line {node.lineno}; write ModelNew on its own"
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            return f"reference model: the candidate defines a class `Model` at line {node.lineno}"
        if isinstance(node, ast.Attribute) and node.attr == "Model":
            return f"reference model: the candidate reaches `.Model` at line {node.lineno}"
    return None


def check_monkeypatch(tree: ast.Module) -> str | None:
    aliases = _Aliases(tree)
    tensor_methods = _tensor_subclass_methods(tree)
    analysis = _analysis(tree)
    for node in ast.walk(tree):
        override = _override_name(node, tensor_methods, analysis)
        if override:
            # cast: _override_name names only function, class and import statements, which have a lineno
            return (f"monkeypatch: `{override}` at line {cast(ast.stmt, node).lineno}; a candidate may not register, "
                    "override or intercept operators")
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            targets = [node.target]
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
        for target in targets:
            for sub in _written(target):
                if not isinstance(sub, (ast.Attribute, ast.Subscript)):
                    continue
                # The object written into: `torch` in torch.x = ..., `t` in t.x = ... after t = torch.
                if _attribute_root(sub.value) in aliases.paths or aliases.aliased(sub.value):
                    # sub's line: a comprehension (`for torch.x in ...`) has none of its own
                    return (f"monkeypatch: assignment to {ast.unparse(sub)} at line {sub.lineno}; "
                            "a candidate may not change torch, triton or any module (or an alias of one)")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"monkeypatch: `{type(node).__name__.lower()}` statement at line {node.lineno}"
    return None


def _declared_call(node: ast.AST, parents: dict[int, ast.AST], allowed: object) -> bool:
    """Whether `node` is called right there with the one literal argument `allowed`."""
    call = parents.get(id(node))
    return (isinstance(call, ast.Call) and call.func is node and not call.keywords and len(call.args) == 1
            and isinstance(call.args[0], ast.Constant) and type(call.args[0].value) is type(allowed)
            and call.args[0].value == allowed)


def _precision_setter(node: ast.AST, parents: dict[int, ast.AST], aliases: _Aliases) -> str | None:
    """The precision setter `node` names, where it is anything but a call of the declared value."""
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        for alias in node.names:
            if alias.name in PRECISION_SETTERS or (alias.name in PRECISION_FLAGS and module.startswith("torch.backends")):
                return f"{module}.{alias.name}"
        return None
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
    if name in PRECISION_SETTERS and not _declared_call(node, parents, PRECISION_SETTERS[name]):
        return ast.unparse(node)
    if isinstance(node, ast.Attribute) and name in PRECISION_FLAGS and aliases.aliased(node.value):
        return ast.unparse(node)
    return None


def check_precision(tree: ast.Module) -> str | None:
    aliases = _Aliases(tree)
    parents = _parents(tree)
    for node in ast.walk(tree):
        setter = _precision_setter(node, parents, aliases)
        if setter:
            # cast: a setter is found only on an import, a name or an attribute, each with a lineno
            return (f"changes precision: `{setter}` at line {cast(ast.stmt, node).lineno}; torch's precision settings "
                    "are held at the reference's (TF32 off), and only a kernel of its own may choose TF32 (tl.dot)")
    return None


def check_streams(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in STREAM_NAMES:
            # cast: a name is found only on an ast.Attribute or ast.Name, both expressions with a lineno
            return (f"stream or thread: `{name}` at line {cast(ast.expr, node).lineno}; work must run on the current "
                    "stream so the timer sees it")
        graph = node.attr if isinstance(node, ast.Attribute) else None
        if isinstance(node, ast.ImportFrom):
            graph = next((alias.name for alias in node.names if alias.name in GRAPH_NAMES), None)
        if graph in GRAPH_NAMES:
            return (f"CUDA graph: `{graph}` at line {getattr(node, 'lineno', 0)}; a graph's replay hides its work from "
                    "the records of what ran (the verifier captures timed windows itself)")
    return None


def _root_name(node: ast.AST) -> ast.Name | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node if isinstance(node, ast.Name) else None


def check_calls(tree: ast.Module) -> str | None:
    analysis = _analysis(tree)
    parents = _parents(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "allow_pickle":
            return (f"forbidden call: allow_pickle= (line {node.value.lineno}); unpickling runs whatever the data "
                    "names (exec in disguise)")
        # The builtin only: `def forward(self, input)`, a local `input`, `[input for input in xs]` are not it.
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_BUILTINS and _reads(node, parents) \
                and analysis.may_be_builtin(node):
            return f"forbidden call: {node.id} (line {node.lineno})"
        if isinstance(node, ast.Name) and (node.id == "builtins"
                                           or (_is_dunder(node.id) and node.id not in ALLOWED_DUNDERS)):
            return f"forbidden call: {node.id} (line {node.lineno})"
        # (__torch_function__ is check_monkeypatch's: what it lets through is a Tensor subclass's)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_dunder(node.name) \
                and node.name not in ALLOWED_DUNDER_DEFS and node.name not in OVERRIDE_NAMES:
            return (f"forbidden call: defines {node.name} at line {node.lineno}; a candidate defines only "
                    f"{', '.join(sorted(ALLOWED_DUNDER_DEFS))} among dunder methods")
        if isinstance(node, ast.Attribute):
            attr = node.attr
            # the module the expression's root certainly is, through imports only (tl.load is triton's)
            root_name = _root_name(node)
            root = (analysis.bindings.imported_path(root_name) or "") if root_name is not None else ""
            why = _forbidden_name(attr, root)
            if why and why != "is private" and not (attr in FORBIDDEN_ATTRIBUTES and analysis.own_attribute(node)):
                return f"forbidden call: .{attr} (line {node.lineno}); it {why}"
            if attr.startswith("__") and attr not in ALLOWED_DUNDERS:
                return f"forbidden call: attribute {attr} (line {node.lineno})"
            if attr.startswith("_") and not attr.startswith("__") and _attribute_root(node) not in ("self", "cls") \
                    and analysis.bindings.imported_path(node) not in PRIVATE_ALLOWED:
                return f"forbidden call: private attribute {attr} (line {node.lineno})"
    return None


class _TooMuchText(Exception):
    """A string the module builds is longer than anything a kernel needs (at this line)."""


class _Folder:
    """Builds the strings a module makes from its own constants (+, f-strings, str.format, %, join,
    replace, slicing, chr, bytes), as far as that can be done without running anything, so
    `"sys" + "tem("` or `src = "sys"; src += "tem("` is scanned as `system(`. Names fold to the
    concatenation of everything ever assigned to them (flow-insensitive)."""

    SAFE_METHODS = frozenset({"lower", "upper", "strip", "lstrip", "rstrip", "casefold", "title", "swapcase",
                              "capitalize", "decode", "encode"})

    def __init__(self, tree: ast.Module):
        self.bindings: dict[str, list[ast.AST]] = defaultdict(list)
        self.items: dict[str, list[ast.AST]] = defaultdict(list)
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.bindings[target.id].append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
                if isinstance(node.target, ast.Name) and node.value is not None:
                    self.bindings[node.target.id].append(node.value)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and isinstance(node.func.value, ast.Name) and node.func.attr in ("append", "extend", "insert")):
                self.items[node.func.value.id].extend(node.args[-1:])
        self.names: dict[str, str | None] = {}
        self.active: set[str] = set()

    def fold(self, node: ast.AST | None) -> str | None:
        text = self._fold(node)
        if text is not None and len(text) > FOLD_LIMIT:
            raise _TooMuchText(getattr(node, "lineno", 0))
        return text

    def sequence(self, node: ast.AST | None) -> list[str] | None:
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return [self.fold(element) or "" for element in node.elts]
        if isinstance(node, ast.Name):
            parts: list[str] = []
            for value in self.bindings.get(node.id, []) + self.items.get(node.id, []):
                parts.extend(self.sequence(value) or [self.fold(value) or ""])
            return parts or None
        if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
            inner = self.sequence(node.generators[0].iter)
            element = node.elt
            if inner is not None and isinstance(element, ast.Call) and isinstance(element.func, ast.Name) \
                    and element.func.id in ("chr", "str"):
                return [self._chr(text) if element.func.id == "chr" else text for text in inner]
            return inner
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "map"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Name)):
            inner = self.sequence(node.args[1])
            if inner is not None and node.args[0].id == "chr":
                return [self._chr(text) for text in inner]
            return inner
        return None

    @staticmethod
    def _chr(text: str) -> str:
        return chr(int(text)) if _small_int(text) and int(text) < 0x110000 else text

    def _fold(self, node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return node.value
            if isinstance(node.value, bytes):
                return node.value.decode("latin-1")
            if isinstance(node.value, int) and not isinstance(node.value, bool) and abs(node.value) < 2**32:
                return str(node.value)
            return None
        if isinstance(node, ast.JoinedStr):
            return "".join(self.fold(value) or "" for value in node.values)
        if isinstance(node, ast.FormattedValue):
            return self.fold(node.value)
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.fold(node.left), self.fold(node.right)
            return None if left is None and right is None else (left or "") + (right or "")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            template = self.fold(node.left)
            if template is None:
                return None
            values = self.sequence(node.right) if isinstance(node.right, ast.Tuple) else [self.fold(node.right) or ""]
            return self._percent(template, values or [])
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice):
            text = self.fold(node.value)
            bounds = [self._int(part) for part in (node.slice.lower, node.slice.upper, node.slice.step)]
            return text[slice(*bounds)] if text is not None and bounds[2] != 0 else text
        if isinstance(node, ast.Call):
            return self._call(node)
        return None

    @staticmethod
    def _int(node: ast.AST | None) -> int | None:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and isinstance(node.operand.value, int):
            return -node.operand.value
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, int) else None

    def _name(self, name: str) -> str | None:
        if name in self.names:
            return self.names[name]
        if name in self.active:
            return None
        self.active.add(name)
        parts = [self.fold(value) for value in self.bindings.get(name, []) + self.items.get(name, [])]
        self.active.discard(name)
        found = [part for part in parts if part is not None]
        folded = "".join(found) if found else None
        self.names[name] = folded
        if folded is not None and len(folded) > FOLD_LIMIT:
            raise _TooMuchText(min(getattr(value, "lineno", 0) for value in self.bindings.get(name, [ast.Pass()])))
        return folded

    def _call(self, node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id == "chr" and node.args:
                text = self.fold(node.args[0])
                return self._chr(text) if text is not None else None
            if func.id == "str" and node.args:
                return self.fold(node.args[0])
            if func.id in ("bytes", "bytearray") and node.args:
                values = self.sequence(node.args[0])
                if values is not None:
                    return "".join(self._chr(value) for value in values)
                return self.fold(node.args[0])
            return None
        if not isinstance(func, ast.Attribute):
            return None
        if func.attr == "join" and node.args:
            separator, parts = self.fold(func.value), self.sequence(node.args[0])
            if parts is None:
                parts = [self.fold(node.args[0]) or ""]
            return (separator or "").join(parts)
        if func.attr in ("format", "format_map"):
            template = self.fold(func.value)
            if template is None:
                return None
            positional = [self.fold(arg) or "" for arg in node.args]
            named = {keyword.arg: self.fold(keyword.value) or "" for keyword in node.keywords if keyword.arg}
            return self._format(template, positional, named)
        if func.attr == "fromhex" and node.args:
            text = self.fold(node.args[0]) or ""
            digits = re.sub(r"\s", "", text)
            return bytes.fromhex(digits).decode("latin-1") if re.fullmatch(r"(?:[0-9a-fA-F]{2})*", digits) else text
        if func.attr == "replace" and len(node.args) >= 2:
            text, old, new = (self.fold(arg) for arg in (func.value, node.args[0], node.args[1]))
            if text is None or old is None or new is None or not old:
                return text
            if len(text) * (len(new) + 1) > FOLD_LIMIT * 4:
                return text + new
            return text.replace(old, new)
        if func.attr in self.SAFE_METHODS:
            text = self.fold(func.value)
            return getattr(text, func.attr)() if text is not None and func.attr not in ("decode", "encode") else text
        return None

    @staticmethod
    def _format(template: str, positional: list[str], named: dict[str, str]) -> str:
        """str.format without running it (a candidate's format spec could ask for a huge width)."""
        automatic = iter(positional)

        def field(match: re.Match) -> str:
            name = re.split(r"[.\[]", match.group(1), maxsplit=1)[0].strip()
            if not name:
                return next(automatic, "")
            if _small_int(name):
                return positional[int(name)] if int(name) < len(positional) else ""
            return named.get(name, "")

        return FORMAT_FIELD.sub(field, template.replace("{{", "\0").replace("}}", "\1")).replace(
            "\0", "{").replace("\1", "}")

    @staticmethod
    def _percent(template: str, values: list[str]) -> str:
        """`%` formatting without running it."""
        remaining = iter(values)

        def field(match: re.Match) -> str:
            return "%" if match.group(0) == "%%" else next(remaining, "")

        return re.sub(r"%%|%(?:\([^)]*\))?[#0\- +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[a-zA-Z]", field, template)


FOLDABLE = (ast.Constant, ast.JoinedStr, ast.BinOp, ast.Call, ast.Subscript)


def _strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every string constant, every string expression folded as far as it goes (only the largest
    expression of a nest), and every name's folded text: (line, text)."""
    folder = _Folder(tree)
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, FOLDABLE) and id(node) not in inside:
            text = folder.fold(node)
            if text is not None:
                for sub in ast.walk(node):
                    if sub is not node and isinstance(sub, FOLDABLE):
                        inside.add(id(sub))
                yield node.lineno, text
    for constant in ast.walk(tree):  # the pieces too: a match in one must not hide behind a join
        if isinstance(constant, ast.Constant) and isinstance(constant.value, (str, bytes)):
            value = constant.value
            yield constant.lineno, value if isinstance(value, str) else value.decode("latin-1")
    for name in sorted(folder.bindings):
        text = folder.fold(ast.Name(id=name))
        if text:
            line = min(getattr(value, "lineno", 0) for value in folder.bindings[name])
            yield line, text


def _comments(source: str) -> Iterator[tuple[int, str]]:
    """Comments: a @triton.jit function's source (comments included) is readable at run time."""
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    while True:
        try:
            token = next(tokens, None)
        except (tokenize.TokenError, SyntaxError):  # ast took it; the rest is not worth a crash
            return
        if token is None:
            return
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _native_text(text: str) -> str:
    """C++ as the compiler sees it: line splices joined, comments blanked."""
    text = text.replace("\\\r\n", "").replace("\\\n", "")
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


def _format_attribute(text: str) -> str | None:
    """The first off-limits attribute a str.format field in text reads ("{0.os.environ}" -> "os")."""
    for match in FORMAT_FIELD.finditer(text.replace("{{", "").replace("}}", "")):
        for attr in re.findall(r"\.\s*(\w+)", match.group(1)):
            if _forbidden_name(attr, "") or _is_dunder(attr):
                return attr
    return None


def check_strings(tree: ast.Module, source: str | None = None) -> str | None:
    """C++/CUDA that reaches the OS, or Python internals named by a string, in any string the module
    holds or builds, or (C++ only) in a comment."""
    scanned = 0
    try:
        texts = list(_strings(tree))
    except _TooMuchText as too_much:
        return (f"forbidden call: the string built at line {too_much.args[0]} is over {FOLD_LIMIT:,} characters; "
                "a kernel's source text must stay small enough to check")
    for line, text in texts:
        scanned += len(text)
        if scanned > SCAN_LIMIT:
            return (f"forbidden call: the module builds over {SCAN_LIMIT:,} characters of string text "
                    f"(line {line}); a kernel's source text must stay small enough to check")
        attr = _format_attribute(text)
        if attr:
            return (f"forbidden call: format field reading .{attr} in string at line {line}; "
                    "str.format may not reach modules")
        match = STRING_ESCAPES.search(text)
        if match:
            return (f"forbidden call: string naming `{match.group(0).strip()}` at line {line}; a kernel does "
                    "not reach interpreter internals by name")
        match = FORBIDDEN_NATIVE.search(_native_text(text))
        if match:
            return (f"forbidden call: `{match.group(0).strip()}` in string text at line {line}; C++/CUDA (or any "
                    "source text) may not reach the OS: processes, files, environment, asm")
    for line, comment in _comments(source) if source is not None else ():
        match = FORBIDDEN_NATIVE.search(comment)
        if match:
            return (f"forbidden call: `{match.group(0).strip()}` in a comment at line {line}; "
                    "a kernel's source text (comments included) may not hold C++ that reaches the OS")
    return None


CHECKS: tuple[tuple[Code, Callable[[ast.Module], str | None]], ...] = (
    # Most specific first: assigning to Tensor.__eq__ is a monkeypatch before it is a dunder access.
    (Code.forbidden_import, check_imports), (Code.try_except, check_try), (Code.reference_model, check_reference),
    (Code.monkeypatch, check_monkeypatch), (Code.changes_precision, check_precision),
    (Code.stream_or_thread, check_streams), (Code.forbidden_call, check_calls),
    (Code.forbidden_import, check_submodule_paths), (Code.forbidden_call, check_build_arguments),
    (Code.forbidden_call, check_extension_sources),
)


TOO_DEEP = ("forbidden call: the module nests expressions too deeply to check (a chain of hundreds of operators, "
            "or brackets inside brackets); split them into steps")


def iter_violations(source: str) -> Iterator[tuple[Code, str]]:
    tree = source_ast.parse(source)
    checks = [*CHECKS, (Code.forbidden_call, lambda parsed: check_strings(parsed, source))]
    for code, check in checks:
        try:
            reason = check(tree)
        except RecursionError:  # the checks recurse over the tree: a rejection, never a crash of the verifier
            yield Code.forbidden_call, TOO_DEEP
            return
        if reason:
            yield code, reason


def first_broken_rule(source: str) -> tuple[Code, str] | None:
    """The first broken rule as (code, one-line reason), or None. The source must already parse."""
    return next(iter_violations(source), None)


def first_violation(source: str) -> str | None:
    """The first broken rule's reason, or None."""
    found = first_broken_rule(source)
    return found[1] if found else None
