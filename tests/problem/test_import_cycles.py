"""The package has no import cycles, counting imports inside functions too, and its rooms import one
way: tools/profile never imports tools/verify, agents/turns.py (the records) imports no model layer.

Read from the source with the AST, so a lazy import that closes a loop counts as much as a top one.
Imports under `if TYPE_CHECKING:` never run and name a type only (verification.py names the Verifier
that makes it): they are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "kernelloop"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If) and _is_type_checking(node.test)
                       for statement in node.body for inner in ast.walk(statement)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("kernelloop"):
                targets = [resolve(f"{node.module}.{alias.name}") or resolve(node.module or "") for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [resolve(alias.name) for alias in node.names if alias.name.startswith("kernelloop")]
            edges[name] |= {t for t in targets if t and t != name}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in edges:
        if node not in index:
            visit(node)
    return groups


def test_no_module_imports_itself_round_about():
    assert _cycles(_edges(_modules())) == []


def test_the_rooms_that_were_a_loop_import_one_way():
    edges = _edges(_modules())
    assert not {t for m, ts in edges.items() if m.startswith("kernelloop.tools.profile") for t in ts
                if t.startswith("kernelloop.tools.verify")}
    assert not {t for t in edges["kernelloop.agents.turns"] if t == "kernelloop.agents.llm"}


def test_the_check_sees_a_cycle():
    # worth something only if a loop, lazy or not, is found
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
