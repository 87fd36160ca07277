"""Problems and candidates: load, validate, hash.

A problem is a KernelBench-format Python file: `class Model(nn.Module)`, `get_inputs()`,
`get_init_inputs()`, and optionally `get_baselines()`, `TOLERANCE`, `get_input_variants()`,
`INPUT_SCALES` (factors the floating inputs may be scaled by and stay valid: the verifier checks
those too, so an approximation exact only on the usual range fails), and `get_workloads()` (named
input makers, each judged and timed: problem_meta.workloads).
A problem is code. The user's own (`trusted`, the default) is imported here to check it; one from
outside (`trusted=False`: an MCP or LangChain caller's, a directory bench was pointed at) is only
parsed here and runs only in its trusted job, in the sandbox (problem_meta.py).

A candidate is untrusted source with `class ModelNew(nn.Module)`. It is only parsed here,
never imported: it runs in the sandbox.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelloop import source_ast
from kernelloop.config import defaults
from kernelloop.errors import ProblemError, error_line
from kernelloop.problem_meta import (
    OPTIONAL,
    check_module,
    check_source,
    checked_tolerance,
    source_workload_names,
    workloads,
)
from kernelloop.records import Code
from kernelloop.source_file import SourceFileError, read_source_bytes

_KB_NAME = re.compile(r"^(\d+)_(.+)\.py$")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def check_source_size(size: int, where: str, what: str) -> None:
    """A problem or candidate over MAX_SOURCE_BYTES is refused before it is read or parsed."""
    if size > defaults.MAX_SOURCE_BYTES:
        raise ProblemError(f"{where}: {size:,} bytes, over the {defaults.MAX_SOURCE_BYTES:,}-byte limit for a {what}")


def read_source(path: Path, what: str) -> str:
    """The text of a problem or candidate file; a missing, oversized or undecodable file, a
    directory, a symlink (never followed), a named pipe, a socket or a device is a one-line
    ProblemError naming the file, never a hang (source_file.py)."""
    try:
        data = read_source_bytes(Path(path), what)
    except SourceFileError as exc:
        raise ProblemError(str(exc)) from None
    try:
        return data.decode("utf-8")  # Python source is UTF-8; the locale's encoding is not the file's
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                           f"a {what} is a Python source file") from None


def import_source(path: Path, module_name: str, source: str | None = None,
                  names: Mapping[str, object] | None = None) -> ModuleType:
    """Import a Python file as a fresh module (from `source`, the text already read and checked,
    where given: the file is not read again), its namespace starting with `names` where given
    (tools/verify/shared_names.py); every failure becomes a one-line ProblemError."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(names or {})
    # Registered so torch.compile / FlexAttention can find the module's functions again.
    sys.modules[module_name] = module
    try:
        # Compiled from its source every time, never through a .pyc: a trusted worker keeps bytecode
        # (workers.py), and a cached one is matched by the file's mtime in seconds and its size alone,
        # so a problem edited within the same second at the same size would run as it was before.
        text = source if source is not None else read_source_bytes(Path(path), "Python")
        # compile's parser recurses per level of nesting: counted on the tokens first (source_ast.py)
        source_ast.check_nesting(text if isinstance(text, str) else text.decode("utf-8", "replace"), str(path))
        code = compile(text, str(path), "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the loader's exec_module without its bytecode cache
    except SyntaxError as exc:
        del sys.modules[module_name]
        raise ProblemError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except SourceFileError as exc:
        del sys.modules[module_name]
        raise ProblemError(str(exc)) from None
    except Exception as exc:  # a problem file may fail in any way while importing
        del sys.modules[module_name]
        raise ProblemError(f"{path}: import failed: {error_line(exc)}") from None
    return module


@dataclass(frozen=True)
class Problem:
    """A reference module to beat, as loaded from its file."""

    path: Path
    source: str
    name: str
    level: int | None = None
    number: int | None = None
    trusted: bool = True  # False: never imported in this process (problem_meta.py)

    @property
    def sha256(self) -> str:
        return sha256_text(self.source)

    @cached_property
    def module(self) -> ModuleType:
        if not self.trusted:  # the guard every in-process use of an outside problem meets
            raise ProblemError(f"{self.path}: a problem from outside is not run in this process "
                               "(only its trusted job, in the sandbox, runs it)")
        return import_source(self.path, f"kernelloop_problem_{self.sha256[:12]}", self.source)

    @property
    def tolerance(self) -> dict[str, Any]:
        return checked_tolerance(getattr(self.module, "TOLERANCE", None), str(self.path))

    @property
    def workload_names(self) -> list[str]:
        """The workloads a verification judges, get_inputs()'s first; [] for a problem without
        get_workloads (one workload, as KernelBench's). A problem from outside: read off its source."""
        if not self.trusted:
            return source_workload_names(self.source)
        if not hasattr(self.module, "get_workloads"):
            return []
        return [name for name, _ in workloads(self.module, str(self.path))]

    @property
    def extras(self) -> list[str]:
        return [name for name in OPTIONAL if hasattr(self.module, name)]

    @classmethod
    def from_file(cls, path: str | Path, trusted: bool = True) -> Problem:
        """The problem in `path`, checked: imported here when `trusted`, else only parsed."""
        path = Path(path)
        if path.is_file() and path.suffix != ".py":
            raise ProblemError(f"{path}: a problem is a .py file")
        source = read_source(path, "problem")
        try:
            source_ast.parse(source, filename=str(path))
        except SyntaxError as exc:
            raise ProblemError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
        level = number = None
        match = _KB_NAME.match(path.name)
        if match:
            number = int(match.group(1))
            level_match = re.fullmatch(r"level(\d+)", path.parent.name)
            level = int(level_match.group(1)) if level_match else None
        problem = cls(path=path.resolve(), source=source, name=path.stem, level=level, number=number, trusted=trusted)
        problem.validate()
        return problem

    @classmethod
    def from_source(cls, source: str, name: str = "problem", trusted: bool = True) -> Problem:
        """A problem from its text (KernelBench's habit: `eval_kernel_against_ref(ref_src, new_src)`), checked
        as from_file checks a file. Its path is `<source>/NAME.py`: a label in messages, never read."""
        if not _NAME.match(name):
            raise ProblemError(f"bad problem name {name!r}: letters, digits, '_', '-', '.' only")
        check_source_size(len(source.encode()), "problem source", "problem")
        path = Path("<source>") / f"{name}.py"
        try:
            source_ast.parse(source, filename=str(path))
        except SyntaxError as exc:
            raise ProblemError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
        problem = cls(path=path, source=source, name=name, trusted=trusted)
        problem.validate()
        return problem

    def validate(self) -> None:
        """Check the names and signatures the format needs: on the imported module when trusted,
        else on the parsed source (its trusted job checks the module, in the sandbox)."""
        if self.trusted:
            check_module(self.module, str(self.path))
        else:
            check_source(self.source, str(self.path))


@dataclass(frozen=True)
class Candidate:
    """Untrusted kernel source: parsed, never imported in this process."""

    source: str
    path: Path | None = None

    @property
    def sha256(self) -> str:
        return sha256_text(self.source)

    @classmethod
    def from_file(cls, path: str | Path) -> Candidate:
        path = Path(path)
        return cls(source=read_source(path, "candidate"), path=path.resolve())

    @classmethod
    def from_source(cls, source: str) -> Candidate:
        """A candidate from its text; over MAX_SOURCE_BYTES is a one-line ProblemError (its syntax is the verdict's)."""
        check_source_size(len(source.encode()), "candidate source", "candidate")
        return cls(source=source)

    def syntax_error(self) -> str | None:
        """One line saying why the source is not a candidate, or None when it parses and has ModelNew."""
        found = self.syntax_problem()
        return found[1] if found else None

    def syntax_problem(self) -> tuple[Code, str] | None:
        """(Code.syntax or Code.no_modelnew, one line), or None when it parses and has ModelNew."""
        try:
            tree = source_ast.parse(self.source, max_tokens=defaults.MAX_CANDIDATE_TOKENS)
        except SyntaxError as exc:
            kind = "too large" if isinstance(exc, source_ast.TooLarge) else "syntax error"
            return Code.syntax, f"line {exc.lineno}: {kind}: {exc.msg}"
        if not any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body):
            return Code.no_modelnew, "no top-level `class ModelNew(nn.Module)` in the candidate"
        return None


def parse_subset(spec: str | None) -> set[int] | None:
    """'1-10,23' -> {1..10, 23}; None or '' -> None (all)."""
    if not spec:
        return None
    chosen: set[int] = set()
    for part in spec.split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                chosen.update(range(lo, hi + 1))
            elif part:
                chosen.add(int(part))
        except ValueError:
            raise ProblemError(f"bad problem subset {spec!r}: use numbers and ranges like '1-10,23'") from None
    return chosen


def _not_a_file(path: Path) -> bool:
    """A directory entry that is no problem file to read at all: a symlink, a pipe, a socket, a
    device, a directory, or one over the size limit (lstat: a link is not followed)."""
    try:
        info = path.lstat()
    except OSError:
        return True
    return not stat.S_ISREG(info.st_mode) or info.st_size > defaults.MAX_SOURCE_BYTES


def load_dir(directory: str | Path, subset: str | None = None, skipped: list[str] | None = None,
             trusted: bool = True) -> list[Problem]:
    """Every problem file in a directory (sorted by KernelBench number, then name). With
    `skipped`, an entry that is no file to read (a symlink, a pipe, a device, one too large) is
    left out with its one line added there, so the others still run; without it, it is an error.
    `trusted`: as Problem.from_file (False: a directory someone else wrote, never imported here)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ProblemError(f"{directory}: no such directory")
    wanted = parse_subset(subset)
    problems = []
    for path in sorted(directory.glob("*.py")):
        if path.name.startswith("_"):
            continue
        try:
            problem = Problem.from_file(path, trusted)
        except ProblemError as exc:
            if skipped is None or not _not_a_file(path):
                raise
            skipped.append(str(exc))
            continue
        if wanted is None or problem.number in wanted:
            problems.append(problem)
    return sorted(problems, key=lambda p: (p.number if p.number is not None else sys.maxsize, p.name))


def load_kernelbench(root: str | Path, level: int, subset: str | None = None,
                     skipped: list[str] | None = None, trusted: bool = True) -> list[Problem]:
    """Problems of one level of a KernelBench checkout (`ROOT/KernelBench/levelL/N_Name.py`)."""
    root = Path(root)
    for candidate_dir in (root / "KernelBench" / f"level{level}", root / f"level{level}"):
        if candidate_dir.is_dir():
            return load_dir(candidate_dir, subset, skipped, trusted)
    raise ProblemError(f"{root}: no KernelBench/level{level} directory (pass the checkout's root)")
