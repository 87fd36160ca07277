"""Solutions listed in one file, each pairing a problem with a kernel's source: another system's generations.

Two shapes are read (a JSON list, or JSONL with one object a line):
- the KernelBench leaderboard's docs/assets/raw_data.json (github.com/anneouyang/KernelBenchLeaderboard):
  `file` (its id), `level`, `problem_id` (0-based), `code`, `display_name` (the model), and the
  speedups it measured, `torch_speedup` and `torch_compile_speedup`. It lists only the solutions
  it judged correct, so each carries that verdict;
- a plain list: `id`, `level`, `problem` (1-based), `code`, and optionally `model`, `status`
  (a verdict: correct, incorrect, ...), `speedup` (over eager) and `compile_speedup`.
The problems are found in a directory (`--problems-dir`): the leaderboard's l{L}_p{N}.py, or a
KernelBench checkout's [KernelBench/]level{L}/{N}_Name.py. Bench writes each solution's code to
a file of its own (`write_candidates`), so it is judged, hashed and resumed like any candidate file.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kernelloop import bounded_json
from kernelloop.evals.records import COMPILE, EAGER, Claim
from kernelloop.problem import Problem, ProblemError, parse_subset
from kernelloop.records import Status

RAW_DATA = "docs/assets/raw_data.json"  # the leaderboard repository's files
DATA = "docs/assets/data.json"
PROBLEMS = "docs/assets/problems"


class Leaderboard:
    """Files of the leaderboard repository, from a bare git dir (at HEAD) or a checkout."""

    def __init__(self, source: Path):
        self.source = source
        self.bare = (source / "HEAD").is_file() and (source / "objects").is_dir()

    def read(self, path: str) -> str:
        if self.bare:
            return subprocess.run(["git", "--git-dir", str(self.source), "show", f"HEAD:{path}"],
                                  check=True, capture_output=True, text=True).stdout
        return (self.source / path).read_text()

    def commit(self) -> str:
        """The source's commit, or "unknown" (a checkout with no history of its own: an archive unpacked
        inside another repository must not report that repository's commit)."""
        git = ["git", "--git-dir", str(self.source)] if self.bare else ["git", "-C", str(self.source)]
        if not self.bare:
            top = subprocess.run([*git, "rev-parse", "--show-toplevel"], capture_output=True, text=True)
            if top.returncode != 0 or Path(top.stdout.strip()).resolve() != Path(self.source).resolve():
                return "unknown"
        found = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        return found.stdout.strip() if found.returncode == 0 else "unknown"


def leaderboard_problem_file(level: int, number: int) -> str:
    """The leaderboard's name of a problem's file: number is 1-based (its raw data's problem_id + 1)."""
    return f"l{level}_p{number}.py"


class _BoardEntry(BaseModel):
    file: str
    level: int
    problem_id: int
    code: str
    display_name: str | None = None
    model: str | None = None
    torch_speedup: float | None = None
    torch_compile_speedup: float | None = None


class _PlainEntry(BaseModel):
    id: str
    level: int
    problem: int
    code: str
    model: str | None = None
    status: Status | None = None
    speedup: float | None = None
    compile_speedup: float | None = None


@dataclass(frozen=True)
class ListedSolution:
    level: int
    number: int  # 1-based, as KernelBench's file names
    code: str
    claim: Claim

    @property
    def filename(self) -> str:
        """The candidate file bench writes: the id made safe for a file name."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.claim.id)[:100] + ".py"


def _speedups(eager: float | None, compile_: float | None) -> dict[str, float]:
    # The leaderboard writes 0 or a negative number where it measured nothing: no speedup, not a slow one.
    return {name: value for name, value in ((EAGER, eager), (COMPILE, compile_)) if value is not None and value > 0}


def _solution(raw: object, where: str) -> ListedSolution:
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: an entry is an object with level, a problem and code")
    try:
        if "problem_id" in raw and "file" in raw:
            board = _BoardEntry.model_validate(raw)
            claim = Claim(id=board.file, model=board.display_name or board.model, status=Status.correct,
                          speedups=_speedups(board.torch_speedup, board.torch_compile_speedup))
            return ListedSolution(board.level, board.problem_id + 1, board.code, claim)
        plain = _PlainEntry.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ProblemError(f"{where}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None
    claim = Claim(id=plain.id, model=plain.model, status=plain.status,
                  speedups=_speedups(plain.speedup, plain.compile_speedup))
    return ListedSolution(plain.level, plain.problem, plain.code, claim)


def read_list(path: Path, level: int | None = None, subset: str | None = None) -> list[ListedSolution]:
    """The solutions of a list file, optionally of one level and some problem numbers; ids must be unique."""
    try:
        data = bounded_json.read_bytes(path)
        text = data.decode("utf-8")
        entries = bounded_json.loads(text, str(path), len(data)) if text.lstrip().startswith("[") else [
            bounded_json.loads(line, f"{path} line {number}", len(line.encode()))
            for number, line in enumerate(text.splitlines(), 1) if line.strip()]
    except UnicodeDecodeError:
        raise ProblemError(f"{path}: can't read the list: not UTF-8") from None
    except bounded_json.JsonBoundError as exc:  # too big, too deep, not JSON or JSONL: one line
        raise ProblemError(f"can't read the list: {exc}") from None
    solutions = [_solution(entry, f"{path} entry {index}") for index, entry in enumerate(entries)]
    names = [s.filename for s in solutions]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ProblemError(f"{path}: solution ids repeat (as file names): {', '.join(repeated[:5])}")
    wanted = parse_subset(subset)
    return [s for s in solutions if (level is None or s.level == level) and (wanted is None or s.number in wanted)]


def find_problem_file(directory: Path, level: int, number: int) -> Path | None:
    """The leaderboard's l{L}_p{N}.py, else a KernelBench checkout's [KernelBench/]level{L}/{N}_*.py."""
    flat = directory / leaderboard_problem_file(level, number)
    if flat.is_file():
        return flat
    for folder in (directory / f"level{level}", directory / "KernelBench" / f"level{level}"):
        found = sorted(folder.glob(f"{number}_*.py")) if folder.is_dir() else []
        if found:
            return found[0]
    return None


def listed_problems(solutions: Sequence[ListedSolution], directory: Path,
                    skipped: list[str]) -> dict[tuple[int, int], Problem]:
    """Each (level, number) the solutions name -> its problem, from outside: parsed, never imported here.
    A problem with no file, or one that is no problem, goes to `skipped` (one line); its solutions are left out."""
    if not directory.is_dir():
        raise ProblemError(f"{directory}: no such problems directory")
    found: dict[tuple[int, int], Problem] = {}
    for key in sorted({(s.level, s.number) for s in solutions}):
        level, number = key
        path = find_problem_file(directory, level, number)
        if path is None:
            left = sum((s.level, s.number) == key for s in solutions)
            skipped.append(f"level {level} problem {number}: no problem file in {directory} ({left} solution(s) left out)")
            continue
        try:
            problem = Problem.from_file(path, trusted=False)
        except ProblemError as exc:
            skipped.append(str(exc))
            continue
        # Named by level too: the leaderboard's l1_p1 already is; KernelBench's 1_X of two levels would meet.
        name = path.stem if re.fullmatch(r"l\d+_p\d+", path.stem) else f"l{level}_{path.stem}"
        found[key] = dataclasses.replace(problem, name=name, level=level, number=number)
    return found


def write_candidates(solutions: Sequence[ListedSolution], directory: Path) -> dict[str, Path]:
    """Each solution's code in DIR/<id>.py (written only when it differs, so a rerun finds the same file)."""
    paths = {}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for solution in solutions:
            path = directory / solution.filename
            if not path.is_file() or path.read_text() != solution.code:
                path.write_text(solution.code)
            paths[solution.claim.id] = path
    except (OSError, UnicodeDecodeError) as exc:  # a full, read-only or odd --out: one line
        raise ProblemError(f"can't write the listed solutions under {directory}: {exc}") from None
    return paths
