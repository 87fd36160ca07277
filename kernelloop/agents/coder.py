"""The coder: one model call that writes one candidate kernel, and the record of that attempt.

The prompt carries the problem, the plan, the user's hints, the best kernel so far, this
candidate's own previous attempt with the verifier's feedback (in round 1 of a warm start: the
start kernel to fix, when it is not correct), and the critique of the last round. The reply
goes through `extract_candidate`; code that doesn't parse (or no code at all) becomes a
`compile_error` verdict here, so no GPU time is spent on it.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from kernelloop.agents.calls import ask
from kernelloop.agents.extract import extract_candidate
from kernelloop.agents.planner import BACKEND_RULES, backward_line, workloads_line
from kernelloop.agents.prompts import render
from kernelloop.agents.records import Attempt  # noqa: F401  (re-exported)
from kernelloop.agents.turns import ChatModel, Message, ModelTurn, ReplayExhausted, messages_sha256, turn_key
from kernelloop.errors import error_line
from kernelloop.problem import sha256_text
from kernelloop.records import Code, Status, Verdict
from kernelloop.starts import START_ID

FEEDBACK_CHARS = 2000  # of verifier feedback per previous attempt in a prompt
CRITIQUE_CHARS = 3000  # of the last round's critique in a prompt, cut at a line




class PriorAttempt(BaseModel):
    """An earlier attempt as a coder sees it."""

    id: str
    outcome: str
    code: str = ""
    feedback: str = ""

    @classmethod
    def of(cls, attempt: Attempt, baseline: str, with_code: bool = True) -> PriorAttempt:
        feedback = (attempt.verdict.feedback or attempt.verdict.reason) if attempt.verdict else ""
        return cls(id=attempt.id, outcome=attempt.outcome(baseline),
                   code=attempt.code if with_code else "", feedback=feedback[:FEEDBACK_CHARS])


class CoderBrief(BaseModel):
    """Everything one coder needs: the payload of its Send, so it is checkpointed with the task."""

    attempt_id: str
    round: int
    index: int
    candidates: int
    backend: str
    baseline: str = "eager"
    model: str = ""
    problem_name: str
    problem_source: str
    plan: str
    hints: list[str] = Field(default_factory=list)
    best: PriorAttempt | None = None
    previous: PriorAttempt | None = Field(default=None, description="this candidate's attempt of the last round")
    others: list[PriorAttempt] = Field(default_factory=list, description="the rest of the last round, outcome only")
    critique: str = ""


def critique_for_prompt(critique: str, feedback: str) -> str:
    """The critique without the lines the verifier's feedback above it already shows (its facts
    bullets repeat there word for word), cut at a line to CRITIQUE_CHARS."""
    shown = {line.strip().removeprefix("- ") for line in feedback.splitlines() if line.strip()}
    kept, size = [], 0
    for line in critique.splitlines():
        if line.strip().removeprefix("- ") in shown:
            continue
        if size + len(line) + 1 > CRITIQUE_CHARS:
            kept.append("- (the rest of the review is cut)")
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


def coder_messages(brief: CoderBrief) -> list[Message]:
    """The coder's prompt: one user message (reasoning models get no system prompt)."""
    critique = critique_for_prompt(brief.critique, brief.previous.feedback if brief.previous else "")
    text = render("coder.j2", index=brief.index, candidates=brief.candidates, round=brief.round,
                  problem_name=brief.problem_name, problem_source=brief.problem_source,
                  backend_rule=BACKEND_RULES[brief.backend], plan=brief.plan, hints=brief.hints,
                  best=brief.best, previous=brief.previous, others=brief.others, critique=critique,
                  previous_is_start=brief.previous is not None and brief.previous.id == START_ID,
                  workloads=workloads_line(brief.problem_source), backward=backward_line(brief.problem_source))
    return [Message(role="user", content=text)]


def not_a_candidate(why: str, cut_off: bool = False) -> Verdict:
    """The verdict of a reply that gave no parsable candidate: decided here, no GPU involved."""
    return Verdict(status=Status.compile_error, reason=f"syntax: {why}", device="not-run",
                   code=Code.cut_off if cut_off else Code.syntax,
                   feedback=f"Your reply could not be used: {why}. Reply with the whole file in one "
                            "```python block, and keep it short enough to finish.")


def write_candidate(brief: CoderBrief, client: ChatModel) -> tuple[Attempt, ModelTurn | None]:
    """Ask for one candidate and extract it. Endpoint failures become an attempt with `model_error`."""
    messages = coder_messages(brief)
    attempt = Attempt(id=brief.attempt_id, round=brief.round, index=brief.index, backend=brief.backend,
                      model=brief.model, prompt_sha256=messages_sha256(messages),
                      prompt_chars=sum(len(m.content) for m in messages))
    started = time.perf_counter()
    try:
        turn = ask(client, turn_key("coder", brief.attempt_id), messages)
    except ReplayExhausted:
        raise  # a recording that doesn't fit the run is the user's to fix, not a model failure
    except Exception as exc:  # any endpoint failure is recorded on the attempt and judged by routing
        attempt.model_error = error_line(exc)
        attempt.model_s = time.perf_counter() - started
        return attempt, None
    attempt.model_s = turn.latency_s or (time.perf_counter() - started)
    attempt.model = turn.model or attempt.model
    attempt.finish_reason, attempt.replayed = turn.finish_reason, turn.replayed
    attempt.reasoning_chars = len(turn.reasoning)
    attempt.prompt_tokens, attempt.completion_tokens = turn.prompt_tokens, turn.completion_tokens
    attempt.reasoning_tokens = turn.reasoning_tokens
    found = extract_candidate(turn.content, turn.reasoning, turn.finish_reason)
    attempt.code = found.source or ""
    attempt.code_sha256 = sha256_text(attempt.code) if attempt.code else ""
    attempt.extract_notes = found.notes
    if not found.ok:
        attempt.extract_error = found.error
        attempt.verdict = not_a_candidate(found.error or "no candidate", found.cut_off)
    return attempt, turn
