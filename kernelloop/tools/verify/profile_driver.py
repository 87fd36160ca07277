"""The program ncu profiles: load a candidate, run its forward a few times on the GPU, exit.

    python -m kernelloop.tools.verify.profile_driver CANDIDATE PROBLEM [--iters N]

ncu must start the process it profiles, so this runs outside the verifier's zygote; it still
refuses a candidate that breaks a static rule, and ncu_run.py starts it with the sandbox's
scrubbed environment in a scratch directory. It runs a candidate, so it lives with the verifier
(tools/profile names it only as a program to start: profile imports nothing of verify).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from kernelloop.problem import Candidate, Problem, import_source
from kernelloop.tools.verify.harness import INIT_SEED, seed_all
from kernelloop.tools.verify.static_check import first_violation


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("candidate", type=Path)
    parser.add_argument("problem", type=Path)
    parser.add_argument("--iters", type=int, default=2)
    args = parser.parse_args()
    violation = first_violation(Candidate.from_file(args.candidate).source)
    if violation:
        print(f"refused: {violation}", file=sys.stderr)
        return 3
    problem = Problem.from_file(args.problem).module
    candidate = import_source(args.candidate.resolve(), "kernelloop_candidate")
    seed_all(INIT_SEED)
    model = candidate.ModelNew(*problem.get_init_inputs()).cuda()
    seed_all(1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    with torch.no_grad():
        for _ in range(args.iters):
            model(*inputs)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
