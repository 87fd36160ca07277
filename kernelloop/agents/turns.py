"""One model call as data, and the clients that answer by key.

Agents call `calls.ask(model, key, messages)`. `model` is any LangChain chat model (the default is
llm.make_chat_model(): ChatOpenAI on an OpenAI-compatible endpoint) or a `KeyedChatClient`:
something that answers by key, such as `KeyedReplayChatClient` re-serving a recorded run (its
live fallback is keyed too: calls.Asking). This module imports no model layer, so llm.py may
import it without a cycle.
Every turn keeps the exact messages that were sent beside the reply, so a run directory is a
complete record; the prompt's hash is what an honest replay compares.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)


class Message(BaseModel):
    role: str = Field(description="'user', 'assistant' or 'system'")
    content: str


class ModelTurn(BaseModel):
    """What one chat completion returned, with the reasoning split from the answer."""

    content: str = Field(description="the answer, reasoning removed")
    reasoning: str = Field(default="", description="chain of thought, wherever the server put it")
    model: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = Field(default=0, description="as the server counts them (reasoning included)")
    reasoning_tokens: int = 0
    latency_s: float = 0.0
    attempts: int = Field(default=1, description="HTTP attempts including retries")
    replayed: bool = Field(default=False, description="served from a recording, not a live model")
    messages: list[Message] = Field(default_factory=list, description="exactly what was sent (no system role)")


def messages_sha256(messages: list[Message]) -> str:
    """The prompt's hash: what replay compares. (The contents joined by newlines: the same hash
    earlier runs recorded for their one-message prompts.)"""
    return hashlib.sha256("\n".join(m.content for m in messages).encode()).hexdigest()


class ModelListener:
    """What a node wants to hear while a model call runs: retries, reasoning as it streams, and a
    replay that had to ask the live model (on_live: why)."""

    def __init__(self, on_retry: Callable[[str], None] | None = None,
                 on_reasoning: Callable[[str], None] | None = None, on_live: Callable[[str], None] | None = None):
        self.on_retry, self.on_reasoning, self.on_live = on_retry, on_reasoning, on_live


_LISTENER: contextvars.ContextVar[ModelListener | None] = contextvars.ContextVar("kernelloop_listener", default=None)


@contextmanager
def listening(listener: ModelListener) -> Iterator[None]:
    """Model calls made inside this block (in this thread) report to `listener`."""
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        _LISTENER.reset(token)


def current_listener() -> ModelListener | None:
    return _LISTENER.get()


# --- keyed turns: parallel coders replay deterministically -------------------------------------
#
# Parallel coders call the model from several threads, so "the next recorded turn" depends on
# scheduling. Every agent call therefore carries a key (node and attempt, e.g. "coder/r2c1"), and a
# recording is looked up by that key, never by call order.


ChatModel = Any
"""What agents call: a LangChain chat model (BaseChatModel) or a KeyedChatClient."""
ChatClient = ChatModel  # the older name, still imported by agents/critic.py


def turn_key(node: str, key: str) -> str:
    """The recording key of one model call: 'planner/plan', 'coder/r2c1', 'critic/r2'."""
    return f"{node}/{key}"


@runtime_checkable
class KeyedChatClient(Protocol):
    """A client that answers by key (recordings, scripted test models)."""

    model_name: str

    def complete_keyed(self, key: str, messages: list[Message]) -> ModelTurn: ...


class ReplayExhausted(RuntimeError):
    """A strict replay can't answer: no turn recorded for the key, or its prompt changed. key: the turn's key;
    why: one line saying which (serve.runs turns it into RecordingEnded, which says what to run instead)."""

    def __init__(self, key: str, why: str):
        self.key, self.why = key, why
        super().__init__(why)


class RecordedTurn(BaseModel):
    """One model call as stored in a run directory or a recording file."""

    key: str = Field(description="turn_key(node, key), e.g. 'coder/r2c1'")
    prompt_sha256: str = Field(default="", description="messages_sha256 of the prompt it answered ('' when unknown)")
    turn: ModelTurn


class KeyedReplayChatClient:
    """Recorded turns served by key, for runs re-executed deterministically.

    A recorded turn is served only to the prompt it answered: when the prompt's hash differs
    (a template edit, a fork's hint) or nothing was recorded for the key, the call goes to
    `fallback` (a live chat model), and the log and the listener's on_live say why; with no
    fallback (strict, the CLI's --recorded) it raises ReplayExhausted. Hand-written recordings
    carry no hash and are served as they are.
    """

    def __init__(self, recorded: list[RecordedTurn], model_name: str = "replay", fallback: KeyedChatClient | None = None,
                 own_thread: bool = False):
        """recorded: may hold several turns per key (a thread's branches); the first whose prompt matches wins.
        own_thread: the turns are the thread's own, re-served by a resume (nobody recorded anything): a turn
        never answered before is the run going on, asked of the model without a word."""
        self._by_key: dict[str, list[RecordedTurn]] = {}
        for item in recorded:
            self._by_key.setdefault(item.key, []).append(item)
        self.model_name = model_name
        self.fallback = fallback
        self.live_keys: list[str] = []
        self.own_thread = own_thread

    @property
    def keys(self) -> list[str]:
        return sorted(self._by_key)

    def complete_keyed(self, key: str, messages: list[Message]) -> ModelTurn:
        found, prompt = self._by_key.get(key, []), messages_sha256(messages)
        fits = next((item for item in found if not item.prompt_sha256 or item.prompt_sha256 == prompt), None)
        if fits is not None:
            return fits.turn.model_copy(update={"replayed": True, "messages": messages})
        if not found and self.own_thread and self.fallback is not None:
            log.info("%s was not answered before the run stopped: asking the model", key)
            self.live_keys.append(key)
            return self.fallback.complete_keyed(key, messages)
        if not found:
            what = "this thread has" if self.own_thread else "the recording has"
            why = f"{what} no model turn for {key} ({len(self._by_key)} recorded)"
        else:
            why = (f"the prompt of {key} differs from the one its recorded reply answered (sha256 {prompt[:12]}, "
                   f"recorded {found[0].prompt_sha256[:12]}: a fork's hint or target, or a template edit)")
        if self.fallback is None:
            raise ReplayExhausted(key, why)
        log.warning("%s: asking the model", why)
        self.live_keys.append(key)
        listener = current_listener()
        if listener is not None and listener.on_live is not None:
            listener.on_live(f"{why}: asked the model")
        return self.fallback.complete_keyed(key, messages)
