"""The verifier's large-output path on a GPU: verify one candidate against one problem (a
KernelBench problem with a multi-GB output), print the verdict, its trial count and costs.

  python benchmarks/large_output_check.py PROBLEM CANDIDATE
"""

import json
import sys
import time
from pathlib import Path

from kernelloop.problem import Candidate, Problem
from kernelloop.tools.verify.verifier import Verifier

problem, candidate = Problem.from_file(Path(sys.argv[1])), Candidate.from_file(Path(sys.argv[2]))
started = time.perf_counter()
with Verifier(device="cuda", workspace=Path("/tmp/large-output")) as verifier:
    verdict = verifier.verify(candidate, problem)
    print(json.dumps({"problem": problem.path.stem, "status": verdict.status.value, "reason": verdict.reason[:200],
                      "trials": verdict.trials, "speedup": verdict.speedup, "speed_source": verdict.speed_source,
                      "output_bytes": verifier.server(problem).output_bytes,
                      "cost_s": {k: round(v, 2) for k, v in verdict.cost_s.items()},
                      "wall_s": round(time.perf_counter() - started, 1), "warnings": verdict.warnings}))
