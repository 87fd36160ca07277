"""Test doubles for the graph: a scripted reasoning model and a scripted verifier. Tests only.

The model answers like DeepSeek-R1 does: reasoning apart from the answer (with a stale draft
in it), prose around the code, a draft block before the final one. Round 1's kernel has a
bug (tl.minimum instead of tl.maximum); from round 2 on the kernel is fixed. The same kernels
are honest Triton, so the real verifier on CPU judges them the same way as ScriptedVerifier.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kernelloop.agents.turns import Message, ModelTurn, RecordedTurn
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status, TimingStats, Verdict

ROOT = Path(__file__).resolve().parents[2]
RELU_PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "relu.py"

KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, {op}(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n_elements = x.numel()
        relu_kernel[(triton.cdiv(n_elements, 1024),)](x, out, n_elements, BLOCK=1024)
        return out'''
WRONG_KERNEL = KERNEL.format(op="tl.minimum")
FIXED_KERNEL = KERNEL.format(op="tl.maximum")

PLAN_REPLY = """## Strategy
One elementwise kernel: read x once, write relu(x) once.
## Backend
triton
## Tiling
BLOCK=1024 elements per program, mask the tail (37x129 is irregular).
## Expected speedup
1.3x over eager: memory-bound, one pass instead of eager's one pass plus launch overhead.
## Risks
The mask on the last block."""


def coder_reply(kernel: str) -> str:
    """An R1-style answer: prose, a draft block, the final block, more prose."""
    return ("Let me write it as planned.\n\nA first sketch of the idea:\n\n```python\n"
            "def relu(x):\n    return x.clamp(min=0)\n```\n\nThe full file:\n\n```python\n"
            f"{kernel}\n```\n\nThis masks the last block, so 37x129 works.")


def default_script(key: str, prompt: str) -> ModelTurn:
    """planner/plan -> a plan; coder/r1cK -> the buggy kernel; coder/rNcK (N >= 2) -> the fixed one."""
    if key == "planner/plan":
        return ModelTurn(content=PLAN_REPLY, reasoning="The reference is a ReLU...", model="scripted-r1",
                         finish_reason="stop")
    match = re.fullmatch(r"coder/r(\d+)c(\d+)", key)
    if match:
        kernel = WRONG_KERNEL if match.group(1) == "1" else FIXED_KERNEL
        return ModelTurn(content=coder_reply(kernel), model="scripted-r1", finish_reason="stop",
                         reasoning="Okay, a draft:\n```python\nclass ModelNew: pass\n```\nNo, do it properly.")
    if key.startswith("critic/"):
        return ModelTurn(content="1. Use tl.maximum, not tl.minimum.", model="scripted-r1", finish_reason="stop")
    raise AssertionError(f"the script has no reply for {key}")


class ScriptedChatClient:
    """A keyed model that plays a script and records every prompt it was sent (thread-safe)."""

    def __init__(self, script: Callable[[str, str], ModelTurn] = default_script, model_name: str = "scripted-r1",
                 delays_s: dict[str, float] | None = None, call_log: Path | None = None):
        self.script, self.model_name = script, model_name
        self.delays_s = delays_s or {}
        self.call_log = call_log
        self.prompts: dict[str, str] = {}
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def complete_keyed(self, key: str, messages: list[Message]) -> ModelTurn:
        with self._lock:
            self.prompts[key] = messages[-1].content
            self.calls.append(key)
            if self.call_log is not None:
                with self.call_log.open("a") as log:
                    log.write(key + "\n")
        time.sleep(self.delays_s.get(key, 0.0))
        return self.script(key, messages[-1].content)

    def complete(self, messages: list[Message]) -> ModelTurn:
        raise AssertionError("agents must call the model with a key (turns.ask)")


class ScriptedVerifier:
    """Judges by the kernel's op: tl.maximum is correct (with a speedup), anything else a mismatch."""

    def __init__(self, speedup: float = 1.5, log: Path | None = None):
        self.speedup, self.log = speedup, log
        self.calls: list[str] = []

    def verify(self, candidate: Candidate, problem: Problem, time_left_s=None) -> Verdict:
        name = candidate.path.stem if candidate.path else candidate.sha256[:12]
        self.calls.append(name)
        if self.log is not None:
            with self.log.open("a") as log:
                log.write(f"{name} {candidate.sha256}\n")
        if "tl.maximum(x, 0.0)" in candidate.source:
            timing = TimingStats(name="candidate", median_ms=0.010, iqr_ms=0.001, min_ms=0.009, mean_ms=0.010,
                                 samples=50)
            return Verdict(status=Status.correct, reason="correct", code=Code.correct, device="cuda", trials=3,
                           speedup=self.speedup,
                           speedups={"eager": self.speedup}, timings={"candidate": timing})
        return Verdict(status=Status.incorrect, reason="mismatch: max_abs_err 2.1 rel_err 1.0", code=Code.mismatch,
                       device="cuda",
                       max_abs_err=2.1, rel_err=1.0, trials=1,
                       feedback="output mismatch on trial 1: negative inputs came out unchanged")


def recording(keys_rounds: int = 2, candidates: int = 2) -> list[RecordedTurn]:
    """The default script as a recording: planner plus `keys_rounds` rounds of coders."""
    keys = ["planner/plan"] + [f"coder/r{r}c{c}" for r in range(1, keys_rounds + 1) for c in range(candidates)]
    return [RecordedTurn(key=key, turn=default_script(key, "")) for key in keys]
