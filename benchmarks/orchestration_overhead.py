"""Orchestration overhead per round: everything in a round except model and verifier time.

The model answers at once (a fixed R1-style reply with prose and two code blocks) and the
verifier returns a fixed `incorrect` verdict at once, so no run meets its target and each one
ends by `rounds_exhausted`. What remains is ours: prompt rendering, reply extraction, state
validation, routing, Send fan-out and fan-in, run-dir writes (turns, kernels, verdict journal),
and SQLite checkpoints with durability="sync" (every superstep on disk before the next).

Per-round overhead = (time of a run of R rounds - time of a 1-round run) / (R - 1): the
planner, opening the DB and loading the problem cancel out. Median over repeats.

    python benchmarks/orchestration_overhead.py [--rounds 11] [--candidates 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from kernelloop.agents.turns import Message, ModelTurn
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status, Verdict
from kernelloop.serve.runs import solve

PROBLEM = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "problems" / "relu.py"
KERNEL = ("import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n@triton.jit\n"
          "def k(x_ptr, o_ptr, n, BLOCK: tl.constexpr):\n    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
          "    tl.store(o_ptr + i, tl.maximum(tl.load(x_ptr + i, mask=i < n), 0.0), mask=i < n)\n\n"
          "class ModelNew(nn.Module):\n    def forward(self, x):\n        o = torch.empty_like(x)\n"
          "        k[(triton.cdiv(x.numel(), 1024),)](x, o, x.numel(), BLOCK=1024)\n        return o\n")
REPLY = f"Sketch:\n```python\ndef f(x): return x\n```\nFinal:\n```python\n{KERNEL}```\nDone."


class InstantModel:
    model_name = "instant"

    def complete_keyed(self, key: str, messages: list[Message]) -> ModelTurn:
        return ModelTurn(content="## Strategy\none pass" if key.startswith("planner") else REPLY,
                         reasoning="r" * 20_000, finish_reason="stop")  # reasoning of R1-like size


class InstantVerifier:
    def verify(self, candidate: Candidate, problem: Problem) -> Verdict:
        return Verdict(status=Status.incorrect, reason="mismatch: max_abs_err 1.0 rel_err 1.0", rel_err=1.0,
                       max_abs_err=1.0, feedback="output mismatch on trial 1")


def run_s(rounds: int, candidates: int, problem: Problem) -> float:
    with tempfile.TemporaryDirectory() as workspace:
        started = time.perf_counter()
        result = solve(problem, chat_client=InstantModel(), verifier=InstantVerifier(), workspace=workspace,
                       candidates=candidates, max_rounds=rounds, analyze=lambda p: None)
        elapsed = time.perf_counter() - started
    assert result.rounds == rounds and result.stop_reason == "rounds_exhausted", result
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    problem = Problem.from_file(PROBLEM)
    run_s(2, args.candidates, problem)  # warm-up: imports, first SQLite file
    per_round_ms, setup_ms = [], []
    for _ in range(args.repeats):
        one, many = run_s(1, args.candidates, problem), run_s(args.rounds, args.candidates, problem)
        per_round_ms.append(1000 * (many - one) / (args.rounds - 1))
        setup_ms.append(1000 * one)
    print(f"orchestration overhead per round ({args.candidates} candidates, SQLite, durability=sync): "
          f"median {statistics.median(per_round_ms):.1f} ms (runs: {', '.join(f'{v:.1f}' for v in per_round_ms)})")
    print(f"a whole 1-round run without model or verifier time: median {statistics.median(setup_ms):.0f} ms")


if __name__ == "__main__":
    main()
