"""The model layer: LangChain chat models, against a real local HTTP server that speaks the OpenAI chat API
with R1's quirks, and against LangChain's own fake chat model."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage

from kernelloop.agents.calls import ask
from kernelloop.agents.llm import ChatR1, LLMError, call_model, make_chat_model, split_reasoning, to_r1_messages
from kernelloop.agents.turns import Message, ModelListener, listening
from kernelloop.config.endpoint import ConfigError
from tests.fakes.openai_server import ErrorReply, FakeOpenAIServer, Hang, Malformed, Reply, Stall

API_KEY = "sk-test-never-shown"
ASK = [Message(role="user", content="write a kernel")]


def model_for(server: FakeOpenAIServer, **overrides) -> ChatR1:
    return make_chat_model(server.url, server.model, API_KEY, **{"timeout_s": 5.0, "max_retries": 2, **overrides})


# -- split_reasoning and the R1 message convention (pure) -----------------------------------------

@pytest.mark.parametrize(("content", "field", "answer", "reasoning"), [
    ("the answer", "my thoughts", "the answer", "my thoughts"),
    ("<think>\nmy thoughts\n</think>\n\nthe answer", None, "the answer", "my thoughts"),
    ("my thoughts\n</think>\n\nthe answer", None, "the answer", "my thoughts"),  # opening tag lost
    ("<think>cut off mid-thought", None, "", "cut off mid-thought"),  # hit max tokens while thinking
    ("the answer", None, "the answer", ""),
    ("<think>same</think>the answer", "same", "the answer", "same"),  # sent twice: kept once
    ("<think>tagged</think>the answer", "field", "the answer", "field\n\ntagged"),
    ("", "only thoughts", "", "only thoughts"),
])
def test_split_reasoning(content, field, answer, reasoning):
    assert split_reasoning(content, field) == (answer, reasoning)


def test_system_prompt_is_folded_into_the_first_user_message():
    wire = to_r1_messages([Message(role="system", content="You write Triton."),
                           Message(role="user", content="fuse these ops"),
                           Message(role="assistant", content="ok"),
                           Message(role="user", content="faster")])
    assert wire == [{"role": "user", "content": "You write Triton.\n\nfuse these ops"},
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": "faster"}]
    assert to_r1_messages([Message(role="system", content="hi")]) == [{"role": "user", "content": "hi"}]


# -- over HTTP: answers, reasoning, usage -------------------------------------------------------------

@pytest.mark.parametrize("place", ["reasoning_content", "reasoning", "think", "think_unopened"])
def test_reasoning_is_found_wherever_the_server_puts_it(place):
    with FakeOpenAIServer([Reply("```python\ncode\n```", reasoning="step 1, step 2", place=place)]) as server:
        turn = call_model(model_for(server), ASK)
    assert turn.content == "```python\ncode\n```"
    assert turn.reasoning == "step 1, step 2"


def test_request_follows_r1_conventions_and_the_turn_keeps_what_was_sent():
    with FakeOpenAIServer([Reply("ok")], api_key=API_KEY) as server:
        turn = ask(model_for(server), "coder/r1c0", [Message(role="system", content="Be brief."), *ASK])
    (request,) = server.chat_requests
    assert request.body["messages"] == [{"role": "user", "content": "Be brief.\n\nwrite a kernel"}]
    assert turn.messages == [Message(role="user", content="Be brief.\n\nwrite a kernel")]
    assert request.body["temperature"] == 0.6 and request.body["model"] == "fake-r1"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"


def test_usage_is_recorded_and_missing_usage_counts_as_zero():
    script = [Reply("a", reasoning="r", prompt_tokens=120, completion_tokens=80, reasoning_tokens=50),
              Reply("b", prompt_tokens=None, completion_tokens=None)]
    with FakeOpenAIServer(script) as server:
        turn = call_model(model_for(server), ASK)
        bare = call_model(model_for(server), ASK)
    assert (turn.prompt_tokens, turn.completion_tokens, turn.reasoning_tokens) == (120, 80, 50)
    assert turn.attempts == 1 and turn.latency_s > 0
    assert turn.model == "fake-r1" and turn.finish_reason == "stop" and not turn.replayed
    assert (bare.prompt_tokens, bare.completion_tokens, bare.reasoning_tokens) == (0, 0, 0)


# -- over HTTP: the SDK's retries, counted and reported ---------------------------------------------------

def test_429_is_retried_after_the_servers_retry_after_and_each_retry_is_reported():
    heard: list[str] = []
    with FakeOpenAIServer([ErrorReply(429, "slow down", retry_after_s=1.2), ErrorReply(500, "boom"),
                           Reply("ok")]) as server:
        with listening(ModelListener(on_retry=heard.append)):
            turn = call_model(model_for(server), ASK)
    first, second, _ = server.chat_requests
    assert turn.content == "ok" and turn.attempts == 3
    assert second.received_at_s - first.received_at_s >= 1.2  # the SDK's own backoff starts at 0.5 s
    assert heard == ["HTTP 429, retry 1", "HTTP 500, retry 2"]


def test_5xx_until_retries_run_out_is_one_llm_error():
    with FakeOpenAIServer([ErrorReply(503, "overloaded")] * 2) as server:
        with pytest.raises(LLMError) as caught:
            call_model(model_for(server, max_retries=1), ASK)
    error = caught.value
    assert (error.status, error.attempts) == (503, 2) and len(server.chat_requests) == 2
    assert server.url in str(error) and "overloaded" in str(error) and "\n" not in str(error)


@pytest.mark.parametrize("status", [400, 404])
def test_client_errors_fail_at_once(status):
    with FakeOpenAIServer([ErrorReply(status, "context length exceeded\nsecond line"), Reply("never")]) as server:
        with pytest.raises(LLMError) as caught:
            call_model(model_for(server), ASK)
    message = str(caught.value)
    assert caught.value.status == status and caught.value.attempts == 1 and server.unserved == 1
    assert f"HTTP {status}" in message and "context length exceeded second line" in message


def test_wrong_key_is_401_at_once_and_the_key_is_never_shown():
    with FakeOpenAIServer([Reply("never")], api_key="the-right-key") as server:
        model = model_for(server)
        with pytest.raises(LLMError) as caught:
            call_model(model, ASK)
    assert caught.value.status == 401 and len(server.chat_requests) == 1
    assert API_KEY not in str(caught.value) and API_KEY not in repr(model)


def test_a_hang_past_the_timeout_is_retried_then_fails_in_bounded_time():
    with FakeOpenAIServer([Hang(5.0), Hang(5.0), Reply("never")]) as server:
        started = time.monotonic()
        with pytest.raises(LLMError) as caught:
            call_model(model_for(server, timeout_s=0.5, max_retries=1), ASK)
        elapsed_s = time.monotonic() - started
    assert caught.value.status is None and caught.value.attempts == 2
    assert "no answer within the 0.5 s timeout" in str(caught.value)
    assert 1.0 <= elapsed_s < 4.0


def test_connection_refused_is_reported():
    with FakeOpenAIServer() as server:
        dead = model_for(server, max_retries=0)
    with pytest.raises(LLMError, match="connection failed"):
        call_model(dead, ASK)  # the server is gone: nothing listens on its port now


@pytest.mark.parametrize("bad", [Malformed(), Malformed(b'{"object": "chat.completion"}'),
                                 Malformed(b"<html>gateway</html>", content_type="text/html")])
def test_malformed_body_fails_at_once(bad):
    with FakeOpenAIServer([bad, Reply("never")]) as server:
        with pytest.raises(LLMError, match="unusable response") as caught:
            call_model(model_for(server), ASK)
    assert caught.value.attempts == 1 and server.unserved == 1


# -- streaming ---------------------------------------------------------------------------------------------

def test_streamed_reasoning_reaches_the_listener_and_the_turn_is_whole():
    heard: list[str] = []
    script = [Reply("the answer", reasoning="first I think, then I write", reasoning_tokens=9)]
    with FakeOpenAIServer(script) as server:
        with listening(ModelListener(on_reasoning=heard.append)):
            turn = call_model(model_for(server, stream=True), ASK)
    assert server.chat_requests[0].body["stream"] is True
    assert len(heard) > 1 and "".join(heard) == "first I think, then I write"
    assert (turn.content, turn.reasoning) == ("the answer", "first I think, then I write")
    assert (turn.prompt_tokens, turn.completion_tokens, turn.reasoning_tokens) == (11, 7, 9)


def test_a_stalled_stream_is_cut_by_the_stall_timeout():
    with FakeOpenAIServer([Stall(seconds=8.0)]) as server:
        started = time.monotonic()
        with pytest.raises(LLMError, match="the stream stalled: no data within the 0.5 s timeout"):
            call_model(model_for(server, stream=True, stall_timeout_s=0.5), ASK)
        assert time.monotonic() - started < 3.0


# -- limits: concurrency (the connection pool) and rate (LangChain's limiter) -------------------------------

def test_concurrency_limit_holds_across_models_and_threads():
    calls = 6
    script = [Reply(f"answer {i}", delay_s=0.25, when=lambda m, i=i: m[-1]["content"] == f"task {i}")
              for i in range(calls)]
    answers: dict[int, str] = {}
    with FakeOpenAIServer(script) as server:
        def coder(i: int) -> None:  # each coder builds its own model, as parallel graph nodes may
            answers[i] = call_model(model_for(server, max_concurrency=2),
                                    [Message(role="user", content=f"task {i}")]).content

        threads = [threading.Thread(target=coder, args=(i,)) for i in range(calls)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
    assert answers == {i: f"answer {i}" for i in range(calls)}
    assert server.max_in_flight == 2  # parallel, but never more than the limit


def test_the_rate_limiter_spaces_requests():
    with FakeOpenAIServer([Reply("a"), Reply("b"), Reply("c")]) as server:
        model = model_for(server, requests_per_s=4.0)
        for _ in range(3):
            call_model(model, ASK)
    times = [r.received_at_s for r in server.chat_requests]
    assert times[2] - times[0] >= 0.4  # two gaps of about 1/4 s each


# -- any LangChain chat model ------------------------------------------------------------------------------

def test_any_langchain_chat_model_works_with_its_reasoning_and_usage():
    reply = AIMessage(content="<think>plan the tiles</think>```python\nx\n```",
                      usage_metadata={"input_tokens": 30, "output_tokens": 20, "total_tokens": 50,
                                      "output_token_details": {"reasoning": 12}},
                      response_metadata={"model_name": "their-model", "finish_reason": "stop"})
    turn = ask(FakeMessagesListChatModel(responses=[reply]), "planner/plan", ASK)
    assert (turn.content, turn.reasoning, turn.model) == ("```python\nx\n```", "plan the tiles", "their-model")
    assert (turn.prompt_tokens, turn.completion_tokens, turn.reasoning_tokens) == (30, 20, 12)


def test_a_failing_langchain_model_is_one_llm_error():
    class Broken(FakeMessagesListChatModel):
        def _generate(self, *args, **kwargs):
            raise RuntimeError("their backend\nis down")

    with pytest.raises(LLMError, match="their backend is down"):
        call_model(Broken(responses=[]), ASK)


# -- configuration -------------------------------------------------------------------------------------------

def test_missing_endpoint_names_the_variable(monkeypatch):
    monkeypatch.delenv("KERNELLOOP_BASE_URL", raising=False)
    monkeypatch.delenv("KERNELLOOP_MODEL", raising=False)
    with pytest.raises(ConfigError, match="KERNELLOOP_BASE_URL"):
        make_chat_model()


def test_make_chat_model_reads_the_environment_and_flags_win(monkeypatch):
    with FakeOpenAIServer([Reply("ok")]) as server:
        monkeypatch.setenv("KERNELLOOP_BASE_URL", server.url)
        monkeypatch.setenv("KERNELLOOP_MODEL", "env-model")
        call_model(make_chat_model(model="flag-model", temperature=0.3), ASK)
    assert server.chat_requests[0].body["model"] == "flag-model"
    assert server.chat_requests[0].body["temperature"] == 0.3


def test_fake_server_lists_its_model_and_stops_by_itself():
    server = FakeOpenAIServer(max_lifetime_s=0.3).start()
    with urllib.request.urlopen(f"{server.url}/models", timeout=2) as response:
        assert json.load(response)["data"][0]["id"] == "fake-r1"
    time.sleep(0.6)  # past its lifetime: the port is closed without anyone calling stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{server.url}/models", timeout=2)
    server.stop()
