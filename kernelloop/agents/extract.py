"""Pull the candidate source out of a model reply, and say why when there is none.

Replies from reasoning models are messy: prose around the code, several code blocks (a draft
and a final version, a kernel and a wrapper split apart, a ```bash block with pip commands),
CUDA in a ```cuda block with the Python wrapper elsewhere, `<think>` left in the content, or a
reply cut off by the token limit in the middle of the code. The rules, in order:

1. fenced blocks in the answer; the last Python block with `class ModelNew` that parses wins;
   top-level names it uses but does not define are taken from the other Python blocks, and
   CUDA/C++ source variables it leaves undefined are bound to the ```cuda / ```cpp blocks;
2. no fenced candidate: unfenced code from the first import line, prose trimmed off the end;
3. nothing in the answer: the same in the reasoning (noted, since drafts there are often stale).

Nothing here imports or runs the code: `ast.parse` only.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from dataclasses import dataclass

from pydantic import BaseModel, Field

from kernelloop import source_ast
from kernelloop.problem import Candidate

_FENCE_OPEN = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w.+#-]*)")
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.S)
_PYTHON_LANGS = {"python", "py", "python3", "py3", ""}
_CUDA_LANGS = {"cuda", "cu", "cpp", "c++", "cxx", "c", "cc"}
_BUILTINS = set(dir(builtins)) | {"__name__", "__file__"}


class Extraction(BaseModel):
    """The candidate found in one reply. `source` may be set with `error` (code that doesn't parse)."""

    source: str | None = Field(default=None, description="the candidate file, or None when no code was found")
    error: str | None = Field(default=None, description="one line: why there is no usable candidate")
    notes: list[str] = Field(default_factory=list, description="what was done to get the source")
    blocks: int = Field(default=0, description="fenced code blocks in the answer")
    cut_off: bool = Field(default=False, description="the reply ended inside the code (or before any)")

    @property
    def ok(self) -> bool:
        return self.source is not None and self.error is None


@dataclass
class _Block:
    lang: str
    text: str
    closed: bool


def fenced_blocks(text: str) -> list[_Block]:
    """Every fenced block; an unclosed last block (a cut-off reply) runs to the end."""
    blocks: list[_Block] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        opening = _FENCE_OPEN.match(lines[i])
        if not opening:
            i += 1
            continue
        fence = opening.group("fence")
        body: list[str] = []
        i += 1
        closed = False
        while i < len(lines):
            stripped = lines[i].strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                closed = True
                break
            body.append(lines[i])
            i += 1
        blocks.append(_Block(opening.group("lang").lower(), textwrap.dedent("\n".join(body)), closed))
        i += 1
    return blocks


def _is_python(block: _Block) -> bool:
    if block.lang in _PYTHON_LANGS:
        return block.lang != "" or bool(re.search(r"^\s*(import|from|class|def)\s", block.text, re.M))
    return False


def _parses(source: str) -> bool:
    try:
        source_ast.parse(source)
    except SyntaxError:
        return False
    return True


def _names(source: str) -> tuple[set[str], set[str], set[str]]:
    """(top-level definitions, names bound anywhere, names read anywhere) of a parsable source."""
    tree = source_ast.parse(source)
    top: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            top.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            top |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            top |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    bound: set[str] = set(top)
    read: set[str] = set()
    for item in ast.walk(tree):
        if isinstance(item, ast.Name):
            (read if isinstance(item.ctx, ast.Load) else bound).add(item.id)
        elif isinstance(item, ast.arg):
            bound.add(item.arg)
        elif isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(item.name)
        elif isinstance(item, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in item.names}
        elif isinstance(item, ast.ExceptHandler) and item.name:
            bound.add(item.name)
    return top, bound, read


def _complete(chosen: _Block, blocks: list[_Block], notes: list[str]) -> str:
    """Add what the chosen block uses but other blocks define (split kernel/wrapper, CUDA source)."""
    source = chosen.text
    if not _parses(source):
        return source
    _, bound, read = _names(source)
    missing = read - bound - _BUILTINS
    if not missing:
        return source
    helpers = []
    for block in blocks:
        if block is chosen or not _is_python(block) or not _parses(block.text):
            continue
        top, _, _ = _names(block.text)
        if top & missing and "class ModelNew" not in block.text:
            helpers.append(block.text)
            missing -= top
    if helpers:
        notes.append(f"joined {len(helpers)} other Python block(s) that define names the candidate uses")
    bindings = []
    native = [b for b in blocks if b.lang in _CUDA_LANGS and '"""' not in b.text]
    # CUDA-ish names first: a lone ```cpp block usually holds the kernel, not the declarations.
    for name in sorted(missing, key=lambda n: "cpp" in n.lower()):
        found = _native_block_for(name, native)
        if found is not None:
            bindings.append(f'{name} = r"""\n{found.text}\n"""')
            native.remove(found)
            notes.append(f"bound `{name}` to the ```{found.lang} block")
    if not helpers and not bindings:
        return source
    # Helpers run first, so they get the candidate's imports ahead of them.
    return "\n\n".join([_imports(source)] * bool(helpers) + helpers + bindings + [source])


def _imports(source: str) -> str:
    tree = source_ast.parse(source)
    return "\n".join(ast.get_source_segment(source, node) or "" for node in tree.body
                     if isinstance(node, (ast.Import, ast.ImportFrom)))


def _native_block_for(name: str, native: list[_Block]) -> _Block | None:
    """The ```cuda/```cpp block an undefined source variable most likely means, if any."""
    lowered = name.lower()
    preferred: tuple[str, ...]
    if "cpp" in lowered:
        preferred = ("cpp", "c++", "cxx", "cc", "c")
    elif any(word in lowered for word in ("cuda", "src", "source", "kernel")):
        preferred = ("cuda", "cu")
    else:
        return None
    return next((b for b in native if b.lang in preferred), native[0] if native else None)


def _unfenced(text: str) -> str | None:
    """Code written without fences: from the first import line, with trailing prose cut off."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if re.match(r"(import|from)\s+\w", line)), None)
    if start is None or "class ModelNew" not in "\n".join(lines[start:]):
        return None
    body = lines[start:]
    class_line = next(i for i, line in enumerate(body) if "class ModelNew" in line)
    for end in range(len(body), class_line, -1):
        candidate = "\n".join(body[:end]).rstrip()
        if _parses(candidate):
            return candidate
    return "\n".join(body).rstrip()


def _from_text(text: str, notes: list[str]) -> tuple[str | None, bool, int]:
    """(source, came from a cut-off block, fenced block count) for one piece of text."""
    blocks = fenced_blocks(text)
    candidates = [b for b in blocks if _is_python(b) and "class ModelNew" in b.text]
    if len(candidates) > 1:
        notes.append(f"{len(candidates)} blocks define ModelNew: took the last one that parses")
    for block in reversed(candidates):
        source = _complete(block, blocks, notes)
        if Candidate(source).syntax_error() is None:
            return source, not block.closed, len(blocks)
    if candidates:
        last = candidates[-1]
        return last.text, not last.closed, len(blocks)
    unfenced = _unfenced(text)
    if unfenced is not None:
        notes.append("the code had no fences: took it from the first import line")
    return unfenced, False, len(blocks)


def extract_candidate(content: str, reasoning: str = "", finish_reason: str | None = None) -> Extraction:
    """The candidate in a reply (answer first, reasoning as a fallback), checked to parse."""
    notes: list[str] = []
    answer = _THINK.sub("", content.replace("\r\n", "\n"))
    if answer != content.replace("\r\n", "\n"):
        notes.append("removed <think> text from the answer")
    cut_off = finish_reason == "length"
    source, in_open_block, blocks = _from_text(answer, notes)
    if source is None and reasoning:
        source, in_open_block, _ = _from_text(reasoning.replace("\r\n", "\n"), notes)
        if source is not None:
            notes.append("the answer had no code: took the candidate from the reasoning")
    if source is None:
        why = "no code block with `class ModelNew` in the reply"
        if cut_off:
            why += " (the reply was cut off by the token limit before any code: raise max_tokens)"
        return Extraction(error=why, notes=notes, blocks=blocks, cut_off=cut_off)
    problem = Candidate(source).syntax_error()
    truncated = in_open_block or (cut_off and not blocks)
    if truncated:
        # Cut-off code can still parse (a forward that ends early returns None): never use it.
        problem = f"the reply was cut off inside the code ({problem or 'the code parses but is incomplete'})"
    return Extraction(source=source, error=problem, notes=notes, blocks=blocks, cut_off=truncated)
