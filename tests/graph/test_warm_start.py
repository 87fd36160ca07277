"""Warm starts (`solve --start`): the given kernel is attempt 0, verified like any attempt, and the
coders begin from it; the model is a real local HTTP server with R1 habits (tests/fakes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelloop.agents.critic import critique_round
from kernelloop.agents.planner import Plan
from kernelloop.agents.records import Attempt, Critique
from kernelloop.graph import routing
from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import open_checkpointer
from kernelloop.graph.state import RunSettings, rank_best
from kernelloop.records import Status, Verdict
from kernelloop.serve.runs import RunCancelled, resume, solve
from kernelloop.starts import resolve_start
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.scripted import (
    FIXED_KERNEL,
    PLAN_REPLY,
    RELU_PROBLEM,
    WRONG_KERNEL,
    ScriptedChatClient,
    ScriptedVerifier,
    coder_reply,
)
from tests.graph.test_cli import kernelloop, last_json


def asks(text: str):
    return lambda messages: text in messages[-1]["content"]


def prompts(server: FakeOpenAIServer, text: str) -> list[str]:
    return [r.body["messages"][-1]["content"] for r in server.chat_requests if text in r.body["messages"][-1]["content"]]


@pytest.mark.slow
def test_solve_start_wrong_kernel_is_attempt_0_and_a_fixed_reply_beats_it_with_the_real_verifier(tmp_path):
    start, workspace = tmp_path / "start_kernel.py", tmp_path / "ws"
    start.write_text(WRONG_KERNEL)
    script = [Reply(PLAN_REPLY, reasoning="A ReLU is memory-bound.", place="think", when=asks("You are planning")),
              Reply(coder_reply(FIXED_KERNEL), reasoning="tl.minimum was the bug.",
                    when=asks("candidate 1 of 1 in round 1"))]
    with FakeOpenAIServer(script, model="fake-r1") as server:
        solved = kernelloop("solve", RELU_PROBLEM, "--start", start, "--base-url", server.url, "--model", server.model,
                            "--device", "cpu", "--candidates", 1, "--workspace", workspace, "--thread", "warm", "--json")
        assert server.unserved == 0
        plan_prompt, = prompts(server, "You are planning")
        coder_prompt, = prompts(server, "candidate 1 of 1 in round 1")
    assert solved.returncode == 0, solved.stderr[-3000:]
    result = last_json(solved)
    assert (result["best_id"], result["status"], result["attempts"], result["stop_reason"]) == (
        "r1c0", "correct", 2, "correct_unmeasured")
    assert result["start"] == str(start)
    assert "r0c0" in solved.stderr  # the live view lists attempt 0 like any other

    run_dir = Path(result["run_dir"])
    assert (run_dir / "kernels" / "r0c0.py").read_text() == WRONG_KERNEL  # exactly the given kernel
    record = json.loads((run_dir / "result.json").read_text())
    first, second = record["attempt_list"]
    assert (first["id"], first["round"], first["code_sha256"]) == ("r0c0", 0, resolve_start(start, "relu").sha256)
    assert first["verdict"]["status"] == "incorrect" and first["verdict"]["device"] == "cpu"  # the real verifier's
    assert (second["id"], second["verdict"]["status"]) == ("r1c0", "correct")
    report = (run_dir / "report.md").read_text()
    assert f"- started from: {start}" in report and "| r0c0 | incorrect |" in report

    # The planner plans changes to the start kernel; the coder gets it as the kernel to fix, with the
    # verifier's feedback and the critique of round 0 (no "best so far": it is not correct).
    assert WRONG_KERNEL in plan_prompt
    assert f"The kernel this run starts from (r0c0: incorrect: {first['verdict']['reason']}). Fix it:\n```python\n" \
           f"{WRONG_KERNEL}\n```" in coder_prompt
    assert "What the verifier said:" in coder_prompt and "What to do next" in coder_prompt
    assert "The best kernel so far" not in coder_prompt and "Your previous attempt" not in coder_prompt

    shown = kernelloop("runs", "show", "warm", "--workspace", workspace)
    assert shown.returncode == 0 and f"started from: {start}" in shown.stdout
    shown_json = last_json(kernelloop("runs", "show", "warm", "--workspace", workspace, "--json"))
    assert [a["id"] for a in shown_json["attempts"]] == ["r0c0", "r1c0"]
    assert shown_json["summary"]["start"] == str(start)


class SpeedByMarker(ScriptedVerifier):
    """ScriptedVerifier, with the speedup a kernel's marker comment names (`# speed 1.1`)."""

    def verify(self, candidate, problem, time_left_s=None) -> Verdict:
        verdict = super().verify(candidate, problem)
        marker = next((line for line in candidate.source.splitlines() if line.startswith("# speed ")), None)
        if verdict.status is Status.correct and marker:
            speed = float(marker.split()[-1])
            verdict = verdict.model_copy(update={"speedup": speed, "speedups": {"eager": speed}})
        return verdict


def test_a_correct_start_is_every_coders_best_so_far_until_a_faster_kernel_beats_it(tmp_path):
    start = FIXED_KERNEL + "\n# speed 1.1"
    faster = FIXED_KERNEL + "\n# speed 1.6"
    script = [Reply(PLAN_REPLY, reasoning="memory-bound", when=asks("You are planning")),
              Reply(coder_reply(faster), reasoning="fewer launches", when=asks("candidate 1 of 2 in round 1")),
              Reply(coder_reply(FIXED_KERNEL + "\n# speed 0.9\n"), when=asks("candidate 2 of 2 in round 1"))]
    verifier = SpeedByMarker()
    with FakeOpenAIServer(script) as server:
        result = solve(RELU_PROBLEM, start=start_file(tmp_path, start), base_url=server.url, model=server.model,
                       verifier=verifier, workspace=tmp_path, candidates=2, target_speedup=1.5, thread_id="beat",
                       analyze=lambda problem: None)
        assert server.unserved == 0
        coder_prompts = prompts(server, "in round 1")
    assert verifier.calls[0] == "r0c0"  # verified first, before any coder's kernel
    assert (result.best_id, result.best_speedup, result.stop_reason, result.attempts) == ("r1c0", 1.6, "target_met", 3)
    best_so_far = f"The best kernel so far (r0c0: correct, 1.1x over eager). Beat it:\n```python\n{start}\n```"
    assert len(coder_prompts) == 2 and all(best_so_far in prompt for prompt in coder_prompts)
    assert not any("Your previous attempt" in p or "The other attempts" in p for p in coder_prompts)
    assert "# speed 1.6" in Path(result.best_kernel).read_text()


def start_file(folder: Path, text: str) -> Path:
    path = folder / "start.py"
    path.write_text(text)
    return path


def test_a_start_that_already_meets_the_target_ends_the_run_at_attempt_0(tmp_path):
    client = ScriptedChatClient()
    result = solve(RELU_PROBLEM, start=start_file(tmp_path, FIXED_KERNEL), chat_client=client,
                   verifier=ScriptedVerifier(speedup=1.5), workspace=tmp_path, thread_id="done",
                   analyze=lambda problem: None)
    assert (result.best_id, result.stop_reason, result.attempts, result.rounds) == ("r0c0", "target_met", 1, 0)
    assert client.calls == ["planner/plan"]  # no coder was asked


def test_the_start_is_remembered_when_a_run_stopped_before_verifying_it_is_resumed(tmp_path):
    kernel = start_file(tmp_path, WRONG_KERNEL)

    def stop_after_planning(event) -> None:
        if event.kind == "planned":
            raise RunCancelled("stop here")

    with pytest.raises(RunCancelled):
        solve(RELU_PROBLEM, start=kernel, chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(),
              workspace=tmp_path, thread_id="later", analyze=lambda p: None, on_event=stop_after_planning)
    kernel.unlink()  # resume reads the thread, never the file
    client = ScriptedChatClient()
    result = resume("later", chat_client=client, verifier=ScriptedVerifier(), workspace=tmp_path,
                    analyze=lambda p: None)
    with open_checkpointer(None, tmp_path) as saver:
        values = build_graph(saver).get_state({"configurable": {"thread_id": "later"}}).values
    first = values["attempts"][0]
    assert (first["id"], first["code"], first["verdict"]["status"]) == ("r0c0", WRONG_KERNEL, "incorrect")
    assert result.start == str(tmp_path / "start.py") and result.status == "correct"
    assert "The kernel this run starts from (r0c0: incorrect" in client.prompts["coder/r1c0"]


def test_solve_start_auto_warns_once_and_starts_from_scratch_where_there_is_no_starter(tmp_path):
    with pytest.warns(UserWarning, match="no starter kernel for relu"):
        result = solve(RELU_PROBLEM, start="auto", chat_client=ScriptedChatClient(), verifier=ScriptedVerifier(),
                       workspace=tmp_path, candidates=1, thread_id="scratch", analyze=lambda p: None)
    assert result.start.endswith("starting from scratch") and result.best_id == "r2c0"  # no attempt 0


def round_zero_state(start: Attempt) -> dict:
    critique = critique_round([start], start)
    return {"problem": {"name": "relu", "path": "relu.py", "source": "class Model: ..."},
            "settings": RunSettings(candidates=3).model_dump(), "plan": Plan(text="one kernel").model_dump(mode="json"),
            "round": 0, "phase": "critiqued", "attempts": [start.model_dump(mode="json")],
            "best_id": rank_best([start]).id, "critiques": [critique.model_dump(mode="json")], "hints": []}


def test_after_round_0_every_coder_fixes_an_incorrect_start_with_its_critique():
    wrong = Verdict(status=Status.incorrect, reason="mismatch", rel_err=1.0, feedback="negatives unchanged")
    start = Attempt(id="r0c0", round=0, index=0, backend="triton", code=WRONG_KERNEL, verdict=wrong)
    briefs = routing.coder_briefs(round_zero_state(start))
    fixes = Critique.model_validate(round_zero_state(start)["critiques"][0]).per_attempt["r0c0"]
    assert [b.attempt_id for b in briefs] == ["r1c0", "r1c1", "r1c2"]
    assert all(b.previous and b.previous.id == "r0c0" and b.previous.code == WRONG_KERNEL for b in briefs)
    assert all(b.best is None and b.others == [] and fixes[0] in b.critique for b in briefs)
