"""KernelBench: its problems (a checkout given by path) and its candidate file names.

KernelBench-based systems write one file per sample, `level_L_problem_N_sample_S_kernel.py`;
`kernelloop bench kernelbench --root CHECKOUT --level L --candidates DIR` scores such a
directory with KernelBench's own metrics (metrics.py), against eager and torch.compile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kernelloop.problem import Problem, load_kernelbench

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
