"""`ast.parse` for code kernelloop reads but never runs, safe to call from several threads.

CPython 3.11 keeps the AST constructor's recursion counter in interpreter-wide state, so two
threads parsing at once can fail with "SystemError: AST constructor recursion depth mismatch"
(python/cpython#106905). LangGraph runs parallel coder nodes in threads, and the pool verifies
in threads, so every parse here goes through one lock. Parsing a candidate takes milliseconds.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename=filename)
