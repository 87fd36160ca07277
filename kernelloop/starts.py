"""Warm starts: the kernel a run begins from (`solve --start`), verified as attempt 0.

A start is a kernel file, a kernel's text (a Candidate), or 'auto': the problem family's
hand-written starter. The family with starters is the attention suite: a problem named like one
in kernelloop/evals/problems/attention/ starts from examples/attention_candidates/<name>.py
(written by benchmarks/attention_starter_kernel.py; present in a source checkout). For any other
problem 'auto' starts from scratch, and the record says so in one line.

The record goes into the run's state beside the problem, so resume, replay and fork never read
the file again. Light on purpose (no torch): the CLI resolves a start before anything heavy loads.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from kernelloop.config import defaults
from kernelloop.problem import Candidate, ProblemError, read_source, sha256_text

ATTENTION_PROBLEMS = Path(__file__).resolve().parent / "evals" / "problems" / "attention"
ATTENTION_STARTERS = Path(__file__).resolve().parents[1] / "examples" / "attention_candidates"
START_ID = "r0c0"  # attempt 0: round 0 is only ever the start kernel (the coders' rounds begin at 1)


class StartRecord(BaseModel):
    """The kernel attempt 0 is, as the state keeps it."""

    choice: str = Field(description="what was asked: a file, 'auto', or 'source' (a kernel's text)")
    path: str | None = Field(default=None, description="the file the kernel was read from")
    source: str = Field(default="", description="the kernel; '' when 'auto' found no starter (from scratch)")
    sha256: str = ""
    line: str = Field(description="where the run began, as `runs show` and the report say it")

    @property
    def has_kernel(self) -> bool:
        return bool(self.source)


def starter_for(problem_name: str) -> Path | None:
    """The family's hand-written starter for a problem (matched by its file name), or None."""
    if not (ATTENTION_PROBLEMS / f"{problem_name}.py").is_file():
        return None
    starter = ATTENTION_STARTERS / f"{problem_name}.py"
    return starter if starter.is_file() else None


def _no_starter(problem_name: str) -> str:
    if (ATTENTION_PROBLEMS / f"{problem_name}.py").is_file():
        why = f"{ATTENTION_STARTERS} is not beside this installation (a source checkout has it)"
    else:
        why = "only the attention problems (kernelloop/evals/problems/attention/) have one"
    return f"start {defaults.START_AUTO}: no starter kernel for {problem_name}: {why}; starting from scratch"


def _from_file(path: Path, choice: str, line: str) -> StartRecord:
    source = read_source(path, "kernel")  # missing, a directory, oversized or not UTF-8: a one-line ProblemError
    # A start goes into the model's prompts: only a kernel may (never a settings file's secrets, say).
    problem = Candidate.from_source(source).syntax_error()
    if problem is not None:
        raise ProblemError(f"start {path}: not a kernel to start from ({problem})")
    return StartRecord(choice=choice, path=str(path.resolve()), source=source, sha256=sha256_text(source), line=line)


def resolve_start(start: StartRecord | Candidate | str | Path | None, problem_name: str) -> StartRecord | None:
    """The start as the state keeps it (None: from scratch). The string 'auto' asks for the family's
    starter; any other string or Path is a kernel file. A file that can't be read is a ProblemError."""
    if start is None or isinstance(start, StartRecord):
        return start
    if isinstance(start, Candidate):
        where = str(start.path) if start.path else None
        return StartRecord(choice=where or "source", path=where, source=start.source, sha256=start.sha256,
                           line=where or "a kernel given as text")
    if isinstance(start, str) and start == defaults.START_AUTO:
        starter = starter_for(problem_name)
        if starter is None:
            return StartRecord(choice=defaults.START_AUTO, line=_no_starter(problem_name))
        return _from_file(starter, defaults.START_AUTO, f"{starter} (auto: the family's hand-written starter)")
    path = Path(start).expanduser()
    return _from_file(path, str(start), str(path))


def backend_of(source: str) -> str:
    """The backend a start kernel is written in: CUDA through load_inline, else Triton."""
    return "cuda" if "load_inline" in source else "triton"
