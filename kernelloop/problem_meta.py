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
from types import ModuleType
from typing import Any

from kernelloop import source_ast
from kernelloop.errors import ProblemError

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
OPTIONAL = ("get_baselines", "TOLERANCE", "get_input_variants", "INPUT_SCALES")
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


def metadata(module: ModuleType, where: str) -> dict[str, Any]:
    """What the parent takes from an imported problem: plain data a JSON line can carry."""
    return {"tolerance": checked_tolerance(getattr(module, "TOLERANCE", None), where),
            "extras": [name for name in OPTIONAL if hasattr(module, name)]}
