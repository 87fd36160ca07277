"""The verifier imports on a bare GPU node: torch, triton and nvidia-ml-py only (docs/architecture.md).

Runs in a fresh interpreter so modules already imported by other tests can't hide a missing
dependency; the agent-side packages are blocked at import.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

AGENT_SIDE = ("pydantic", "langgraph", "langchain_core", "langchain_openai", "typer", "rich", "jinja2", "matplotlib")
VERIFIER_MODULES = (
    "kernelloop.tools.verify.verifier",
    "kernelloop.tools.profile.measure",
    "kernelloop.tools.verify.speed",
    "kernelloop.tools.profile.ncu",
    "kernelloop.tools.verify.harness",
    "kernelloop.tools.verify.trusted_child",
    "kernelloop.tools.verify.localise",
    "kernelloop.tools.profile.ncu_budget",
)


def _import_with_blocked(blocked: tuple[str, ...], modules: tuple[str, ...]) -> subprocess.CompletedProcess:
    script = textwrap.dedent(
        f"""
        import builtins
        real = builtins.__import__
        def guard(name, *args, **kwargs):
            if name.split('.')[0] in {blocked!r}:
                raise ImportError('blocked ' + name)
            return real(name, *args, **kwargs)
        builtins.__import__ = guard
        import importlib
        for module in {modules!r}:
            importlib.import_module(module)
        print('ok')
        """
    )
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def test_verifier_imports_without_agent_side_packages():
    done = _import_with_blocked(AGENT_SIDE, VERIFIER_MODULES)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_the_guard_does_block():
    # The check above is only worth something if a blocked import really fails.
    done = _import_with_blocked(("json",), ("kernelloop.records",))
    assert done.returncode != 0 and "blocked json" in done.stderr
