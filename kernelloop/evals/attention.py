"""The attention suite: the reference work's six variants, long-sequence cases, a learned relative
bias and 2D neighborhood attention, scored against FlexAttention (and SDPA where it applies).

The problems live in evals/problems/attention/, one file per variant; each times FlexAttention
(compiled as its users compile it) as the baseline named `flex_attention`, so a variant's score is
the best correct attempt's speedup over it. Where SDPA computes the variant (full, causal), its
flash and cuDNN backends are timed too (`sdpa_flash`, `sdpa_cudnn`); `best_baseline` names the
fastest baseline a problem has, the "best available" a speedup is also reported against.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from kernelloop.evals.problems.attention._common import FLEX_BASELINE, SDPA_BACKENDS
from kernelloop.evals.records import BenchSummary
from kernelloop.problem import Problem, load_dir

ATTENTION_DIR = Path(__file__).parent / "problems" / "attention"
SDPA_BASELINES = tuple(SDPA_BACKENDS)
__all__ = ["ATTENTION_DIR", "FLEX_BASELINE", "SDPA_BASELINES", "attention_problems", "best_baseline",
           "speedup_over_best", "speedups_over_flex", "variant_label"]


def attention_problems(subset: str | None = None) -> list[Problem]:
    """The attention problems, optionally a subset by number ('1-6')."""
    return load_dir(ATTENTION_DIR, subset)


def variant_label(problem_name: str) -> str:
    """'3_relative_positional' -> 'relative positional' (a plot label)."""
    return re.sub(r"^\d+_", "", problem_name).replace("_", " ")


def speedups_over_flex(summary: BenchSummary) -> dict[str, float | None]:
    """Variant label -> best correct speedup over FlexAttention (None: not solved or not timed)."""
    return {variant_label(row.problem): row.speedups.get(FLEX_BASELINE) for row in summary.per_problem}


def best_baseline(baseline_ms: Mapping[str, float | None]) -> str | None:
    """The fastest baseline by median ms (eager, compile, flex_attention, sdpa_*): the best
    available implementation a kernel is measured against; None when none was timed."""
    timed = {name: ms for name, ms in baseline_ms.items() if ms is not None and ms > 0}
    return min(timed, key=timed.__getitem__) if timed else None


def speedup_over_best(speedups: Mapping[str, float],
                      baseline_ms: Mapping[str, float | None]) -> tuple[str | None, float | None]:
    """(the best baseline's name, the speedup over it): the speedup the verifier measured against
    that baseline in the same rounds, not a ratio of medians from different runs."""
    best = best_baseline({name: ms for name, ms in baseline_ms.items() if name in speedups})
    return best, (speedups[best] if best is not None else None)
