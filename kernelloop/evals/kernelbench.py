"""KernelBench: its problems (a checkout given by path) and its candidate file names.

KernelBench-based systems write one file per sample, `level_L_problem_N_sample_S_kernel.py`;
`kernelloop bench kernelbench --root CHECKOUT --level L --candidates DIR` scores such a
directory with KernelBench's own metrics (metrics.py), against eager and torch.compile. Where
KernelBench's own eval left its eval_results.json there, each sample's verdict is kept beside
ours (claims.py compares them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from kernelloop.evals.records import Claim
from kernelloop.problem import Problem, ProblemError, load_kernelbench
from kernelloop.records import Status

EVAL_RESULTS = "eval_results.json"  # KernelBench's scripts/eval_from_generations.py writes it beside the samples

_CANDIDATE_NAME = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


@dataclass(frozen=True)
class KernelBenchName:
    """What a KernelBench candidate file name says: level, problem number, sample index."""

    level: int
    problem: int
    sample: int

    @property
    def filename(self) -> str:
        return f"level_{self.level}_problem_{self.problem}_sample_{self.sample}_kernel.py"


def parse_candidate_name(filename: str) -> KernelBenchName | None:
    """'level_1_problem_19_sample_0_kernel.py' -> KernelBenchName(1, 19, 0); other names -> None."""
    match = _CANDIDATE_NAME.match(filename)
    if match is None:
        return None
    level, problem, sample = (int(g) for g in match.groups())
    return KernelBenchName(level, problem, sample)


def kernelbench_problems(root: str | Path, level: int, subset: str | None = None,
                         skipped: list[str] | None = None, trusted: bool = True) -> list[Problem]:
    """Problems of one level of a checkout, optionally a subset by number ('1-10,23'); entries
    that are no file to read go to `skipped`, one line each (problem.load_dir)."""
    return load_kernelbench(root, level, subset, skipped, trusted)


def _claimed(name: str, result: dict) -> Claim:
    """KernelBench's KernelExecResult as a claim: it tells compiled and correct, and a runtime (no baseline)."""
    if result.get("correctness"):
        status = Status.correct
    elif result.get("compiled") is False:
        status = Status.compile_error
    else:
        status = Status.incorrect  # compiled, not correct: a wrong answer or a crash, it does not say which
    return Claim(id=name, status=status)


def read_eval_results(directory: Path) -> dict[tuple[int, int], Claim]:
    """(problem, sample) -> KernelBench's verdict, from DIR/eval_results.json: {problem: [{sample_id, compiled,
    correctness, ...}, ...]} (a list, as KernelBench writes now) or {problem: {sample: {...}}}. None there: {}."""
    path = directory / EVAL_RESULTS
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProblemError(f"{path}: not KernelBench's eval results: {exc}") from None
    if not isinstance(data, dict):
        raise ProblemError(f"{path}: not KernelBench's eval results (an object by problem id)")
    claims = {}
    for problem, samples in data.items():
        if isinstance(samples, dict):
            samples = [dict(result, sample_id=int(sample)) for sample, result in samples.items()
                       if isinstance(result, dict) and str(sample).isdigit()]
        if not str(problem).isdigit() or not isinstance(samples, list):
            raise ProblemError(f"{path}: entry {problem!r} is not a problem id with its samples")
        for result in samples:
            if isinstance(result, dict) and isinstance(result.get("sample_id"), int):
                name = f"problem {problem} sample {result['sample_id']}"
                claims[(int(problem), result["sample_id"])] = _claimed(name, result)
    return claims
