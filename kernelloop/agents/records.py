"""The agents' records several rooms share: an Attempt (code, verdict, costs) and a round's Critique.

The verifier's records (Verdict, Measurement, Profile, ...) are kernelloop/records.py, importable with
torch alone; these are pydantic models of the agent side."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelloop.records import Status, Verdict


class Attempt(BaseModel):
    """One candidate: where it came from, its code, and what the verifier said."""

    id: str = Field(description="'r{round}c{index}', unique within a thread")
    round: int
    index: int
    backend: str
    model: str = ""
    code: str = Field(default="", description="the candidate file ('' when the reply had no code)")
    code_sha256: str = ""
    kernel_file: str | None = Field(default=None, description="the candidate on disk, relative to the run dir")
    extract_notes: list[str] = Field(default_factory=list)
    extract_error: str | None = Field(default=None, description="why the reply gave no usable candidate")
    model_error: str | None = Field(default=None, description="why the model call failed")
    prompt_sha256: str = ""
    prompt_chars: int = Field(default=0, description="the prompt's length in characters, as sent")
    turn_file: str | None = Field(default=None, description="recorded model turn, relative to the run dir")
    turn_sha256: str | None = None
    finish_reason: str | None = None
    replayed: bool = Field(default=False, description="the reply came from a recording, not a live model")
    reasoning_chars: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = Field(default=0, description="reasoning included")
    reasoning_tokens: int = 0
    model_s: float = Field(default=0.0, description="wall time of the model call, s")
    verify_s: float | None = Field(default=None, description="wall time of verification, s")
    verdict: Verdict | None = None
    verdict_reused: bool = Field(default=False, description="read back from the run dir, not re-verified")

    @property
    def status(self) -> str:
        """The verdict status; 'no_candidate' when the model call failed; 'unverified' before the verifier."""
        if self.verdict is not None:
            return self.verdict.status.value
        return "no_candidate" if self.model_error or not self.code else "unverified"

    def speedup_vs(self, baseline: str = "eager") -> float | None:
        if self.verdict is None or self.verdict.status is not Status.correct:
            return None
        return self.verdict.speedup if baseline == "eager" else self.verdict.speedups.get(baseline)

    def outcome(self, baseline: str = "eager") -> str:
        """One line: 'correct, 1.42x over eager' or 'incorrect: mismatch ...'."""
        if self.verdict is None:
            return f"no candidate: {self.model_error or self.extract_error or 'not verified yet'}"
        if self.verdict.status is Status.correct:
            speedup = self.speedup_vs(baseline)
            timed = f"{speedup:.3g}x over {baseline}" if speedup is not None else "speed not measured"
            return f"correct, {timed}"
        return f"{self.verdict.status.value}: {self.verdict.reason}"
class Critique(BaseModel):
    """The review of one round: facts, then what to do."""

    round: int
    findings: list[str] = Field(default_factory=list, description="what happened, one line per attempt")
    per_attempt: dict[str, list[str]] = Field(default_factory=dict, description="fixes for each attempt's lineage")
    next_steps: list[str] = Field(default_factory=list, description="what every coder should do next")
    bound: str | None = Field(default=None, description="'memory' or 'compute' when known")
    advice: str = Field(default="", description="the model's next steps, when the critic used the model")
    origin: Literal["rules", "model"] = "rules"
    model_error: str | None = None
    turn_file: str | None = None
    turn_sha256: str | None = None

    def for_coder(self, attempt_id: str | None) -> str:
        """The critique as one coder should read it: its own fixes first."""
        lines = [f"- {step}" for step in self.per_attempt.get(attempt_id or "", [])]
        lines += [f"- {step}" for step in self.next_steps]
        if self.advice:
            lines.append(self.advice.strip())
        return "\n".join(lines)
