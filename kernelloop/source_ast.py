"""`ast.parse` for code kernelloop reads but never runs, bounded and safe to call from several threads.

CPython 3.11 keeps the AST constructor's recursion counter in interpreter-wide state, so two
threads parsing at once can fail with "SystemError: AST constructor recursion depth mismatch"
(python/cpython#106905). LangGraph runs parallel coder nodes in threads, and the pool verifies
in threads, so every parse here goes through one lock. Parsing a candidate takes milliseconds.

Python's parser recurses per level of nesting, and a chain of 10,000 `not` (40 KB) makes it raise
MemoryError ("parser stack overflowed"), 3,000 `+` a RecursionError, out of `ast.parse`, `compile`
and `symtable` alike. So the source's nesting is counted on its tokens first (`check_nesting`,
Python's own tokenizer, which does not recurse) and a source nesting deeper than MAX_NESTING is a
`TooDeep` SyntaxError before any of them sees it.

A reader may bound the source's size in tokens too (`parse(..., max_tokens=)`): Python's parser and the
static rules that walk the tree cost seconds for a megabyte of one-line statements, and a caller's
candidate is read in the server's own process. Counted on the same token pass, so a source over the
bound is refused (`TooLarge`) after max_tokens tokens, however long it is.
"""

from __future__ import annotations

import ast
import io
import threading
import tokenize
from dataclasses import dataclass

_LOCK = threading.Lock()

# Python's tokenizer already refuses brackets nested over 200 deep; the same bound for every kind of
# nesting keeps the AST shallow enough for the parser and for the visitors that recurse over it.
MAX_NESTING = 200

# Tokens that open no nesting of their own: separators, assignments and the statement's own punctuation.
_FLAT_OPS = {",", ";", ":", "=", "->", ":=", "+=", "-=", "*=", "/=", "//=", "%=", "@=", "&=", "|=", "^=", ">>=",
             "<<=", "**=", "...", "(", ")", "[", "]", "{", "}"}
_EXPRESSION_KEYWORDS = {"not", "and", "or", "if", "else", "lambda", "await", "in", "is", "yield", "for"}


class TooDeep(SyntaxError):  # noqa: N818 - a SyntaxError every caller already handles
    """The source nests deeper than MAX_NESTING: refused before Python's parser sees it."""


class TooLarge(SyntaxError):  # noqa: N818 - a SyntaxError every caller already handles
    """The source has more tokens than its reader takes: refused before Python's parser sees it."""


@dataclass
class _Tokens:
    """The tokens a source has shown so far (its f-strings' fields too), against the reader's bound."""

    limit: int | None
    seen: int = 0

    def take(self, filename: str, line: int) -> None:
        self.seen += 1
        if self.limit is not None and self.seen > self.limit:
            raise TooLarge(f"over {self.limit:,} tokens of code, more than a kernel file is read at; send the "
                           "kernel alone, without generated or unrelated code", (filename, line, 1, None))


def _too_deep(filename: str, line: int, what: str = "expressions") -> TooDeep:
    return TooDeep(f"{what} nested too deeply to parse (over {MAX_NESTING} levels: a chain of hundreds of "
                   "operators, or brackets inside brackets); split them into steps", (filename, line, 1, None))


def nesting(source: str, filename: str = "<unknown>", max_tokens: int | None = None) -> int:
    """An upper bound on how deep `source` nests, from its tokens alone (no recursion): each segment
    of an expression between commas counts its operators, keywords and brackets plus the deepest
    bracket inside it, and blocks add their indentation; f-strings are counted inside too. Raises
    TooDeep as soon as the count passes MAX_NESTING, TooLarge once the source has shown more than
    max_tokens tokens; a tokenizer error ends the count (the parser then gives the syntax error)."""
    return _nesting(source, filename, _Tokens(max_tokens))


def _nesting(source: str, filename: str, seen: _Tokens) -> int:
    # One frame per open bracket: [operators in the current segment, the deepest bracket closed in it,
    # the deepest of its earlier segments]. Operators after a bracket nest it too: `f(...) + 1 + 1`.
    frames: list[list[int]] = [[0, 0, 0]]
    indent = deepest = 0
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    try:
        for token in tokens:
            seen.take(filename, token.start[0])
            kind, text = token.type, token.string
            frame = frames[-1]
            if kind == tokenize.INDENT:
                indent += 1
            elif kind == tokenize.DEDENT:
                indent -= 1
            elif kind == tokenize.NEWLINE:
                frames = [[0, 0, 0]]
            elif kind == tokenize.OP and text in "([{":
                frame[0] += 1  # a call, subscript or display nests what it holds
                frames.append([0, 0, 0])
            elif kind == tokenize.OP and text in ")]}":
                if len(frames) > 1:
                    ops, child, best = frames.pop()
                    frames[-1][1] = max(frames[-1][1], best, ops + child)
            elif kind == tokenize.OP and text == ",":
                frame[:] = [0, 0, max(frame[2], frame[0] + frame[1])]
            elif kind == tokenize.OP and text == ";":
                frames = [[0, 0, 0]]
            elif (kind == tokenize.OP and text not in _FLAT_OPS) or (
                    kind == tokenize.NAME and text in _EXPRESSION_KEYWORDS):
                frame[0] += 1
            elif kind == tokenize.STRING and _is_fstring(text):
                frame[1] = max(frame[1], _fstring_nesting(text, filename, token.start[0], seen))
            here = indent + len(frames) + sum(f[0] for f in frames) + max(f[1] for f in frames)
            if here > MAX_NESTING:
                raise _too_deep(filename, token.start[0])
            deepest = max(deepest, here)
    except (tokenize.TokenError, IndentationError, SyntaxError) as exc:
        if isinstance(exc, (TooDeep, TooLarge)):
            raise
    return deepest


def _is_fstring(text: str) -> bool:
    prefix = text[:3].lower().split("'")[0].split('"')[0]
    return "f" in prefix


def _fstring_nesting(text: str, filename: str, line: int, seen: _Tokens) -> int:
    """The nesting of an f-string's body, counted as code (Python parses its fields as expressions; their
    tokens count against the source's bound as any other's)."""
    body = text.lstrip("rRbBuUfF")
    quote = 3 if body[:3] in ('"""', "'''") else 1
    try:
        return _nesting(body[quote:len(body) - quote].replace("{{", "").replace("}}", ""), filename, seen)
    except TooDeep:
        raise _too_deep(filename, line, "an f-string's fields") from None


def check_nesting(source: str, filename: str = "<unknown>", max_tokens: int | None = None) -> None:
    """Raise TooDeep where `source` nests deeper than Python's parser is safe to take (TooLarge where it
    has over max_tokens tokens)."""
    nesting(source, filename, max_tokens)


def parse(source: str, filename: str = "<unknown>", max_tokens: int | None = None) -> ast.Module:
    """The module's AST; a SyntaxError (as every caller handles) where it nests too deep to build, has
    over max_tokens tokens, or can't be parsed at all (null bytes, or a parser that gives up)."""
    check_nesting(source, filename, max_tokens)
    with _LOCK:
        try:
            return ast.parse(source, filename=filename)
        except (RecursionError, MemoryError):  # past the token count's bound all the same: never a crash
            raise _too_deep(filename, 1) from None
        except ValueError as exc:  # "source code string cannot contain null bytes"
            raise SyntaxError(str(exc).splitlines()[0] if str(exc) else "not Python source",
                              (filename, 1, 1, None)) from None


__all__ = ["MAX_NESTING", "TooDeep", "TooLarge", "check_nesting", "nesting", "parse"]
