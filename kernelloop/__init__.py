"""kernelloop: PyTorch reference in, fast verified GPU kernel out.

Public API, imported on first use so `import kernelloop` stays light (no torch, no LangGraph):
- `verify(candidate, problem)` -> Verdict (needs only torch, triton, nvidia-ml-py),
- `solve(problem)` -> SolveResult, and `build_graph()` (the agent loop, compiled without a
  checkpointer so a parent graph's applies when it is embedded as a subgraph),
- `make_pool(device, ray)` -> VerifierPool (one verifier per GPU, or Ray actors),
- `kernelloop_tools()` -> the LangChain tools verify_kernel and optimize_kernel.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelloop.problem import Candidate, Problem
    from kernelloop.results import Verdict

__version__ = "0.1.0"
__all__ = ["verify", "solve", "build_graph", "make_pool", "kernelloop_tools", "Problem", "Candidate", "Verdict",
           "SolveResult", "__version__"]

_LAZY = {
    "SolveResult": ("kernelloop.solve", "SolveResult"),
    "build_graph": ("kernelloop.graph.build", "build_graph"),
    "make_pool": ("kernelloop.tools.verify.pool", "make_pool"),
    "kernelloop_tools": ("kernelloop.langchain_tools", "kernelloop_tools"),
    "Problem": ("kernelloop.problem", "Problem"),
    "Candidate": ("kernelloop.problem", "Candidate"),
    "Verdict": ("kernelloop.results", "Verdict"),
}


def verify(candidate: Candidate | str | Path, problem: Problem | str | Path, **options: Any) -> Verdict:
    """Verify one candidate (a Candidate or a file path) against a problem (a Problem or a file path).

    options: device ('auto', 'cpu', 'cuda'), strict, time_it, timeout_s (s), workspace, as for
    kernelloop.tools.verify.verifier.verify; for many candidates keep a `make_pool()` and call its verify.
    """
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.verify.verifier import verify as verify_one

    candidate = candidate if isinstance(candidate, Candidate) else Candidate.from_file(candidate)
    problem = problem if isinstance(problem, Problem) else Problem.from_file(problem)
    return verify_one(candidate, problem, **options)


def __getattr__(name: str):
    if name == "solve":
        from importlib import import_module

        return import_module("kernelloop.solve")  # made callable by _Package below
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'kernelloop' has no attribute {name!r}")


class _CallableSolveModule(ModuleType):
    """kernelloop/solve.py, callable as its `solve` function."""

    def __call__(self, *args: Any, **kwargs: Any):
        return self.solve(*args, **kwargs)


class _Package(ModuleType):
    """`kernelloop.solve` names both the function and its module, kernelloop/solve.py; once the module
    is imported (by anyone), Python binds the package attribute to the module. Making that module
    callable keeps `kernelloop.solve(problem)` and `from kernelloop import solve` the function,
    while `kernelloop.solve.resume` and `from kernelloop.solve import ...` keep working."""

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        if name == "solve" and type(value) is ModuleType:
            value.__class__ = _CallableSolveModule
        return value


sys.modules[__name__].__class__ = _Package
