"""pyproject.toml declares what the package imports, and nothing it doesn't; the repo documents itself."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# distribution -> the top-level module it provides, where the names differ
MODULE_OF = {"nvidia-ml-py": "pynvml", "pydantic-settings": "pydantic_settings",
             "typing-extensions": "typing_extensions", "langgraph-checkpoint-sqlite": "langgraph.checkpoint.sqlite",
             "langchain-core": "langchain_core", "langchain-openai": "langchain_openai",
             "markdown-it-py": "markdown_it", "pydantic-core": "pydantic_core"}


def _imports() -> set[str]:
    """Every module imported by kernelloop/ (dotted, as written), problems and fixtures aside."""
    found: set[str] = set()
    for path in (ROOT / "kernelloop").rglob("*.py"):
        if "evals/problems" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module)
    return found


def _declared() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["ray"]
    return {re.split(r"[<>=\[ ]", spec)[0]: spec for spec in specs}


def test_every_declared_package_is_imported_and_pinned_to_a_major_version():
    imports = _imports()
    for name, spec in _declared().items():
        module = MODULE_OF.get(name, name.replace("-", "_"))
        assert any(i == module or i.startswith(module + ".") for i in imports), f"{name} is declared, never imported"
        assert "<" in spec, f"{spec}: pin the major version"


def test_every_imported_package_is_declared():
    provided = {MODULE_OF.get(name, name.replace("-", "_")).split(".")[0] for name in _declared()}
    third_party = {i.split(".")[0] for i in _imports()} - set(sys.stdlib_module_names) - {"kernelloop"}
    assert third_party <= provided, f"imported but not declared: {sorted(third_party - provided)}"


def test_no_file_points_outside_the_repository():
    texts = [*ROOT.glob("*.md"), *(p for d in ("kernelloop", "docs", "tests", "benchmarks", "examples")
                                   for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".md", ".j2", ".toml"))]
    outside = [str(p.relative_to(ROOT)) for p in texts if re.search(r"\.\./shared|DESIGN\.md", p.read_text())
               and p != Path(__file__)]
    assert outside == []
