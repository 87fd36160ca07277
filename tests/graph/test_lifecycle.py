"""A run's lifecycle as one state machine: start, interrupt, resume, replay, fork, walked across interrupts at
every checkpoint of the shipped recorded run. Each resumed run must end as the uninterrupted one did.

Interrupts land at deterministic points (after the Nth checkpoint the run reports), never after N seconds. The
verifier is a stand-in (right iff the bias is indexed by column), so the graph, checkpoints, recordings and
model sources run for real in well under a minute; tests/graph/test_lifecycle_cli.py runs the real CLI.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelloop.graph.rundir import read_recording, write_recording
from kernelloop.serve.runs import RecordingEnded, RecordingMismatch, fork, replay, resume, solve
from tests.fakes.openai_server import FakeOpenAIServer, Reply
from tests.graph.test_example import EXAMPLE, ColumnBiasVerifier

PROBLEM, RECORDING = EXAMPLE / "scale_bias_relu.py", EXAMPLE / "turns.jsonl"
COMMON = {"verifier": ColumnBiasVerifier(), "analyze": lambda problem: None}


def fingerprint(result, workspace: Path) -> tuple:
    """What must not depend on where the run was interrupted: the ending and every attempt's code and verdict."""
    import json

    record = json.loads((Path(result.outputs_dir) / "result.json").read_text())
    return (result.status, result.best_id, result.stop_reason, result.attempts,
            tuple((a["id"], (a["verdict"] or {}).get("status"), a["code_sha256"]) for a in record["attempt_list"]))


class StopAfter:
    """on_progress that raises KeyboardInterrupt (Ctrl-C) once the run has reported n checkpoints."""

    def __init__(self, n: int):
        self.n, self.seen = n, 0

    def __call__(self, summary) -> None:
        self.seen += 1
        if self.seen == self.n:
            raise KeyboardInterrupt


def start(workspace: Path, thread: str, stop_after: int | None = None, recording: Path = RECORDING):
    progress = StopAfter(stop_after) if stop_after else None
    return solve(PROBLEM, recorded=recording, candidates=2, device="cpu", workspace=workspace, thread_id=thread,
                 on_progress=progress, **COMMON)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workspace = tmp_path_factory.mktemp("whole")
    counter = StopAfter(10_000)
    result = solve(PROBLEM, recorded=RECORDING, candidates=2, device="cpu", workspace=workspace, thread_id="whole",
                   on_progress=counter, **COMMON)
    return fingerprint(result, workspace), counter.seen


def interrupt_points(n: int) -> list[int]:
    return list(range(1, n))  # every checkpoint but the last (after it there is nothing left to resume)


def test_every_interrupt_point_resumes_to_the_uninterrupted_run(tmp_path, uninterrupted):
    """Ctrl-C after checkpoint N, then the printed resume (no model flags: the run's recording is reused)."""
    whole, checkpoints = uninterrupted
    assert checkpoints >= 6
    for n in interrupt_points(checkpoints):
        with pytest.raises(KeyboardInterrupt):
            start(tmp_path, f"t{n}", stop_after=n)
        assert fingerprint(resume(f"t{n}", workspace=tmp_path, **COMMON), tmp_path) == whole, n


@pytest.mark.parametrize("first,second", [(1, 2), (2, 3), (3, 1)])
def test_an_interrupted_resume_resumes_again(tmp_path, uninterrupted, first, second):
    whole, _ = uninterrupted
    with pytest.raises(KeyboardInterrupt):
        start(tmp_path, "t", stop_after=first)
    with pytest.raises(KeyboardInterrupt):
        resume("t", workspace=tmp_path, on_progress=StopAfter(second), **COMMON)
    assert fingerprint(resume("t", workspace=tmp_path, **COMMON), tmp_path) == whole


def test_resume_takes_another_recording_and_replay_reruns_from_the_recording(tmp_path, uninterrupted):
    whole, _ = uninterrupted
    copy = tmp_path / "copy.jsonl"
    copy.write_text(RECORDING.read_text())
    with pytest.raises(KeyboardInterrupt):
        start(tmp_path, "t", stop_after=2)
    assert fingerprint(resume("t", workspace=tmp_path, recorded=copy, **COMMON), tmp_path) == whole
    assert fingerprint(replay("t", workspace=tmp_path, recorded=True, **COMMON), tmp_path) == whole


def test_mixed_replay_serves_the_recording_first_then_the_live_model(tmp_path, uninterrupted):
    """A recording that ends after round 1: its turns first, then the live (R1-like) server for round 2."""
    whole, _ = uninterrupted
    turns = read_recording(RECORDING)
    short = tmp_path / "round1.jsonl"
    write_recording(short, [t for t in turns if not t.key.startswith("coder/r2")])
    round_two = {t.key: t.turn.content for t in turns if t.key.startswith("coder/r2")}
    with pytest.raises(RecordingEnded) as ended:
        start(tmp_path, "t", recording=short)
    assert ended.value.key.startswith("coder/r2") and "\n" not in str(ended.value)
    script = [Reply(round_two["coder/r2c0"], when=lambda m: "candidate 1 of 2 in round 2" in m[-1]["content"]),
              Reply(round_two["coder/r2c1"], when=lambda m: "candidate 2 of 2 in round 2" in m[-1]["content"])]
    with FakeOpenAIServer(script) as server:
        result = resume("t", workspace=tmp_path, base_url=server.url, model=server.model, **COMMON)
        assert len(server.chat_requests) == 2  # only round 2 was asked of the live model
    assert fingerprint(result, tmp_path)[:2] == whole[:2]


def test_a_recording_that_runs_out_can_stop_there_and_stays_resumable(tmp_path, uninterrupted):
    whole, _ = uninterrupted
    turns = read_recording(RECORDING)
    short = tmp_path / "round1.jsonl"
    write_recording(short, [t for t in turns if not t.key.startswith("coder/r2")])
    stopped = solve(PROBLEM, recorded=short, candidates=2, device="cpu", workspace=tmp_path, thread_id="t",
                    stop_at_recording_end=True, **COMMON)
    assert stopped.run_status == "stopped" and stopped.stop_reason.startswith("recording_end")
    assert fingerprint(resume("t", workspace=tmp_path, recorded=RECORDING, **COMMON), tmp_path) == whole


def test_a_fork_from_every_forkable_checkpoint_writes_its_own_files(tmp_path, uninterrupted):
    import json

    from kernelloop.graph.build import build_graph
    from kernelloop.graph.checkpoint import open_checkpointer

    start(tmp_path, "t")
    parent = {name: (tmp_path / "runs" / "t" / name).read_text() for name in ("report.md", "result.json")}
    with open_checkpointer(None, tmp_path) as saver:
        graph = build_graph(saver)
        forkable = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(
            {"configurable": {"thread_id": "t"}}) if s.next and s.parent_config is not None and
            s.metadata.get("source") != "input"]
    assert forkable
    for checkpoint in forkable:
        try:
            result = fork("t", checkpoint, changes={"target_speedup": 2.0}, workspace=tmp_path, **COMMON)
        except ValueError as exc:  # a checkpoint made by parallel coders can't be forked: one line says so
            assert "can't be forked" in str(exc)
            continue
        assert result.branch and Path(result.outputs_dir) == tmp_path / "runs" / "t" / "branches" / result.branch
        assert json.loads((Path(result.outputs_dir) / "result.json").read_text())["target_speedup"] == 2.0
    assert {name: (tmp_path / "runs" / "t" / name).read_text() for name in parent} == parent


def test_a_recording_of_another_problem_is_refused_in_one_line(tmp_path):
    from kernelloop.graph.rundir import RecordingHeader

    other = tmp_path / "other.jsonl"
    write_recording(other, read_recording(RECORDING), RecordingHeader(problem="softmax", problem_sha256="0" * 64))
    with pytest.raises(RecordingMismatch) as refused:
        start(tmp_path, "t", recording=other)
    assert "softmax" in str(refused.value) and "scale_bias_relu" in str(refused.value)
    assert "\n" not in str(refused.value)
