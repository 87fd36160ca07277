"""The loop against a real local HTTP server speaking the OpenAI API (R1 habits included),
through the project's own client: reasoning in `reasoning_content` or `<think>`, a 429 with
Retry-After, parallel coders. Then the recorded turns replay with the server gone."""

import json
from pathlib import Path

import pytest

from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import open_checkpointer
from kernelloop.graph.rundir import RunDir
from kernelloop.serve.runs import RecordingEnded, replay, solve
from tests.fakes.openai_server import ErrorReply, FakeOpenAIServer, Reply
from tests.graph.scripted import FIXED_KERNEL, PLAN_REPLY, RELU_PROBLEM, WRONG_KERNEL, ScriptedVerifier, coder_reply


def asks(text: str):
    return lambda messages: text in messages[-1]["content"]


SCRIPT = [
    Reply(PLAN_REPLY, reasoning="A ReLU is memory-bound.", place="think", when=asks("You are planning")),
    ErrorReply(429, retry_after_s=0, when=asks("candidate 1 of 2 in round 1")),
    Reply(coder_reply(WRONG_KERNEL), reasoning="maximum or minimum?", when=asks("candidate 1 of 2 in round 1")),
    Reply(coder_reply(WRONG_KERNEL), reasoning="", place="think_unopened", when=asks("candidate 2 of 2 in round 1")),
    Reply(coder_reply(FIXED_KERNEL), reasoning="The bug was tl.minimum.", when=asks("candidate 1 of 2 in round 2")),
    Reply(coder_reply(FIXED_KERNEL), reasoning="Use tl.maximum.", when=asks("candidate 2 of 2 in round 2")),
]


def test_solve_over_http_then_replay_the_recording_without_the_server(tmp_path):
    with FakeOpenAIServer(list(SCRIPT), model="fake-r1") as server:
        result = solve(RELU_PROBLEM, base_url=server.url, model=server.model, verifier=ScriptedVerifier(),
                       workspace=tmp_path, candidates=2, thread_id="http", analyze=lambda problem: None)
        assert server.unserved == 0
        bodies = [request.body for request in server.chat_requests]
    assert (result.status, result.best_id, result.stop_reason, result.model) == ("correct", "r2c0", "target_met",
                                                                                   "fake-r1")
    assert all(body["messages"][0]["role"] == "user" and len(body["messages"]) == 1 for body in bodies)
    assert {body["temperature"] for body in bodies} == {0.6}
    with open_checkpointer(None, tmp_path) as saver:
        graph = build_graph(saver)
        values = graph.get_state({"configurable": {"thread_id": "http"}}).values
        middle = next(s for s in graph.get_state_history({"configurable": {"thread_id": "http"}})
                      if s.next == ("coder", "coder") and s.values["round"] == 1)
    first = next(a for a in values["attempts"] if a["id"] == "r1c0")
    turn = RunDir(tmp_path, "http").load_turn(first["turn_file"], first["turn_sha256"]).turn
    assert (turn.reasoning, turn.attempts, first["finish_reason"]) == ("maximum or minimum?", 2, "stop")
    assert values["settings"]["sampling"] == {"temperature": 0.6}

    again = replay("http", middle.config["configurable"]["checkpoint_id"], recorded=True, workspace=tmp_path,
                   verifier=ScriptedVerifier(), analyze=lambda problem: None)  # the server is gone
    assert (again.best_id, again.status) == ("r2c0", "correct")
    assert Path(again.best_kernel).read_text() == FIXED_KERNEL


USAGE = {"planning": (101, 51, 21), "candidate 1 of 2 in round 1": (203, 77, 30),
         "candidate 2 of 2 in round 1": (205, 79, 31), "You review GPU kernel": (307, 88, 40),
         "candidate 1 of 2 in round 2": (409, 99, 50), "candidate 2 of 2 in round 2": (411, 97, 52)}
REPLIES = {"planning": PLAN_REPLY, "You review GPU kernel": "1. Use tl.maximum.",
           "round 1": coder_reply(WRONG_KERNEL), "round 2": coder_reply(FIXED_KERNEL)}


def metered_script() -> list[Reply]:
    """Each call reports its own token counts, so a total can only be right by adding every one."""
    def reply_for(text: str) -> str:
        return next(v for k, v in REPLIES.items() if k in text)

    return [Reply(reply_for(text), reasoning="...", prompt_tokens=p, completion_tokens=c, reasoning_tokens=r,
                  when=asks(text)) for text, (p, c, r) in USAGE.items()]


def test_token_totals_are_the_sum_of_what_the_server_reported(tmp_path):
    with FakeOpenAIServer(metered_script()) as server:
        result = solve(RELU_PROBLEM, base_url=server.url, model=server.model, verifier=ScriptedVerifier(),
                       workspace=tmp_path, candidates=2, thread_id="metered", critic_model=True,
                       prices="0.5,2", analyze=lambda problem: None)
        assert server.unserved == 0
    prompt, completion, reasoning = (sum(u[i] for u in USAGE.values()) for i in range(3))
    tokens = result.tokens
    assert (tokens.calls, tokens.prompt_tokens, tokens.completion_tokens, tokens.reasoning_tokens) == \
        (6, prompt, completion, reasoning)
    assert tokens.cost_usd == pytest.approx((prompt * 0.5 + completion * 2) / 1e6)
    record = json.loads((Path(result.run_dir) / "result.json").read_text())
    assert record["tokens"]["prompt_tokens"] == prompt
    by_round = record["tokens_by_round"]
    assert by_round["0"]["prompt_tokens"] == 101  # the plan
    assert by_round["1"]["prompt_tokens"] == 203 + 205 + 307 and by_round["1"]["calls"] == 3  # coders + critic
    assert by_round["2"]["completion_tokens"] == 99 + 97
    assert {t["key"] for t in record["tokens_by_turn"]} == {"planner/plan", "coder/r1c0", "coder/r1c1", "critic/r1",
                                                            "coder/r2c0", "coder/r2c1"}
    report = Path(result.report).read_text()
    assert "## Tokens" in report and f"| **run** | 6 | {prompt:,} | {completion:,} |" in report


def test_replay_serves_only_unchanged_prompts_and_says_which_went_to_the_model(tmp_path):
    with FakeOpenAIServer(metered_script()) as server:
        solve(RELU_PROBLEM, base_url=server.url, model=server.model, verifier=ScriptedVerifier(),
              workspace=tmp_path, candidates=2, thread_id="honest", critic_model=True, analyze=lambda p: None)
    with open_checkpointer(None, tmp_path) as saver:
        history = list(build_graph(saver).get_state_history({"configurable": {"thread_id": "honest"}}))
    after_round_one = next(s for s in history if s.next == ("critic",) and s.values.get("round") == 1)
    checkpoint = after_round_one.config["configurable"]["checkpoint_id"]

    # The critic's template changes: its recorded turn (hashed like every other) no longer fits.
    from kernelloop.agents import critic
    original = critic.render
    changed = lambda name, **values: original(name, **values) + ("\nBe brief." if name == "critic.j2" else "")  # noqa: E731
    critic.render = changed
    try:
        with pytest.raises(RecordingEnded, match="the prompt of critic/r1 differs from the one its recorded reply"):
            replay("honest", checkpoint, recorded=True, workspace=tmp_path, verifier=ScriptedVerifier(),
                   analyze=lambda p: None)  # strict: never an old reply to a new prompt
        events = []
        # the same advice as recorded, so round 2's coder prompts (which quote it) are unchanged
        live = [Reply("1. Use tl.maximum.", prompt_tokens=5, completion_tokens=3, when=asks("Be brief."))]
        with FakeOpenAIServer(live) as server:
            again = replay("honest", checkpoint, workspace=tmp_path, verifier=ScriptedVerifier(), base_url=server.url,
                           analyze=lambda p: None, on_event=events.append)
            asked = [r.body["messages"][0]["content"] for r in server.chat_requests]
    finally:
        critic.render = original
    assert len(asked) == 1 and asked[0].endswith("Be brief.")  # only the changed prompt reached the model
    [live_event] = [e.message for e in events if e.kind == "asked_live"]
    assert live_event.startswith("the prompt of critic/r1 differs from the one its recorded reply answered")
    assert live_event.endswith("a template edit): asked the model")
    assert again.best_id == "r2c0" and again.status == "correct"  # round 2's coders were re-served as recorded
