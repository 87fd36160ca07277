"""Time travel: replay from a middle checkpoint with the recorded turns (no model), fork with a hint."""

import pytest

from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import open_checkpointer, thread_ids
from kernelloop.graph.state import attempts_of
from kernelloop.serve.runs import SolveError, fork, replay, solve
from tests.graph.scripted import RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier

NO_FACTS = {"analyze": lambda problem: None}


def finished_run(tmp_path):
    verifier = ScriptedVerifier()
    result = solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=verifier, workspace=tmp_path,
                   candidates=2, thread_id="original", **NO_FACTS)
    return result, verifier


def history(tmp_path, thread="original"):
    with open_checkpointer(None, tmp_path) as saver:
        return list(build_graph(saver).get_state_history({"configurable": {"thread_id": thread}}))


def before_round_two(tmp_path):
    """The checkpoint after round 1's critique, with round 2's coders next."""
    return next(s for s in history(tmp_path) if s.next == ("coder", "coder") and s.values.get("round") == 1)


def fingerprint(values):
    return [(a.id, a.status, a.code_sha256, a.turn_sha256) for a in attempts_of(values)]


def test_replay_with_recorded_turns_from_a_middle_checkpoint_reproduces_the_attempts(tmp_path):
    original, _ = finished_run(tmp_path)
    before = history(tmp_path)[0].values
    middle = before_round_two(tmp_path)
    verifier = ScriptedVerifier()
    again = replay("original", middle.config["configurable"]["checkpoint_id"], recorded=True, reverify=True,
                   verifier=verifier, workspace=tmp_path, **NO_FACTS)  # no model and no endpoint configured
    after = history(tmp_path)[0].values
    assert fingerprint(after) == fingerprint(before)
    assert (again.best_id, again.status, again.best_speedup) == (original.best_id, "correct", 1.5)
    assert verifier.calls == ["r2c0", "r2c1"]  # round 1 is kept from the checkpoint, round 2 ran again


def test_replay_reuses_journaled_verdicts_unless_asked_to_verify_again(tmp_path):
    finished_run(tmp_path)
    verifier = ScriptedVerifier()
    middle = before_round_two(tmp_path).config["configurable"]["checkpoint_id"]
    replay("original", middle, recorded=True, verifier=verifier, workspace=tmp_path, **NO_FACTS)
    assert verifier.calls == []
    assert all(a.verdict_reused for a in attempts_of(history(tmp_path)[0].values) if a.round == 2)


def test_fork_with_a_hint_changes_the_next_coder_prompt(tmp_path):
    finished_run(tmp_path)
    original_prompt = ScriptedChatClient()
    solve(RELU_PROBLEM, chat_client=original_prompt, verifier=ScriptedVerifier(), workspace=tmp_path,
          candidates=2, thread_id="same-again", **NO_FACTS)
    client = ScriptedChatClient()
    middle = before_round_two(tmp_path).config["configurable"]["checkpoint_id"]
    result = fork("original", middle, hint="keep BLOCK a power of two", changes={"target_speedup": 1.4},
                  chat_client=client, verifier=ScriptedVerifier(), workspace=tmp_path, **NO_FACTS)
    assert sorted(client.calls) == ["coder/r2c0", "coder/r2c1"]  # the plan and round 1 come from the checkpoint
    assert "- keep BLOCK a power of two" in client.prompts["coder/r2c0"]
    assert "keep BLOCK a power of two" not in original_prompt.prompts["coder/r2c0"]
    latest = history(tmp_path)[0].values
    assert latest["hints"] == ["keep BLOCK a power of two"]
    assert latest["settings"]["target_speedup"] == 1.4
    assert result.stop_reason == "target_met"
    assert any(s.metadata.get("source") == "update" for s in history(tmp_path))  # the fork point is recorded


def test_fork_refuses_the_last_checkpoint_and_unknown_threads(tmp_path):
    finished_run(tmp_path)
    last = history(tmp_path)[0].config["configurable"]["checkpoint_id"]
    with pytest.raises(SolveError, match="can't be forked"):
        fork("original", last, hint="x", workspace=tmp_path)
    with pytest.raises(SolveError, match="no thread nope"):
        replay("nope", recorded=True, workspace=tmp_path)
    with pytest.raises(SolveError, match="already exists"):
        solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
              thread_id="original", **NO_FACTS)
    with open_checkpointer(None, tmp_path) as saver:
        assert thread_ids(saver) == ["original"]
