"""Names a candidate takes from its reference's module without defining them.

KernelBench's eval runs the reference's source and then the solution's in one namespace (the
`context` dict of eval_kernel_against_ref), so model output written for it may use the reference's
`batch_size` or its helper functions as its own: on the leaderboard, 3 of 162 solutions re-judged
on an H200 did, and failed here with a NameError. Such a candidate is judged as KernelBench judges
it: its module starts with those names from a run of the reference's source (in the candidate's
own process, which never sees a reference output), and the verdict says which names it took.
Only names the candidate reads and never binds itself are taken, so every other candidate runs
exactly as before.

Only values the reference defines pass (`shareable`): plain data (numbers, strings, None, dtypes,
devices, sizes, tensors, and tuples, lists and dicts of them) and the functions and classes the
reference's own source defines. Never a module or anything taken from one (`torch`, `F`,
`relu = torch.relu`): a candidate that reads torch through the reference's names and patches it
was invisible to the lint's monkeypatch rule (issue 35), and a candidate imports what it uses."""

from __future__ import annotations

import symtable
import types
from pathlib import Path

import torch

from kernelloop.problem import import_source

_MODULE_DUNDERS = {"__file__", "__name__", "__doc__", "__spec__", "__loader__", "__package__", "__builtins__",
                   "__annotations__"}


def _bound_at_top(top: symtable.SymbolTable) -> set[str]:
    """What a module binds at its top level: assignments, imports, defs and classes."""
    return {symbol.get_name() for symbol in top.get_symbols()
            if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace()}


def _read_globals(table: symtable.SymbolTable, top: bool = True) -> set[str]:
    """Names read as module globals anywhere in the module: at its top level, and in functions and
    classes where they are neither local nor declared otherwise."""
    names = set()
    for symbol in table.get_symbols():
        if not symbol.is_referenced():
            continue
        if top or symbol.is_global():
            names.add(symbol.get_name())
    for child in table.get_children():
        names |= _read_globals(child, top=False)
    return names


def names_from_reference(candidate_source: str, reference_source: str) -> list[str]:
    """The reference's top-level names the candidate reads and never binds (sorted); [] when either
    does not parse (the candidate's syntax error is reported where it is imported)."""
    try:
        candidate = symtable.symtable(candidate_source, "candidate.py", "exec")
        reference = symtable.symtable(reference_source, "reference.py", "exec")
    except (SyntaxError, ValueError):
        return []
    wanted = _read_globals(candidate) - _bound_at_top(candidate) - _MODULE_DUNDERS
    return sorted(wanted & _bound_at_top(reference))


_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.Size, torch.Tensor)
_MAX_DEPTH = 4  # tuples of tuples of ...: deeper is no reference's constant


def shareable(value: object, module_name: str, depth: int = 0) -> bool:
    """Whether a reference's top-level value may pass to the candidate: plain data (containers of it
    too), or a function or class the reference's source itself defines (`__module__` is its own).
    Never a module, nor a function, class or object that came from one."""
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (tuple, list, frozenset, set)) and depth < _MAX_DEPTH:
        return all(shareable(item, module_name, depth + 1) for item in value)
    if isinstance(value, dict) and depth < _MAX_DEPTH:
        return all(shareable(k, module_name, depth + 1) and shareable(v, module_name, depth + 1)
                   for k, v in value.items())
    if isinstance(value, (types.FunctionType, type)):
        return getattr(value, "__module__", None) == module_name
    return False


def reference_names(job: dict) -> dict[str, object]:
    """In the candidate's process: the names its job says it takes (`reference_names`), from a run of
    the reference's source (`reference_path`, beside the candidate in its job dir); {} for a job
    without them. A reference that fails to run raises (the candidate's import error then), and so
    does a name whose value is not `shareable` (a module: the candidate must import it itself)."""
    wanted = job.get("reference_names")
    if not wanted or not isinstance(job.get("reference_path"), str):
        return {}
    module = import_source(Path(job["reference_path"]), "kernelloop_reference_names")
    taken = {name: getattr(module, name) for name in wanted if isinstance(name, str) and hasattr(module, name)}
    for name, value in taken.items():
        if not shareable(value, module.__name__):
            raise NameError(f"name {name!r} is not defined: the reference's {name} is a module or was taken from "
                            "one, and only values the reference defines are shared; import what you use yourself")
    return taken
