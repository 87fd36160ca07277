"""Static rules a candidate must pass before it runs: small named checks, one entry point.

Each check walks the candidate's AST and returns a one-line reason or None. The reasons use
the vocabulary the verifier promises (see Verdict.reason): "forbidden import",
"forbidden call", "try/except", "reference model", "monkeypatch", "stream or thread".
When in doubt a check rejects: the coder gets the reason and can write it another way.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

from kernelloop import source_ast

# Modules a kernel may import. Anything else (os, sys, subprocess, socket, ctypes, threading,
# importlib, pickle, ...) can reach the process, the network or the checker.
ALLOWED_IMPORTS = frozenset({
    "torch", "triton", "math", "numpy", "typing", "functools", "itertools", "operator",
    "collections", "dataclasses", "enum", "abc", "__future__",
})
# Submodules of allowed packages that still give a way out.
FORBIDDEN_SUBMODULES = ("torch.multiprocessing", "torch.distributed", "torch.hub", "torch.testing",
                        "torch.utils.data", "numpy.ctypeslib", "torch._dynamo", "torch._inductor")
FORBIDDEN_BUILTINS = frozenset({
    "eval", "exec", "compile", "open", "__import__", "globals", "locals", "vars", "setattr",
    "delattr", "getattr", "breakpoint", "input", "exit", "quit", "help", "memoryview",
})
# Attribute names that read or write files, load native code or reach the interpreter.
FORBIDDEN_ATTRIBUTES = frozenset({
    "load", "save", "from_file", "fromfile", "tofile", "memmap", "loadtxt", "savetxt", "genfromtxt",
    "load_library", "ctypeslib", "hub", "system", "popen", "environ", "getenv",
    # modules that allowed packages re-export (torch.os, numpy.sys, ...): a way round the import rule
    "os", "sys", "subprocess", "ctypes", "socket", "importlib", "builtins", "threading", "multiprocessing",
    "signal", "shutil", "pathlib", "io", "inspect", "gc", "types", "pickle", "weakref", "atexit",
    # process and file operations under any name
    "kill", "killpg", "fork", "forkpty", "spawn", "execv", "execve", "remove", "unlink", "rmdir", "rename",
    "chmod", "write_text", "write_bytes", "read_text", "read_bytes",
})
# The only dunder a candidate needs is super().__init__().
ALLOWED_DUNDERS = frozenset({"__init__", "__name__"})
STREAM_NAMES = frozenset({"Stream", "stream", "set_stream", "ExternalStream", "StreamContext", "Event",
                          "Thread", "ThreadPoolExecutor"})
# Tokens in C++/CUDA source (load_inline) that leave the kernel's business.
FORBIDDEN_NATIVE = re.compile(
    r"\b(system|popen|fork|vfork|execv\w*|execl\w*|socket|connect|fopen|open|dlopen|kill|ptrace|"
    r"cudaStreamCreate\w*|pthread_create|std::thread|std::async)\s*\(|#\s*include\s*<(unistd|sys/|thread|fstream|dlfcn)"
)


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


def check_imports(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return f"forbidden import: relative import at line {node.lineno}"
            base = node.module or ""
            modules = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            if _module_root(module) not in ALLOWED_IMPORTS:
                return (f"forbidden import: {module} (line {node.lineno}); kernels may import only "
                        f"{', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))}")
            if any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN_SUBMODULES):
                return f"forbidden import: {module} (line {node.lineno})"
    return None


def check_calls(tree: ast.Module) -> str | None:
    imported = _imported_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_BUILTINS:
            return f"forbidden call: {node.id} (line {node.lineno})"
        if isinstance(node, ast.Name) and node.id in ("__builtins__", "builtins"):
            return f"forbidden call: {node.id} (line {node.lineno})"
        if isinstance(node, ast.Attribute):
            attr = node.attr
            # tl.load is Triton's memory op, not file I/O; nothing else under triton is exempt.
            triton_memory_op = attr == "load" and imported.get(_attribute_root(node) or "", "").startswith("triton")
            if attr in FORBIDDEN_ATTRIBUTES and not triton_memory_op:
                return f"forbidden call: .{attr} (line {node.lineno}); kernels don't touch files or the environment"
            if attr.startswith("__") and attr not in ALLOWED_DUNDERS:
                return f"forbidden call: attribute {attr} (line {node.lineno})"
            if attr.startswith("_") and not attr.startswith("__") and _attribute_root(node) not in ("self", "cls"):
                return f"forbidden call: private attribute {attr} (line {node.lineno})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load_inline":
            native = " ".join(c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str))
            match = FORBIDDEN_NATIVE.search(native)
            if match:
                return f"forbidden call: {match.group(0).strip()} in load_inline source (line {node.lineno})"
    return None


def check_try(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
            return (f"try/except at line {node.lineno}: a candidate may not catch errors "
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
    imported = _imported_names(tree)
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, (ast.Attribute, ast.Subscript)) and _attribute_root(sub) in imported:
                    return (f"monkeypatch: assignment to {ast.unparse(sub)} at line {node.lineno}; "
                            "a candidate may not change torch, triton or any module")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return f"monkeypatch: `{type(node).__name__.lower()}` statement at line {node.lineno}"
    return None


def check_streams(tree: ast.Module) -> str | None:
    for node in ast.walk(tree):
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        if name in STREAM_NAMES:
            return (f"stream or thread: `{name}` at line {node.lineno}; work must run on the current "
                    "stream so the timer sees it")
    return None


CHECKS: tuple[Callable[[ast.Module], str | None], ...] = (
    # Most specific first: assigning to Tensor.__eq__ is a monkeypatch before it is a dunder access.
    check_imports, check_try, check_reference, check_monkeypatch, check_streams, check_calls,
)


def iter_violations(source: str) -> Iterator[str]:
    tree = source_ast.parse(source)
    for check in CHECKS:
        reason = check(tree)
        if reason:
            yield reason


def first_violation(source: str) -> str | None:
    """The first broken rule, or None. The source must already parse."""
    return next(iter_violations(source), None)
