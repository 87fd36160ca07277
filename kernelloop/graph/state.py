"""The graph's state: everything a replay needs, as plain JSON values.

Values are dicts, lists, strings and numbers only, so a checkpoint reads the same in SQLite
and Postgres and under any serializer setting (LangGraph's msgpack serde returns unknown
pydantic classes as dicts in strict mode). The pydantic models (RunSettings, ProblemRecord,
Attempt, Plan, Critique) validate at the edges: `settings_of(state)`, `attempts_of(state)`.
Large blobs (model turns with their reasoning, candidate files, verdict journal) live in the
run directory; the state keeps their paths (relative to the run dir) and hashes.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypedDict

from kernelloop.agents.planner import Plan, ReferenceFacts
from kernelloop.agents.records import Attempt, Critique
from kernelloop.config import defaults
from kernelloop.graph.usage import Prices, TurnUsage
from kernelloop.records import Status, Verdict
from kernelloop.starts import StartRecord

CLEAR = {"clear": True}  # written to `drafts` by the verifier once a round's drafts are verified


class RunSettings(BaseModel):
    """The knobs of one run; a fork may change them. A name it does not have is an error (a typo in a
    LangGraph Server input or a parent graph's state is never dropped). `from_input` fills what a run's
    input leaves out from the Settings (KERNELLOOP_* > .env > kernelloop.toml > defaults)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["triton", "cuda", "auto"] = Field(default=defaults.BACKEND, description="'auto': the planner picks")
    device: str = Field(default=defaults.DEVICE, description="verifier device: 'auto', 'cpu', 'cuda' or 'cuda:N'")
    model: str = Field(default="", description="model name, as the endpoint reports it")
    base_url: str | None = Field(default=None, description="the endpoint, so a resume finds it (never the key)")
    prices: dict[str, float] | None = Field(default=None, description="usage.Prices: USD per million prompt and "
                                                                      "completion tokens, for the run's cost")
    sampling: dict[str, Any] = Field(default_factory=dict, description="temperature and the like")
    target_speedup: float | None = Field(default=defaults.TARGET_SPEEDUP, description="stop when a correct kernel is this fast; "
                                                                   "None: stop at the first correct one")
    baseline: str = Field(default=defaults.BASELINE, description="what the target is measured against")
    max_rounds: int = Field(default=defaults.MAX_ROUNDS, ge=1)
    candidates: int = Field(default=defaults.CANDIDATES, ge=1, description="coders per round, run in parallel")
    budget_s: float = Field(default=defaults.BUDGET_S, gt=0, description="wall-clock budget, s")
    interactive: bool = Field(default=False, description="interrupt to review the plan and between rounds")
    critic_model: bool = Field(default=False, description="the critic also asks the model for advice")


    @classmethod
    def from_input(cls, given: Mapping[str, Any] | RunSettings) -> RunSettings:
        """A run's settings as its input gives them, the rest from the Settings, the one way every entry
        point makes them (LangGraph Server and a parent graph give a partial dict)."""
        from kernelloop.config.settings import load_settings  # lazy: pydantic-settings reads files

        chosen = load_settings()
        known = {"backend": chosen.backend, "device": str(chosen.device), "target_speedup": chosen.target,
                 "max_rounds": chosen.max_rounds, "candidates": chosen.candidates, "budget_s": chosen.budget,
                 "base_url": chosen.base_url}
        given = given.model_dump(exclude_unset=True) if isinstance(given, RunSettings) else dict(given)
        return cls.model_validate({k: v for k, v in known.items() if v is not None} | given)


class ProblemRecord(BaseModel):
    """The reference being beaten: its source is in the state, so a replay needs no original file.

    As a run's input, give a path or the source (and a name); the hash is computed, and a sha256 given
    with the source must match it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", description="the problem's name (default: the file's stem, or 'problem')")
    path: str = Field(default="", description="a problem file to read, or where the source came from")
    source: str = Field(default="", description="the problem file's text (class Model, get_inputs, "
                                                "get_init_inputs); empty: read from path")
    sha256: str = Field(default="", description="computed from the source; if given, it must match")
    trusted: bool = Field(default=True, description="False: a problem from outside (MCP, LangChain, a bench "
                                                    "directory), never imported in the orchestrator's process")

    @model_validator(mode="after")
    def _complete(self) -> ProblemRecord:
        from kernelloop.problem import read_source, sha256_text  # lazy: the state module stays light

        if not self.source:
            if not self.path:
                raise ValueError("a problem needs a path or its source")
            self.source = read_source(Path(self.path), "problem")
        digest = sha256_text(self.source)
        if self.sha256 and self.sha256 != digest:
            raise ValueError(f"sha256 {self.sha256[:16]!r} does not match the source's ({digest[:16]}...): "
                             "leave it out, it is computed")
        self.sha256 = digest
        self.name = self.name or (Path(self.path).stem if self.path else "problem")
        return self


def add_usage(current: list[dict] | None, update: list[dict]) -> list[dict]:
    """Each model call appends its tokens (usage.TurnUsage); parallel coders append at once."""
    return list(current or []) + list(update)


def add_drafts(current: list[dict] | None, update: list[dict] | dict) -> list[dict]:
    """Parallel coders append their attempts; the verifier empties the list with CLEAR."""
    if update == CLEAR:
        return []
    return list(current or []) + list(update)


class Review(BaseModel):
    """A person's answer at an interactive review (the value passed to `Command(resume=...)`)."""

    action: Literal["approve", "edit", "continue", "stop"] = "approve"
    plan: str | None = Field(default=None, description="the edited plan text, with action 'edit'")
    hint: str | None = Field(default=None, description="a hint for the coders from now on")


class InputState(TypedDict):
    """What a run starts from: typed, so LangGraph Studio shows a form (the values stay plain dicts in the
    state; the first node validates them, and a typo is an error)."""

    problem: ProblemRecord  # a path or the source; the hash is computed
    settings: NotRequired[RunSettings]  # what is left out comes from the Settings (RunSettings.from_input)
    hints: NotRequired[list[str]]  # hints the coders get from the first round
    start: NotRequired[dict]  # starts.StartRecord: the kernel attempt 0 is (solve --start); absent: from scratch


class State(InputState, total=False):
    """The whole run. Every field is written by exactly one kind of node (drafts: by the coders)."""

    facts: dict | None  # ReferenceFacts the planner saw (FLOPs, bytes, roofline), or None
    plan: dict | None  # Plan
    round: int  # the last round whose coders were sent (0 before the first)
    drafts: Annotated[list[dict], add_drafts]  # Attempts of the current round, not yet verified
    attempts: list[dict]  # every verified Attempt, in order
    best_id: str | None  # id of the best attempt so far (see rank_best)
    critiques: list[dict]  # Critique per critiqued round
    usage: Annotated[list[dict], add_usage]  # usage.TurnUsage of every model call, in order
    stop_requested: bool  # the user asked to stop at a review
    stop_reason: str | None  # why the run ended, once it has
    status: Literal["running", "finished"]
    branch: str | None  # a fork's name (its files: RUN/branches/<name>/); absent or None on the first branch
    phase: str  # the last sequential node that completed (for `runs show`)
    spent_s: float  # wall-clock seconds spent on the run so far (sessions add up; pauses don't count)
    profiling_s: float  # of spent_s, what Nsight Compute took (kept under 10%: tools/profile/ncu_budget.py)
    mark_at: float | None  # time.time() when spent_s was last brought up to date


# What the accessors below read: a node's State, or the plain dict a checkpoint's values are
# (`graph.get_state(...).values`, a node's `{**state, **update}`). They validate what they read.
StateLike = Mapping[str, Any]


def settings_of(state: StateLike) -> RunSettings:
    return RunSettings.model_validate(state.get("settings") or {})


def problem_of(state: StateLike) -> ProblemRecord:
    return ProblemRecord.model_validate(state["problem"])


def start_of(state: StateLike) -> StartRecord | None:
    return StartRecord.model_validate(state["start"]) if state.get("start") else None


def attempts_of(state: StateLike) -> list[Attempt]:
    return [Attempt.model_validate(a) for a in state.get("attempts") or []]


def plan_of(state: StateLike) -> Plan | None:
    return Plan.model_validate(state["plan"]) if state.get("plan") else None


def facts_of(state: StateLike) -> ReferenceFacts | None:
    return ReferenceFacts.model_validate(state["facts"]) if state.get("facts") else None


def critiques_of(state: StateLike) -> list[Critique]:
    return [Critique.model_validate(c) for c in state.get("critiques") or []]


def usage_of(state: StateLike) -> list[TurnUsage]:
    return [TurnUsage.model_validate(u) for u in state.get("usage") or []]


def prices_of(state: StateLike) -> Prices | None:
    prices = settings_of(state).prices
    return Prices.model_validate(prices) if prices else None


def best_of(state: StateLike) -> Attempt | None:
    wanted = state.get("best_id")
    return next((a for a in attempts_of(state) if a.id == wanted), None) if wanted else None


_FAILURE_ORDER = {Status.incorrect: 0, Status.runtime_error: 1, Status.timeout: 2, Status.rejected: 3,
                  Status.compile_error: 4}


def rank_best(attempts: list[Attempt], baseline: str = "eager") -> Attempt | None:
    """The best attempt: correct ones by speedup (unmeasured after measured), then the closest failure.

    Ties go to the earlier attempt. Attempts without code never win.
    """
    def key(item: tuple[int, Attempt, Verdict]) -> tuple:
        order, attempt, verdict = item
        if verdict.status is Status.correct:
            speedup = attempt.speedup_vs(baseline)
            return (0, 0 if speedup is not None else 1, -(speedup or 0.0), order)
        rel_err = verdict.rel_err if verdict.rel_err is not None else float("inf")
        return (1, _FAILURE_ORDER[verdict.status], rel_err, order)

    scored = [(i, a, a.verdict) for i, a in enumerate(attempts) if a.code and a.verdict is not None]
    return min(scored, key=key)[1] if scored else None
