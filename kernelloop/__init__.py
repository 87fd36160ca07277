"""kernelloop: PyTorch reference in, fast verified GPU kernel out.

Public API, imported on first use so `import kernelloop` stays light (no torch, no LangGraph):
- `verify(candidate, problem)` -> Verdict (needs only torch, triton, nvidia-ml-py),
- `solve(problem)` -> SolveResult; `resume`, `replay` and `fork` a run's thread
  (all four live in kernelloop.serve.runs),
- `build_graph()` (the agent loop, compiled without a checkpointer so a parent graph's applies
  when it is embedded as a subgraph),
- `make_pool(device, ray)` -> VerifierPool (one verifier per GPU, or Ray actors),
- `kernelloop_tools()` -> the LangChain tools verify_kernel and optimize_kernel.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelloop.config import defaults

if TYPE_CHECKING:
    from kernelloop.problem import Candidate, Problem
    from kernelloop.records import Verdict

__version__ = "0.1.0"

_LAZY = {
    "solve": ("kernelloop.serve.runs", "solve"),
    "resume": ("kernelloop.serve.runs", "resume"),
    "replay": ("kernelloop.serve.runs", "replay"),
    "fork": ("kernelloop.serve.runs", "fork"),
    "SolveResult": ("kernelloop.serve.runs", "SolveResult"),
    "build_graph": ("kernelloop.graph.build", "build_graph"),
    "make_pool": ("kernelloop.tools.verify.pool", "make_pool"),
    "kernelloop_tools": ("kernelloop.serve.langchain", "kernelloop_tools"),
    "Problem": ("kernelloop.problem", "Problem"),
    "Candidate": ("kernelloop.problem", "Candidate"),
    "Verdict": ("kernelloop.records", "Verdict"),
}
__all__ = ["verify", *_LAZY, "__version__"]


def verify(candidate: Candidate | str | Path, problem: Problem | str | Path, *, device: str | None = None,
           strict: bool = False, time_it: bool = True, timeout_s: float | None = None,
           workspace: str | Path | None = None) -> Verdict:
    """Verify one candidate against a problem. Each is an object (Candidate, Problem), a file path, or
    source text (a str with a newline: `verify(new_src, ref_src)`, as KernelBench's
    eval_kernel_against_ref takes them).

    device: 'auto', 'cpu', 'cuda' or 'cuda:N'. timeout_s: each of the compile and run phases. Arguments
    left at None come from the Settings (KERNELLOOP_* > .env > kernelloop.toml > defaults), as in every
    entry point. For many candidates keep a `make_pool()` and call its verify.
    """
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.verify.pool import make_pool

    if not isinstance(candidate, Candidate):
        candidate = Candidate.from_source(candidate) if isinstance(candidate, str) and _is_text(candidate) \
            else Candidate.from_file(candidate)
    if not isinstance(problem, Problem):
        problem = Problem.from_source(problem) if isinstance(problem, str) and _is_text(problem) \
            else Problem.from_file(problem)
    chosen_device, space, (compile_s, run_s) = _verify_settings(device, workspace, timeout_s)
    with make_pool(chosen_device, workspace=space, strict=strict, time_it=time_it, compile_timeout_s=compile_s,
                   run_timeout_s=run_s) as pool:
        return pool.verify(candidate, problem)


def _is_text(given: str) -> bool:
    """Source text, not a path: a str with a line break (no problem or kernel file is named so)."""
    return "\n" in given


def _verify_settings(device: str | None, workspace: str | Path | None,
                     timeout_s: float | None) -> tuple[str, Path, tuple[float, float]]:
    """The device, workspace and job limits verify() runs with: from the one Settings where
    pydantic-settings is installed; on a bare GPU node (torch, triton, nvidia-ml-py alone) from the
    arguments, KERNELLOOP_DEVICE / KERNELLOOP_HOME and kernelloop.config.defaults."""
    try:
        from kernelloop.config.settings import load_settings
    except ImportError:
        import os

        from kernelloop.config.units import Device
        from kernelloop.config.workspace import workspace_dir

        limit = (timeout_s or defaults.COMPILE_TIMEOUT_S, timeout_s or defaults.RUN_TIMEOUT_S)
        return Device.parse(device or os.environ.get("KERNELLOOP_DEVICE") or defaults.DEVICE), \
            workspace_dir(workspace), limit
    chosen = load_settings(device=device, home=workspace, compile_timeout=timeout_s, run_timeout=timeout_s,
                           python_api=True)
    return chosen.device, chosen.workspace.root, (chosen.limits.compile_timeout_s, chosen.limits.run_timeout_s)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'kernelloop' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (lazy names included), so dir() and completion show what there is to call."""
    return sorted(__all__)
