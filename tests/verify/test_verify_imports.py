"""The verifier's import graph: the trusted worker never loads the candidate's child (harness.py),
and the modules of tools/verify import one another without cycles (docs/architecture.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from kernelloop.tools.verify import workers

VERIFY = Path(__file__).resolve().parents[2] / "kernelloop" / "tools" / "verify"
PACKAGE = "kernelloop.tools.verify"
HARNESS = f"{PACKAGE}.harness"


def _loaded_after_import(module: str) -> set[str]:
    """The kernelloop modules a fresh interpreter holds after importing `module` (nothing else imported first)."""
    script = f"import importlib, sys; importlib.import_module({module!r}); print('\\n'.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return {name for name in done.stdout.split() if name.startswith("kernelloop")}


def test_the_trusted_job_does_not_load_the_harness():
    for module in (f"{PACKAGE}.reference_job", workers.TRUSTED_MODULE):
        loaded = _loaded_after_import(module)
        assert f"{PACKAGE}.reference_job" in loaded and HARNESS not in loaded, module


def test_only_the_candidates_worker_runs_the_harness():
    made = workers.layout("cpu", Path("/nonexistent-workspace"), None, standby=False, time_it=False, isolation="plain")
    assert made.candidate.module == HARNESS
    assert made.trusted.module == made.problems.module == workers.TRUSTED_MODULE != HARNESS


def _runtime_imports(path: Path) -> set[str]:
    """The tools/verify modules `path` imports when it runs: top-level and lazy imports alike; not
    those under `if TYPE_CHECKING:` (names for the type checker only)."""
    tree = ast.parse(path.read_text())
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
               for stmt in block.body for node in ast.walk(stmt)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}  # `from package import module`
    return {name.removeprefix(f"{PACKAGE}.") for name in found if name.startswith(f"{PACKAGE}.")} & _modules()


def _modules() -> set[str]:
    return {path.stem for path in VERIFY.glob("*.py") if path.stem != "__init__"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles_among_the_verify_modules():
    graph = {name: _runtime_imports(VERIFY / f"{name}.py") - {name} for name in _modules()}
    assert graph["harness"] >= {"child"} and "harness" not in graph["reference_job"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_check_finds_a_cycle():
    # The check above is worth something only if a cycle, lazy imports included, is found.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
