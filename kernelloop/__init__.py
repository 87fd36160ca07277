"""kernelloop: PyTorch reference in, fast verified GPU kernel out.

Public API, imported on first use so `import kernelloop` stays light (no torch, no LangGraph):
- `verify(candidate, problem)` -> Verdict (needs only torch, triton, nvidia-ml-py),
- `solve(problem)` -> SolveResult; `resume`, `replay` and `fork` a run's thread
  (all four live in kernelloop.runs),
- `build_graph()` (the agent loop, compiled without a checkpointer so a parent graph's applies
  when it is embedded as a subgraph),
- `make_pool(device, ray)` -> VerifierPool (one verifier per GPU, or Ray actors),
- `kernelloop_tools()` -> the LangChain tools verify_kernel and optimize_kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelloop import defaults

if TYPE_CHECKING:
    from kernelloop.problem import Candidate, Problem
    from kernelloop.results import Verdict

__version__ = "0.1.0"

_LAZY = {
    "solve": ("kernelloop.runs", "solve"),
    "resume": ("kernelloop.runs", "resume"),
    "replay": ("kernelloop.runs", "replay"),
    "fork": ("kernelloop.runs", "fork"),
    "SolveResult": ("kernelloop.runs", "SolveResult"),
    "build_graph": ("kernelloop.graph.build", "build_graph"),
    "make_pool": ("kernelloop.tools.verify.pool", "make_pool"),
    "kernelloop_tools": ("kernelloop.langchain_tools", "kernelloop_tools"),
    "Problem": ("kernelloop.problem", "Problem"),
    "Candidate": ("kernelloop.problem", "Candidate"),
    "Verdict": ("kernelloop.results", "Verdict"),
}
__all__ = ["verify", *_LAZY, "__version__"]


def verify(candidate: Candidate | str | Path, problem: Problem | str | Path, *, device: str = defaults.DEVICE,
           strict: bool = False, time_it: bool = True, timeout_s: float | None = None,
           workspace: str | Path | None = None) -> Verdict:
    """Verify one candidate (a Candidate or a file path) against a problem (a Problem or a file path).

    device: 'auto', 'cpu', 'cuda' or 'cuda:N'. timeout_s: each of the compile and run phases.
    For many candidates keep a `make_pool()` and call its verify.
    """
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.verify.pool import make_pool

    candidate = candidate if isinstance(candidate, Candidate) else Candidate.from_file(candidate)
    problem = problem if isinstance(problem, Problem) else Problem.from_file(problem)
    limits: dict[str, Any] = {} if timeout_s is None else {"compile_timeout_s": timeout_s, "run_timeout_s": timeout_s}
    with make_pool(device, workspace=workspace, strict=strict, time_it=time_it, **limits) as pool:
        return pool.verify(candidate, problem)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'kernelloop' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (lazy names included), so dir() and completion show what there is to call."""
    return sorted(__all__)
