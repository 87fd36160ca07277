"""The live model: a LangChain chat model, with DeepSeek-R1's habits handled.

`make_chat_model()` builds `ChatR1`, LangChain's ChatOpenAI on any OpenAI-compatible endpoint
(DeepSeek API, NIM, vLLM, SGLang, Ollama). ChatOpenAI targets the official OpenAI schema and
drops the non-standard `reasoning_content` / `reasoning` fields where those servers put R1's
chain of thought; ChatR1 keeps them. Retries and backoff (429, 5xx, timeouts, Retry-After)
are the OpenAI SDK's (`max_retries`); request rates are LangChain's InMemoryRateLimiter;
concurrency per endpoint is the HTTP connection pool's limit. We only count the attempts
(an httpx hook) so the live view can show each retry.

`call_model(model, messages)` works with any LangChain chat model a caller brings: reasoning
is read from `reasoning_content`, `reasoning`, reasoning content blocks or `<think>` tags.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import openai
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.rate_limiters import InMemoryRateLimiter
from langchain_openai import ChatOpenAI

from kernelloop.agents.turns import Message, ModelTurn, current_listener
from kernelloop.config.endpoint import EndpointConfig

log = logging.getLogger(__name__)

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
MAX_ERROR_CHARS = 300  # server messages are cut to this so LLMError stays one readable line
STALL_TIMEOUT_S = 120.0  # a streamed reply with no byte for this long is cut


class LLMError(RuntimeError):
    """The endpoint gave no usable answer (after any retries); the message is one line."""

    def __init__(self, url: str, status: int | None, what: str, attempts: int):
        self.url = url
        self.status = status
        self.attempts = attempts
        where = f"HTTP {status}" if status is not None else "no HTTP status"
        tries = f"after {attempts} attempts" if attempts > 1 else "on the first attempt"
        super().__init__(f"model endpoint {url} failed {tries} ({where}): {_one_line(what)}")


# -- pure helpers ---------------------------------------------------------------------------

def split_reasoning(content: str, reasoning_field: str | None) -> tuple[str, str]:
    """(answer, reasoning) from a message's content and its reasoning field, if any.

    Reasoning may come in `reasoning_content`/`reasoning` (passed as `reasoning_field`), or in
    `<think>...</think>` inside the content. R1 servers often drop the opening tag, so content
    with `</think>` but no `<think>` before it has everything before `</think>` as reasoning.
    Content with `<think>` and no closing tag was cut off mid-thought: all of it is reasoning.
    """
    answer, tagged = content or "", ""
    close_at = answer.find(THINK_CLOSE)
    if close_at >= 0:
        before, after = answer[:close_at], answer[close_at + len(THINK_CLOSE):]
        open_at = before.find(THINK_OPEN)
        if open_at >= 0:
            prefix, tagged = before[:open_at], before[open_at + len(THINK_OPEN):]
        else:
            prefix, tagged = "", before
        answer = prefix + after
    elif THINK_OPEN in answer:
        answer, tagged = answer.split(THINK_OPEN, 1)
    parts = [part.strip() for part in (reasoning_field or "", tagged) if part and part.strip()]
    if len(parts) == 2 and parts[0] == parts[1]:
        parts = parts[:1]
    return answer.strip(), "\n\n".join(parts)


def to_r1_messages(messages: list[Message]) -> list[dict[str, str]]:
    """Wire messages with no system role: R1 is tuned without a system prompt.

    All system text is folded, in order, in front of the first user message (or becomes the
    first user message when there is none).
    """
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content.strip())
    wire = [{"role": m.role, "content": m.content} for m in messages if m.role != "system"]
    if not system:
        return wire
    for item in wire:
        if item["role"] == "user":
            item["content"] = f"{system}\n\n{item['content']}"
            return wire
    return [{"role": "user", "content": system}, *wire]


def _one_line(text: str) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[:MAX_ERROR_CHARS] + "..."


def _reasoning_of(message: dict) -> str:
    """`reasoning_content` (DeepSeek, vLLM, SGLang) or `reasoning` (OpenRouter, newer vLLM)."""
    for name in ("reasoning_content", "reasoning"):
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


# -- the chat model ---------------------------------------------------------------------------

class ChatR1(ChatOpenAI):
    """ChatOpenAI that keeps R1's reasoning: `additional_kwargs["reasoning_content"]`, streamed or not."""

    def _create_chat_result(self, response, generation_info=None):
        result = super()._create_chat_result(response, generation_info)
        data = response if isinstance(response, dict) else response.model_dump()
        for generation, choice in zip(result.generations, data.get("choices") or [], strict=False):
            reasoning = _reasoning_of(choice.get("message") or {})
            if reasoning:
                generation.message.additional_kwargs["reasoning_content"] = reasoning
        return result

    def _convert_chunk_to_generation_chunk(self, chunk, default_chunk_class, base_generation_info):
        generation = super()._convert_chunk_to_generation_chunk(chunk, default_chunk_class, base_generation_info)
        choices = chunk.get("choices") or []
        if generation is not None and choices:
            reasoning = _reasoning_of(choices[0].get("delta") or {})
            if reasoning:  # chunks merge by concatenating string kwargs
                generation.message.additional_kwargs["reasoning_content"] = reasoning
        return generation


@dataclass
class _Call:
    """One call_model in flight: attempts seen by the HTTP hook and who hears about retries."""

    attempts: int = 0
    last_status: int | None = None
    listener: Callable[[str], None] | None = None


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("kernelloop_model_call", default=None)
def _on_request(request: httpx.Request) -> None:
    call = _CALL.get()
    if call is None:
        return
    call.attempts += 1
    if call.attempts > 1:  # the SDK is retrying: say so, with what went wrong the last time
        why = f"HTTP {call.last_status}" if call.last_status else "timeout or connection error"
        log.warning("model endpoint %s: %s, retry %d", request.url, why, call.attempts - 1)
        if call.listener is not None:
            call.listener(f"{why}, retry {call.attempts - 1}")
    call.last_status = None


def _on_response(response: httpx.Response) -> None:
    call = _CALL.get()
    if call is not None:
        call.last_status = response.status_code if response.status_code >= 400 else None


_CLIENTS: dict[tuple[str, int], httpx.Client] = {}
_CLIENTS_LOCK = threading.Lock()


def _http_client(base_url: str, max_concurrency: int) -> httpx.Client:
    """One connection pool per endpoint for the whole process: N coders that each build a model
    still send at most `max_concurrency` requests at once (the rest wait for a connection)."""
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
    key = (base_url.rstrip("/"), max_concurrency)
    with _CLIENTS_LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = httpx.Client(limits=httpx.Limits(max_connections=max_concurrency),
                                         event_hooks={"request": [_on_request], "response": [_on_response]})
        return _CLIENTS[key]


def make_chat_model(base_url: str | None = None, model: str | None = None, api_key: str | None = None, *,
                    stream: bool = False, stall_timeout_s: float = STALL_TIMEOUT_S,
                    requests_per_s: float | None = None, **overrides: Any) -> ChatR1:
    """ChatR1 for flags > KERNELLOOP_* environment; ConfigError names what to set when unset.

    overrides: further EndpointConfig fields (temperature, timeout_s, max_retries, max_concurrency).
    stream: stream the reply (reasoning reaches the live view as it comes); a stream with no
    byte for stall_timeout_s is cut. requests_per_s: LangChain's rate limiter for the endpoint.
    """
    config = EndpointConfig.resolve(base_url, model, api_key, **overrides)
    # Unstreamed, R1 may think for minutes before the first byte: the read timeout is the whole call's.
    read_s = stall_timeout_s if stream else config.timeout_s
    return ChatR1(model=config.model, base_url=config.base_url, api_key=config.api_key,
                  temperature=config.temperature, max_retries=config.max_retries,
                  timeout=httpx.Timeout(config.timeout_s, connect=10.0, read=read_s, pool=None),
                  streaming=stream, stream_usage=True,
                  rate_limiter=InMemoryRateLimiter(requests_per_second=requests_per_s, check_every_n_seconds=0.05,
                                                   max_bucket_size=1) if requests_per_s else None,
                  http_client=_http_client(config.base_url, config.max_concurrency))


def endpoint_of(model: Any) -> dict[str, str]:
    """{'base_url', 'model'} of a chat model, as far as it says (never its key)."""
    found = {"base_url": getattr(model, "openai_api_base", None) or "",
             "model": getattr(model, "model_name", None) or getattr(model, "model", None) or ""}
    return {key: str(value) for key, value in found.items() if value}


# -- one call -----------------------------------------------------------------------------------

class _Reasoning(BaseCallbackHandler):
    """Streams reasoning deltas to the listener."""

    def __init__(self, on_reasoning: Callable[[str], None]):
        self.on_reasoning = on_reasoning

    def on_llm_new_token(self, token: str | list[str | dict[str, Any]], *, chunk: Any = None, **kwargs: Any) -> None:
        message = getattr(chunk, "message", None)
        text = _reasoning_of(getattr(message, "additional_kwargs", None) or {})
        if text:
            self.on_reasoning(text)


def _reasoning_in(message: AIMessage) -> str:
    """Reasoning from the kwargs (ChatR1, ChatDeepSeek) or from reasoning content blocks."""
    found = _reasoning_of(message.additional_kwargs or {})
    if not found and isinstance(message.content, list):
        found = "".join(b.get("reasoning") or b.get("thinking") or "" for b in message.content
                        if isinstance(b, dict) and b.get("type") in ("reasoning", "thinking"))
    return found


def _text_of(message: AIMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(b if isinstance(b, str) else b.get("text", "") for b in message.content
                   if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text"))


def _as_llm_error(exc: Exception, model: Any, url: str, attempts: int) -> LLMError:
    if isinstance(exc, openai.APIStatusError):
        what = _server_message(exc) + (" (does the base URL end in /v1?)" if exc.status_code == 404 else "")
        return LLMError(url, exc.status_code, what, attempts)
    if isinstance(exc, (openai.APITimeoutError, httpx.TimeoutException)):
        timeout = getattr(model, "request_timeout", None)
        read_s = getattr(timeout, "read", timeout)
        within = f"within the {read_s:g} s timeout" if isinstance(read_s, (int, float)) else "within the timeout"
        if getattr(model, "streaming", False):  # streamed, the read timeout is the stall timeout
            return LLMError(url, None, f"the stream stalled: no data {within}", attempts)
        return LLMError(url, None, f"no answer {within}", attempts)
    if isinstance(exc, (openai.APIConnectionError, httpx.TransportError)):
        return LLMError(url, None, f"connection failed: {exc}", attempts)
    return LLMError(url, 200, f"unusable response ({type(exc).__name__}: {exc})", attempts)


def _server_message(error: openai.APIStatusError) -> str:
    """The server's own words from an error response, falling back to the client's summary."""
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return error.message


def call_model(model: BaseChatModel, messages: list[Message]) -> ModelTurn:
    """One chat completion through any LangChain chat model; latency_s covers retries.

    Raises LLMError (one line) when the model gives no usable answer after its own retries.
    """
    listener = current_listener()
    call = _Call(listener=listener.on_retry if listener is not None else None)
    on_reasoning = listener.on_reasoning if listener is not None else None
    callbacks: list[BaseCallbackHandler] = [_Reasoning(on_reasoning)] if on_reasoning else []
    lc_messages = [HumanMessage(m.content) if m.role == "user" else AIMessage(m.content) for m in messages]
    url = endpoint_of(model).get("base_url") or type(model).__name__
    started = time.monotonic()
    token = _CALL.set(call)
    try:
        reply = model.invoke(lc_messages, config={"callbacks": callbacks})
    except Exception as exc:  # noqa: BLE001 - any failure of the model becomes one line
        raise _as_llm_error(exc, model, url, max(call.attempts, 1)) from exc
    finally:
        _CALL.reset(token)
    if not isinstance(reply, (AIMessage, AIMessageChunk)):
        raise LLMError(url, 200, f"the model answered a {type(reply).__name__}, not a message", call.attempts or 1)
    answer, reasoning = split_reasoning(_text_of(reply), _reasoning_in(reply))
    usage: Mapping[str, Any] = reply.usage_metadata or {}
    meta = reply.response_metadata or {}
    return ModelTurn(
        content=answer, reasoning=reasoning,
        model=meta.get("model_name") or endpoint_of(model).get("model", ""),
        finish_reason=meta.get("finish_reason"),
        prompt_tokens=usage.get("input_tokens") or 0, completion_tokens=usage.get("output_tokens") or 0,
        reasoning_tokens=(usage.get("output_token_details") or {}).get("reasoning") or 0,
        latency_s=time.monotonic() - started, attempts=max(call.attempts, 1))
