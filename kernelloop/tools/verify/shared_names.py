"""Names a candidate takes from its reference's module without defining them.

KernelBench's eval runs the reference's source and then the solution's in one namespace (the
`context` dict of eval_kernel_against_ref), so model output written for it may use the reference's
`batch_size` or its helper functions as its own: on the leaderboard, 3 of 162 solutions re-judged
on an H200 did, and failed here with a NameError. Such a candidate is judged as KernelBench judges
it: its module starts with those names from a run of the reference's source (in the candidate's
own process, which never sees a reference output), and the verdict says which names it took.
Only names the candidate reads and never binds itself are taken, so every other candidate runs
exactly as before."""

from __future__ import annotations

import symtable
from pathlib import Path

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


def reference_names(job: dict) -> dict[str, object]:
    """In the candidate's process: the names its job says it takes (`reference_names`), from a run of
    the reference's source (`reference_path`, beside the candidate in its job dir); {} for a job
    without them. A reference that fails to run raises (the candidate's import error then)."""
    wanted = job.get("reference_names")
    if not wanted or not isinstance(job.get("reference_path"), str):
        return {}
    module = import_source(Path(job["reference_path"]), "kernelloop_reference_names")
    return {name: getattr(module, name) for name in wanted if isinstance(name, str) and hasattr(module, name)}
