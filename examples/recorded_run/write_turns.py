"""Writes turns.jsonl: the model turns of this example, WRITTEN BY HAND (no model was called).

They are in the exact format kernelloop records (`kernelloop runs export`), keyed by node and
attempt, so `kernelloop solve ... --recorded turns.jsonl` re-serves them instead of calling an
endpoint. Round 1's kernel picks the bias by row instead of column (a real, common bug); the
critique sends round 2 the verifier's mismatch, and round 2 fixes it.

The recording is bound to what it answers: its first line names the problem's hash (a recording of another
problem is refused), and round 1's coder turns name the hash of the prompt they answer (a fork that changes
that prompt, with a hint say, is told in one line that the recording can't answer it). The plan's prompt
depends on the machine (the reference's measured facts) and round 2's on round 1's verdict (fresh random
inputs every verification), so those turns carry no hash: they answer whatever prompt their key is sent.
The hashes are made by the project's own code: the turns replayed through `solve` with a stand-in verifier
(round 1's prompts come before any verdict).

    python examples/recorded_run/write_turns.py
"""

import tempfile
from pathlib import Path

from kernelloop.agents.turns import KeyedReplayChatClient, Message, ModelTurn, RecordedTurn, messages_sha256
from kernelloop.graph.rundir import RecordingHeader, write_recording
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status, Verdict

PROBLEM = Path(__file__).with_name("scale_bias_relu.py")

MODEL = "hand-written example (not a model)"

KERNEL = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_bias_relu_kernel(x_ptr, bias_ptr, out_ptr, n_elements, n_cols, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    bias = tl.load(bias_ptr + {index}, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x * scale + bias, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, cols: int, scale: float):
        super().__init__()
        self.scale = scale
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements, n_cols = x.numel(), x.shape[-1]
        grid = (triton.cdiv(n_elements, 1024),)
        scale_bias_relu_kernel[grid](x, self.bias, out, n_elements, n_cols, self.scale, BLOCK=1024)
        return out'''

PLAN = """## Strategy
Fuse scale, bias add and ReLU into one elementwise pass: read x once, write y once.
## Backend
triton
## Tiling
1024 elements per program over the flattened tensor; mask the tail; each element's bias is bias[offset % cols].
## Expected speedup
2x over eager: memory-bound, one pass instead of three.
## Risks
Indexing the bias by column, not by row."""


def coder_reply(index: str, note: str) -> ModelTurn:
    content = (f"{note}\n\n```python\n{KERNEL.format(index=index)}\n```\n\n"
               "One pass over memory; the tail block is masked.")
    return ModelTurn(content=content, reasoning="(hand-written example: no reasoning was recorded)",
                     model=MODEL, finish_reason="stop")


def turns(prompt_hashes: dict[str, str] | None = None) -> list[RecordedTurn]:
    """The hand-written turns; prompt_hashes: key -> the hash of the prompt it answers (round 1's coders)."""
    hashes = prompt_hashes or {}
    wrong = coder_reply("(offsets // n_cols)", "The bias follows the row:")
    fixed = coder_reply("(offsets % n_cols)", "The verifier showed a mismatch: the bias is per column, so index it "
                                              "with offsets % n_cols.")
    plan = ModelTurn(content=PLAN, reasoning="(hand-written example)", model=MODEL, finish_reason="stop")
    return ([RecordedTurn(key="planner/plan", turn=plan)]
            + [RecordedTurn(key=f"coder/r1c{i}", prompt_sha256=hashes.get(f"coder/r1c{i}", ""), turn=wrong)
               for i in range(2)]
            + [RecordedTurn(key=f"coder/r2c{i}", turn=fixed) for i in range(2)])


class _Hashing(KeyedReplayChatClient):
    """Serves the turns and notes the hash of every prompt it is sent."""

    def __init__(self, recorded: list[RecordedTurn]):
        super().__init__(recorded, model_name=MODEL)
        self.sent: dict[str, str] = {}

    def complete_keyed(self, key: str, messages: list[Message]) -> ModelTurn:
        self.sent[key] = messages_sha256(messages)
        return super().complete_keyed(key, messages)


class _Correct:
    """A stand-in verifier: round 1's prompts are sent before any verdict, so which one it gives doesn't matter."""

    def verify(self, candidate: Candidate, problem: Problem, time_left_s: float | None = None) -> Verdict:
        return Verdict(status=Status.correct, reason="correct")


def prompt_hashes() -> dict[str, str]:
    """The hashes of round 1's coder prompts, as `solve --candidates 2` sends them."""
    from kernelloop.serve.runs import solve

    client = _Hashing(turns())
    with tempfile.TemporaryDirectory() as space:
        solve(PROBLEM, chat_client=client, verifier=_Correct(), analyze=lambda problem: None, candidates=2,
              device="cpu", workspace=space)
    return {key: sha for key, sha in client.sent.items() if key.startswith("coder/r1")}


def header() -> RecordingHeader:
    problem = Problem.from_file(PROBLEM)
    return RecordingHeader(problem=problem.name, problem_sha256=problem.sha256)


if __name__ == "__main__":
    out = Path(__file__).with_name("turns.jsonl")
    write_recording(out, turns(prompt_hashes()), header())
    print(f"wrote {out}")
