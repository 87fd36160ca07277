"""What a run is given rather than what it remembers: the model, the verifier, the workspace.

The context is passed to every `invoke` and never checkpointed, so a resumed or replayed run
can bring a different client (a recording, another endpoint) or a fresh verifier. Nothing
here touches a GPU or the network at import; the default client and verifier are built on
first use (LangGraph Server passes only JSON-able fields).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel

from kernelloop.agents.planner import ReferenceFacts
from kernelloop.agents.turns import ChatClient, KeyedChatClient
from kernelloop.config import workspace_dir
from kernelloop.problem import Candidate, Problem
from kernelloop.results import Verdict


@runtime_checkable
class VerifierLike(Protocol):
    """kernelloop.tools.verify.verifier.Verifier or anything with its `verify`: never raises for a bad candidate."""

    def verify(self, candidate: Candidate, problem: Problem) -> Verdict: ...


class RunEvent(BaseModel):
    """Progress a node reports while it works (LangGraph's custom stream)."""

    kind: Literal["planning", "planned", "coding", "coded", "verifying", "verified", "critiqued", "finished"]
    round: int = 0
    attempt_id: str | None = None
    status: str | None = None
    speedup: float | None = None
    message: str = ""


@dataclass(kw_only=True)
class Context:
    """Run dependencies. Explicit fields win; empty ones are built from config on first use."""

    chat_client: ChatClient | KeyedChatClient | None = field(
        default=None, metadata={"description": "the model; None: make_chat_client() from KERNELLOOP_* settings"})
    verifier: VerifierLike | None = field(
        default=None, metadata={"description": "judges candidates; None: kernelloop.tools.verify.verifier.Verifier"})
    workspace: Path | None = field(
        default=None, metadata={"description": "run dirs live in WORKSPACE/runs/<thread_id>; None: workspace_dir()"})
    device: str = field(default="auto", metadata={"description": "device for the default verifier"})
    analyze: Callable[[Problem], ReferenceFacts | None] | None = field(
        default=None, metadata={"description": "FLOPs/bytes/roofline of the reference for the planner"})
    reuse_verdicts: bool = field(
        default=True, metadata={"description": "read back verdicts already journaled for the same code "
                                               "(a resumed run never verifies an attempt twice)"})
    session_started_at: float = field(
        default_factory=time.time, metadata={"description": "time.time() this invoke began; earlier time "
                                                            "(a killed process, a human at a prompt) isn't spent"})
    clock: Callable[[], float] = field(default=time.time, metadata={"description": "seconds since the epoch"})
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def client(self) -> ChatClient | KeyedChatClient:
        with self._lock:
            if self.chat_client is None:
                from kernelloop.agents.llm import make_chat_client  # lazy: needs an endpoint configured

                self.chat_client = make_chat_client()
            return self.chat_client

    def get_verifier(self) -> VerifierLike:
        with self._lock:
            if self.verifier is None:
                from kernelloop.tools.verify.verifier import Verifier  # lazy: starts a worker process

                self.verifier = Verifier(device=self.device, workspace=self.workspace_path())
            return self.verifier

    def workspace_path(self) -> Path:
        return Path(self.workspace) if self.workspace is not None else workspace_dir()
