"""What a run is given rather than what it remembers: the model, the verifier, the workspace.

The context is passed to every `invoke` and never checkpointed, so a resumed or replayed run
can bring a different model (a recording, another endpoint) or a fresh verifier. Nothing
here touches a GPU or the network at import; the default model and verifier are built on
first use. Python callers pass objects (any LangChain chat model, a verifier, callables);
LangGraph Server and Studio pass JSON, so only the plain fields appear in the context schema.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel
from pydantic.json_schema import SkipJsonSchema

from kernelloop.agents.planner import ReferenceFacts
from kernelloop.agents.turns import ChatModel
from kernelloop.config.endpoint import workspace_dir
from kernelloop.config.settings import load_settings
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Verdict


@runtime_checkable
class VerifierLike(Protocol):
    """kernelloop.tools.verify.verifier.Verifier or anything with its `verify`: never raises for a bad candidate."""

    def verify(self, candidate: Candidate, problem: Problem, time_left_s: float | None = None) -> Verdict:
        """`time_left_s`: the run's budget from now; the verification is cut there."""
        ...


class RunEvent(BaseModel):
    """Progress a node reports while it works (LangGraph's custom stream)."""

    kind: Literal["planning", "planned", "coding", "coded", "verifying", "verified", "critiqued", "finished",
                  "retrying", "reasoning", "asked_live"]  # asked_live: a replay sent a changed prompt to the model
    round: int = 0
    attempt_id: str | None = None
    status: str | None = None
    speedup: float | None = None
    message: str = ""


@dataclass(kw_only=True)
class Context:
    """Run dependencies. Explicit fields win; empty ones are built from config on first use."""

    chat_client: SkipJsonSchema[ChatModel] = field(
        default=None, metadata={"description": "any LangChain chat model, or a keyed client (a recording); "
                                               "None: make_chat_model(base_url, model) from KERNELLOOP_* settings"})
    base_url: str | None = field(
        default=None, metadata={"description": "OpenAI-compatible endpoint of the default model; None: "
                                               "KERNELLOOP_BASE_URL"})
    model: str | None = field(default=None, metadata={"description": "model name; None: KERNELLOOP_MODEL"})
    stream_reasoning: bool = field(
        default=False, metadata={"description": "the default model streams, so reasoning shows as it comes"})
    verifier: SkipJsonSchema[Any] = field(  # a VerifierLike
        default=None, metadata={"description": "judges candidates; None: kernelloop.tools.verify.verifier.Verifier"})
    workspace: str | Path | None = field(
        default=None, metadata={"description": "run dirs live in WORKSPACE/runs/<thread_id>; None: workspace_dir()"})
    device: str | None = field(default=None, metadata={"description": "device for the default verifier: auto, cpu, "
                                                                      "cuda or cuda:N; None: the Settings' "
                                                                      "(KERNELLOOP_DEVICE, .env, kernelloop.toml)"})
    analyze: SkipJsonSchema[Callable[[Problem], ReferenceFacts | None] | None] = field(
        default=None, metadata={"description": "FLOPs/bytes/roofline of the reference for the planner"})
    reuse_verdicts: bool = field(
        default=True, metadata={"description": "read back verdicts already journaled for the same code "
                                               "(a resumed run never verifies an attempt twice)"})
    session_started_at: SkipJsonSchema[float] = field(  # internal: never a field of Studio's form
        default_factory=time.time, metadata={"description": "time.time() this invoke began; earlier time "
                                                            "(a killed process, a human at a prompt) isn't spent"})
    clock: SkipJsonSchema[Callable[[], float]] = field(
        default=time.time, metadata={"description": "seconds since the epoch"})
    _lock: SkipJsonSchema[Any] = field(default_factory=threading.Lock, repr=False)

    def client(self) -> ChatModel:
        with self._lock:
            if self.chat_client is None:
                from kernelloop.agents.llm import make_chat_model  # lazy: needs an endpoint configured

                self.chat_client = make_chat_model(self.base_url, self.model, stream=self.stream_reasoning)
            return self.chat_client

    def get_verifier(self) -> VerifierLike:
        with self._lock:
            if self.verifier is None:
                from kernelloop.tools.verify.verifier import Verifier  # lazy: starts a worker process

                chosen = load_settings(device=self.device, home=self.workspace)  # the one way, as every entry point
                self.verifier = Verifier(device=chosen.device, workspace=chosen.workspace.root,
                                         **chosen.limits.model_dump())
            return self.verifier

    def workspace_path(self) -> Path:
        return Path(self.workspace) if self.workspace is not None else workspace_dir()
