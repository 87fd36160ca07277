"""What the parent needs from a problem, and how it gets it without running a problem it can't trust.

A problem is code: importing one runs it. The user's own problem files are imported in the
parent (problem.py: fast, clear usage errors). A problem from outside (an MCP or LangChain
caller's problem_source or path, a directory bench was pointed at) is never imported here: the
parent only parses it (`check_source`, the names the format needs), and its trusted job, in the
sandbox, imports it, checks it (`check_module`) and sends back what the parent needs as plain
data (`metadata`), which the parent checks again before use (`checked_tolerance`). So nothing a
problem does at import time (read the API key, patch torch or the comparison, write a file)
happens in the process that decides the verdicts.
"""

from __future__ import annotations

import ast
import inspect
import math
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from kernelloop import source_ast
from kernelloop.errors import ProblemError

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
OPTIONAL = ("get_baselines", "TOLERANCE", "get_input_variants", "INPUT_SCALES", "get_workloads", "BACKWARD")
DEFAULT_WORKLOAD = "default"  # get_inputs()'s name, unless get_workloads names it (maps a name to get_inputs)
MAX_WORKLOADS = 16  # each is judged and timed in every verification: a bound on what one problem costs
_WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
TOLERANCE_KEYS = ("atol", "rtol", "rel", "median_rel", "bias")
_TOLERANCE_EXAMPLE = "{'float32': {'atol': 1e-4, 'rtol': 1e-4}}"


def _missing(where: str, missing: list[str]) -> ProblemError:
    return ProblemError(f"{where}: missing {', '.join(missing)} (a problem needs {', '.join(REQUIRED)})")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def check_source(source: str, where: str) -> None:
    """The parent's whole look at a problem it does not run: it parses, and binds the names the
    format needs at its top level (how they behave, its trusted job checks)."""
    try:
        tree = source_ast.parse(source, filename=where)
    except SyntaxError as exc:
        raise ProblemError(f"{where}:{exc.lineno}: syntax error: {exc.msg}") from None
    missing = [name for name in REQUIRED if name not in _top_level_names(tree)]
    if missing:
        raise _missing(where, missing)


def check_module(module: ModuleType, where: str) -> None:
    """The names and signatures the format needs, on the imported module (in the parent for the
    user's own problems, in the trusted job for the others)."""
    import torch.nn as nn

    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise _missing(where, missing)
    if not (inspect.isclass(module.Model) and issubclass(module.Model, nn.Module)):
        raise ProblemError(f"{where}: Model must be a subclass of torch.nn.Module")
    for fn in ("get_inputs", "get_init_inputs"):
        obj = getattr(module, fn)
        if not callable(obj):
            raise ProblemError(f"{where}: {fn} must be a function")
        if any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               for p in inspect.signature(obj).parameters.values()):
            raise ProblemError(f"{where}: {fn}() must take no arguments")
    checked_tolerance(getattr(module, "TOLERANCE", None), where)
    workloads(module, where)
    if not isinstance(getattr(module, "BACKWARD", False), bool):
        raise ProblemError(f"{where}: BACKWARD must be True or False")
    scales = getattr(module, "INPUT_SCALES", ())
    if not (isinstance(scales, (tuple, list)) and all(isinstance(x, (int, float)) and x > 0 for x in scales)):
        raise ProblemError(f"{where}: INPUT_SCALES must be a tuple of positive numbers like (1e-3, 1e3)")


def checked_tolerance(raw: object, where: str) -> dict[str, dict[str, float]]:
    """A problem's TOLERANCE as plain data: {dtype name: {bound: finite number >= 0}}; None or {} is
    {}, anything else a one-line ProblemError. Checked again in the parent: the trusted job of an
    untrusted problem runs that problem's code, so what it sends is a claim until checked."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: TOLERANCE must be a dict like {_TOLERANCE_EXAMPLE}")
    checked: dict[str, dict[str, float]] = {}
    for dtype, bounds in raw.items():
        if not isinstance(dtype, str) or not isinstance(bounds, dict):
            raise ProblemError(f"{where}: TOLERANCE must be a dict like {_TOLERANCE_EXAMPLE}")
        checked[dtype] = {}
        for key, value in bounds.items():
            if key not in TOLERANCE_KEYS or isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise ProblemError(f"{where}: TOLERANCE[{dtype!r}][{key!r}] must be one of {', '.join(TOLERANCE_KEYS)} "
                                   f"with a finite number >= 0")
            checked[dtype][key] = float(value)
    return checked


def workloads(module: ModuleType, where: str) -> list[tuple[str, Callable[[], Any]]]:
    """The problem's workloads in order, get_inputs() first: [(name, zero-argument function)].
    Without get_workloads, one: ("default", get_inputs). get_workloads() maps a name to a function
    that returns inputs as get_inputs() does; the name mapped to get_inputs itself names the
    default, which is otherwise added first as "default". A bad one is a one-line ProblemError."""
    default = module.get_inputs
    if not hasattr(module, "get_workloads"):
        return [(DEFAULT_WORKLOAD, default)]
    if not callable(module.get_workloads):
        raise ProblemError(f"{where}: get_workloads must be a function")
    try:
        raw = module.get_workloads()
    except Exception as exc:  # noqa: BLE001 - the problem's own code: its failure is a usage error
        raise ProblemError(f"{where}: get_workloads() failed: {type(exc).__name__}: {exc}"[:500]) from None
    if not isinstance(raw, dict) or not raw:
        raise ProblemError(f"{where}: get_workloads() must return a non-empty dict like "
                           "{'cols_128': get_inputs, 'cols_3000': get_inputs_3000}")
    if len(raw) > MAX_WORKLOADS:
        raise ProblemError(f"{where}: get_workloads() names {len(raw)} workloads, over the limit of {MAX_WORKLOADS}")
    found: list[tuple[str, Callable[[], Any]]] = []
    for name, fn in raw.items():
        if not isinstance(name, str) or not _WORKLOAD_NAME.match(name):
            raise ProblemError(f"{where}: workload name {name!r}: letters, digits, '_', '-', '.' only (at most 64)")
        if not callable(fn) or any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                   for p in inspect.signature(fn).parameters.values()):
            raise ProblemError(f"{where}: workload {name!r} must be a function of no arguments")
        found.append((name, fn))
    named_default = [i for i, (_, fn) in enumerate(found) if fn is default]
    if named_default:  # the default first, whatever its place in the dict: it is what a verification times first
        return [found[named_default[0]]] + [w for i, w in enumerate(found) if i != named_default[0]]
    if any(name == DEFAULT_WORKLOAD for name, _ in found):
        raise ProblemError(f"{where}: workload {DEFAULT_WORKLOAD!r} is get_inputs()'s name: map it to get_inputs itself")
    return [(DEFAULT_WORKLOAD, default), *found]


def source_workload_names(source: str) -> list[str]:
    """The workload names of a problem that is only parsed here, read off its source where
    get_workloads returns a dict literal with string keys ([] where it can't be read so): for the
    prompts only; its trusted job says which workloads are judged."""
    try:
        tree = source_ast.parse(source)
    except SyntaxError:
        return []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "get_workloads":
            returned = [n.value for n in ast.walk(node) if isinstance(n, ast.Return)]
            if len(returned) != 1 or not isinstance(returned[0], ast.Dict):
                return []
            pairs = returned[0]
            if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in pairs.keys):
                return []
            keys = [str(k.value) for k in pairs.keys if isinstance(k, ast.Constant)]
            named = [k for k, v in zip(keys, pairs.values) if isinstance(v, ast.Name) and v.id == "get_inputs"]
            if named:
                return [named[0], *(k for k in keys if k != named[0])]
            return [DEFAULT_WORKLOAD, *keys]
    return []


def checked_workload_names(raw: object, where: str) -> list[str]:
    """The workload names the trusted job sent, checked again here (its problem's code made them): [] for none."""
    if raw is None:
        return []
    if not (isinstance(raw, list) and 0 < len(raw) <= MAX_WORKLOADS + 1
            and all(isinstance(n, str) and _WORKLOAD_NAME.match(n) for n in raw) and len(set(raw)) == len(raw)):
        raise ProblemError(f"{where}: the trusted job sent malformed workload names")
    return list(raw)


def metadata(module: ModuleType, where: str) -> dict[str, Any]:
    """What the parent takes from an imported problem: plain data a JSON line can carry."""
    meta: dict[str, Any] = {"tolerance": checked_tolerance(getattr(module, "TOLERANCE", None), where),
                            "extras": [name for name in OPTIONAL if hasattr(module, name)]}
    if hasattr(module, "get_workloads"):  # KernelBench problems send nothing new
        meta["workloads"] = [name for name, _ in workloads(module, where)]
    if judges_backward(module):
        meta["backward"] = True
    return meta


def judges_backward(module: ModuleType) -> bool:
    """BACKWARD = True: the backward pass is judged too (the gradients of the floating inputs and
    of the parameters, for an upstream gradient drawn from the verification's secret seed)."""
    return getattr(module, "BACKWARD", False) is True


def source_backward(source: str) -> bool:
    """Whether a problem that is only parsed here sets BACKWARD = True at its top level: for the
    prompts only; its trusted job says whether the backward is judged."""
    try:
        tree = source_ast.parse(source)
    except SyntaxError:
        return False
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant) \
                and node.value.value is True:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "BACKWARD" for t in targets):
                return True
    return False


MAX_GRADIENTS = 4096  # floating inputs and parameters: names a JSON line carries
_GRADIENT_NAME = re.compile(r"^(input [0-9]{1,4}|[A-Za-z0-9_.]{1,200})$")


def checked_gradient_names(raw: object, where: str) -> list[str]:
    """The gradients' names the trusted job sent ("input 0", a parameter's name), checked again here."""
    if raw is None:
        return []
    if not (isinstance(raw, list) and len(raw) <= MAX_GRADIENTS
            and all(isinstance(n, str) and _GRADIENT_NAME.match(n) for n in raw) and len(set(raw)) == len(raw)):
        raise ProblemError(f"{where}: the trusted job sent malformed gradient names")
    return list(raw)
