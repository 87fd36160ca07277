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
    """The module's AST; a SyntaxError (as every caller handles) where it nests too deep to build."""
    with _LOCK:
        try:
            return ast.parse(source, filename=filename)
        except RecursionError:  # thousands of operators in one chain: CPython's AST constructor gives up
            raise SyntaxError("expressions nested too deeply to parse (a chain of thousands of operators?); "
                              "split them into steps", (filename, 1, 1, None)) from None
