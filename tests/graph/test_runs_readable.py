"""A run dir and `kernelloop runs` are a complete record: each turn's exact messages beside the reply
(`runs show --turn`), forks drawn as branches with their checkpoint and hint, and `runs diff`."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kernelloop.cli import app
from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import open_checkpointer
from kernelloop.serve.runs import fork, solve
from tests.graph.scripted import RELU_PROBLEM, ScriptedChatClient, ScriptedVerifier

cli = CliRunner()
NO_FACTS = {"analyze": lambda problem: None}


def run_and_fork(tmp_path):
    solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
          candidates=2, thread_id="t", critic_model=True, **NO_FACTS)
    with open_checkpointer(None, tmp_path) as saver:
        history = list(build_graph(saver).get_state_history({"configurable": {"thread_id": "t"}}))
    middle = next(s for s in history if s.next == ("coder", "coder") and s.values.get("round") == 1)
    checkpoint = middle.config["configurable"]["checkpoint_id"]
    fork("t", checkpoint, hint="keep BLOCK a power of two", changes={"target_speedup": 1.4},
         chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path, **NO_FACTS)
    return checkpoint


def runs(tmp_path, *args: str):
    result = cli.invoke(app, ["runs", *args, "--workspace", str(tmp_path)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_fork_is_drawn_as_a_branch_with_its_checkpoint_and_hint(tmp_path):
    checkpoint = run_and_fork(tmp_path)
    shown = runs(tmp_path, "show", "t")
    assert (f"branch fork1 (files: branches/fork1/) from {checkpoint}: hint 'keep BLOCK a power of two', "
            "target_speedup=1.4") in shown
    assert shown.count("branch fork1 (files") == 1 and "files of branch fork1: " in shown
    steps = json.loads(runs(tmp_path, "show", "t", "--json").splitlines()[-1])["steps"]
    children = [s for s in steps if s["parent"] == checkpoint]
    assert len(children) == 2  # the original round 2 and the fork
    assert "tokens: 6 calls" in shown  # the latest branch: the plan, round 1 (2 coders, a critique), 2 coders


def test_each_turn_keeps_the_exact_messages_sent(tmp_path):
    run_and_fork(tmp_path)
    coder = runs(tmp_path, "show", "t", "--turn", "r1c0")
    assert "sent: user" in coder and "candidate 1 of 2 in round 1" in coder
    assert "Okay, a draft" in coder and "The full file:" in coder  # the reasoning, then the answer
    critic = json.loads(runs(tmp_path, "show", "t", "--turn", "critic/r1", "--json").splitlines()[-1])
    assert critic["prompt_sha256"] and critic["turn"]["messages"][0]["content"].startswith("You review GPU kernel")
    plan = json.loads(runs(tmp_path, "show", "t", "--turn", "plan", "--json").splitlines()[-1])
    assert "You are planning" in plan["turn"]["messages"][0]["content"]
    missing = cli.invoke(app, ["runs", "show", "t", "--turn", "r9c9", "--workspace", str(tmp_path)])
    assert missing.exit_code == 2 and "no recorded model turn coder/r9c9" in missing.stderr


def test_runs_diff_of_two_attempts_and_of_two_threads(tmp_path):
    solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(), workspace=tmp_path,
          candidates=2, thread_id="t", **NO_FACTS)
    solve(RELU_PROBLEM, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(speedup=2.0), workspace=tmp_path,
          candidates=1, thread_id="u", **NO_FACTS)
    two = json.loads(runs(tmp_path, "diff", "t:r1c0", "r2c0", "--json").splitlines()[-1])
    assert (two["left"]["status"], two["right"]["status"], two["right"]["speedup"]) == ("incorrect", "correct", 1.5)
    assert "-    tl.store(out_ptr + offsets, tl.minimum(x, 0.0), mask=mask)" in two["code_diff"]
    assert "+    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)" in two["code_diff"]
    best = json.loads(runs(tmp_path, "diff", "t", "u", "--json").splitlines()[-1])
    assert (best["left"]["name"], best["right"]["name"]) == ("t:r2c0", "u:r2c0")
    assert (best["left"]["speedup"], best["right"]["speedup"], best["code_diff"]) == (1.5, 2.0, "")
    text = runs(tmp_path, "diff", "t:r1c0", "t:r2c0")
    assert "incorrect" in text and "correct" in text and "tl.maximum" in text
