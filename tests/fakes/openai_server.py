"""A real HTTP server that speaks the OpenAI chat API and plays a script, for tests.

It listens on 127.0.0.1 on a free port, serves from a background thread, and stops when its
`with` block ends (or, if a test forgets, after `max_lifetime_s`). Every request is recorded
so tests can check what a client actually sent over the wire.

    with FakeOpenAIServer([ErrorReply(429, retry_after_s=0), Reply("ok", reasoning="hmm")]) as server:
        model = make_chat_model(server.url, server.model)
        ...
        assert server.requests[0].body["temperature"] == 0.6

Script entries are consumed in order; an entry with a `when` matcher is served only to a
request whose messages it accepts (the first unconsumed entry that matches wins). A request
with `stream: true` gets the same reply as server-sent events (reasoning deltas first, then
the answer, then usage when `stream_options.include_usage` asks); `Stall` sends a few events
and then nothing, as a stuck stream does.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal

MAX_SLEEP_S = 10.0  # no scripted delay or hang may hold a handler thread longer than this

Matcher = Callable[[list[dict]], bool]
"""Takes the request's `messages` (as sent), says whether this script entry applies."""

ReasoningPlace = Literal["reasoning_content", "reasoning", "think", "think_unopened", "none"]


@dataclass(frozen=True)
class Reply:
    """A normal completion; `place` says where the reasoning travels.

    think: `<think>REASONING</think>` before the answer in `content`;
    think_unopened: the same without the opening tag (as some R1 servers send it).
    Token counts left as None are omitted from `usage`, as some servers do.
    """

    content: str
    reasoning: str = ""
    place: ReasoningPlace = "reasoning_content"
    prompt_tokens: int | None = 11
    completion_tokens: int | None = 7
    reasoning_tokens: int | None = None
    finish_reason: str = "stop"
    delay_s: float = 0.0
    when: Matcher | None = None


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error with an OpenAI-style error body (and Retry-After when given)."""

    status: int
    message: str = "scripted error"
    retry_after_s: float | None = None
    when: Matcher | None = None


@dataclass(frozen=True)
class Hang:
    """Sleeps before answering (capped at MAX_SLEEP_S), then sends `then` if anyone still listens."""

    seconds: float
    then: Reply = field(default_factory=lambda: Reply("late answer"))
    when: Matcher | None = None


@dataclass(frozen=True)
class Malformed:
    """A response whose body is not a chat completion."""

    body: bytes = b'{"choices": [ {"message": '
    status: int = 200
    content_type: str = "application/json"
    when: Matcher | None = None


@dataclass(frozen=True)
class Stall:
    """Streams `reply` until `after_chars` of it are sent, then sends nothing for `seconds` (capped)."""

    reply: Reply = field(default_factory=lambda: Reply("never finished", reasoning="thinking " * 20))
    after_chars: int = 40
    seconds: float = 5.0
    when: Matcher | None = None


Scripted = Reply | ErrorReply | Hang | Malformed | Stall


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # keys lower-cased
    body: dict | None  # parsed JSON, None when the body was empty or not JSON
    received_at_s: float  # time.monotonic() on arrival


class FakeOpenAIServer:
    """Serves `script` at `url` (which ends in /v1) until the `with` block ends."""

    def __init__(self, script: list[Scripted] | None = None, *, model: str = "fake-r1",
                 api_key: str | None = None, max_lifetime_s: float = 120.0):
        """api_key: when set, requests without `Authorization: Bearer <api_key>` get a 401."""
        self.model = model
        self.api_key = api_key
        self.max_lifetime_s = max_lifetime_s
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._script = list(script or [])
        self._served = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lifetime_timer: threading.Timer | None = None
        self._url: str | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeOpenAIServer:
        handler = type("BoundHandler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True  # a hung handler must never keep the test process alive
        host, port = self._httpd.server_address[:2]
        self._url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai-server", daemon=True)
        self._thread.start()
        self._lifetime_timer = threading.Timer(self.max_lifetime_s, self.stop)
        self._lifetime_timer.daemon = True
        self._lifetime_timer.start()
        return self

    def stop(self) -> None:
        """Wakes every sleeping handler, stops serving and frees the port; safe to call twice."""
        self._stopping.set()
        if self._lifetime_timer is not None:
            self._lifetime_timer.cancel()
        with self._lock:
            httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL for an OpenAI client, e.g. http://127.0.0.1:54321/v1."""
        if self._url is None:
            raise RuntimeError("the fake server was never started; use it as a context manager")
        return self._url

    # -- what tests read ---------------------------------------------------------------------

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def unserved(self) -> int:
        """Script entries not yet consumed."""
        with self._lock:
            return len(self._script)

    # -- used by the handler -----------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_entry(self, messages: list[dict]) -> Scripted | None:
        with self._lock:
            for index, entry in enumerate(self._script):
                if entry.when is None or entry.when(messages):
                    self._served += 1
                    return self._script.pop(index)
            return None

    def _enter_flight(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave_flight(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _sleep(self, seconds: float) -> None:
        self._stopping.wait(min(max(seconds, 0.0), MAX_SLEEP_S))


def completion_body(reply: Reply, model: str) -> dict:
    """The JSON a server sends for `reply` (reasoning placed where `reply.place` says)."""
    message: dict = {"role": "assistant", "content": reply.content}
    if reply.place == "reasoning_content":
        message["reasoning_content"] = reply.reasoning
    elif reply.place == "reasoning":
        message["reasoning"] = reply.reasoning
    elif reply.place == "think":
        message["content"] = f"<think>\n{reply.reasoning}\n</think>\n\n{reply.content}"
    elif reply.place == "think_unopened":
        message["content"] = f"{reply.reasoning}\n</think>\n\n{reply.content}"
    usage: dict = {}
    if reply.prompt_tokens is not None:
        usage["prompt_tokens"] = reply.prompt_tokens
    if reply.completion_tokens is not None:
        usage["completion_tokens"] = reply.completion_tokens
    if reply.prompt_tokens is not None and reply.completion_tokens is not None:
        usage["total_tokens"] = reply.prompt_tokens + reply.completion_tokens
    if reply.reasoning_tokens is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": usage or None,
    }


def error_body(message: str, status: int) -> dict:
    return {"error": {"message": message, "type": "fake_error", "code": status}}


def _json(status: int, payload: dict, headers: dict[str, str] | None = None) -> tuple[int, bytes, str, dict]:
    return status, json.dumps(payload).encode(), "application/json", headers or {}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAIServer  # bound per server by FakeOpenAIServer.start
    protocol_version = "HTTP/1.1"  # keep-alive, like real servers; every reply sets Content-Length

    def log_message(self, format, *args) -> None:  # noqa: A002 - stdlib signature
        """Silent: tests read `fake.requests`, not stderr."""

    def do_GET(self) -> None:
        self._read_and_record()
        if self.path.rstrip("/") == "/v1/models":
            self._send_json(200, {"object": "list", "data": [
                {"id": self.fake.model, "object": "model", "created": 0, "owned_by": "fake"}]})
        else:
            self._send_json(404, error_body(f"no route GET {self.path}", 404))

    def do_POST(self) -> None:
        body = self._read_and_record()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send_json(404, error_body(f"no route POST {self.path}", 404))
            return
        if self.fake.api_key is not None and self.headers.get("Authorization") != f"Bearer {self.fake.api_key}":
            self._send_json(401, error_body("invalid api key", 401))
            return
        if body is None or not isinstance(body.get("messages"), list):
            self._send_json(400, error_body("body must be JSON with a 'messages' list", 400))
            return
        self.fake._enter_flight()
        try:
            entry = self.fake._next_entry(body["messages"])
            if body.get("stream") and isinstance(entry, Hang):  # streamed, a hang waits as long, then streams
                self.fake._sleep(entry.seconds)
                entry = entry.then
            if body.get("stream") and isinstance(entry, (Reply, Stall)):
                self._stream(entry, bool((body.get("stream_options") or {}).get("include_usage")))
                return
            response = self._respond(entry)
        finally:
            # Leave before writing: once the client has the answer it may send the next request,
            # which must not find this one still counted.
            self.fake._leave_flight()
        self._send_bytes(*response)

    def _respond(self, entry: Scripted | None) -> tuple[int, bytes, str, dict[str, str]]:
        """(status, body, content type, extra headers) for one chat request, after any scripted wait."""
        fake = self.fake
        if entry is None:
            # 400, not 5xx: a client must fail fast, not retry, when a test under-scripts.
            return _json(400, error_body(f"fake server: script exhausted after {fake._served} replies", 400))
        if isinstance(entry, Reply):
            fake._sleep(entry.delay_s)
            return _json(200, completion_body(entry, fake.model))
        if isinstance(entry, ErrorReply):
            headers = {} if entry.retry_after_s is None else {"Retry-After": f"{entry.retry_after_s:g}"}
            return _json(entry.status, error_body(entry.message, entry.status), headers)
        if isinstance(entry, Hang):
            fake._sleep(entry.seconds)
            return _json(200, completion_body(entry.then, fake.model))
        if isinstance(entry, Malformed):
            return entry.status, entry.body, entry.content_type, {}
        if isinstance(entry, Stall):  # unstreamed, a stall is a hang with no answer
            fake._sleep(entry.seconds)
            return _json(504, error_body("stalled", 504))
        raise TypeError(f"unknown script entry {entry!r}")

    def _stream(self, entry: Reply | Stall, include_usage: bool) -> None:
        """Server-sent events of one reply, reasoning in `reasoning_content` deltas (8 chars each)."""
        reply = entry.reply if isinstance(entry, Stall) else entry
        self.fake._sleep(reply.delay_s)
        body = completion_body(reply, self.fake.model)
        pieces = [("reasoning_content", reply.reasoning[i:i + 8]) for i in range(0, len(reply.reasoning), 8)]
        pieces += [("content", reply.content[i:i + 8]) for i in range(0, len(reply.content), 8)]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")  # the body ends when the connection does
        self.end_headers()
        self.close_connection = True
        sent = 0
        try:
            for name, text in pieces:
                if isinstance(entry, Stall) and sent >= entry.after_chars:
                    self.wfile.flush()
                    self.fake._sleep(entry.seconds)
                    return
                self._event({"choices": [{"index": 0, "delta": {name: text}, "finish_reason": None}]})
                sent += len(text)
            self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": reply.finish_reason}]})
            if include_usage:
                self._event({"choices": [], "usage": body["usage"]})
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client cut the stream

    def _event(self, payload: dict) -> None:
        chunk = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                 "model": self.fake.model, **payload}
        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.flush()

    def _read_and_record(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        headers = {key.lower(): value for key, value in self.headers.items()}
        self.fake._record(RecordedRequest(self.command, self.path, headers, body, time.monotonic()))
        return body if isinstance(body, dict) else None

    def _send_json(self, status: int, payload: dict) -> None:
        self._send_bytes(*_json(status, payload))

    def _send_bytes(self, status: int, data: bytes, content_type: str, headers: dict[str, str]) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout fired during a Hang): nobody is left to answer.
            self.close_connection = True
