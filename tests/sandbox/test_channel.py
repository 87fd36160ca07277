"""The job's channel and what the parent reads: a job can't restart its clock, flood the relay,
confuse the parser, or swap the files the parent opens."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from kernelloop.sandbox.runner import Zygote, new_job_dir
from kernelloop.sandbox.safe_io import JobDir, UnsafeFileError, open_bounded, read_tail

PROBE_MODULE = "tests.sandbox.channel_probe"


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    work = tmp_path_factory.mktemp("channel")
    with_zygote = Zygote(PROBE_MODULE, "cpu", work / "verifier" / "cpu", hide=[work], standby=False, per_job_cache=True)
    yield with_zygote
    with_zygote.close()


def start(zygote: Zygote, behaviour: str, limit_s: float = 10.0):
    job_dir = new_job_dir(zygote.work_dir / "jobs", f"{behaviour}-")
    return zygote.start({"kind": "probe", "behaviour": behaviour}, job_dir, limit_s, limit_s, phases=("trials", "timing"))


def test_messages_go_both_ways_and_the_result_comes_last(zygote):
    session = start(zygote, "echo")
    for number in range(3):
        assert session.send({"ping": number})
        assert session.receive() == {"echo": {"ping": number}}
    assert session.phase == "trials"
    session.send({"done": {}})
    outcome = session.finish(wait_s=10)
    assert outcome.result["echoed"] is True and not outcome.timed_out


def test_phases_only_move_forward_so_a_job_cannot_restart_its_clock(zygote):
    session = start(zygote, "backward_phases", limit_s=1.5)
    assert session.receive() is None
    outcome = session.finish()
    assert outcome.timed_out and outcome.phase == "trials"
    # one phase limit after the move to "trials", and under the hard cap of both limits together
    assert outcome.elapsed_s < 3.0 + 1.0


def test_a_job_cannot_jump_to_a_later_phase_only_the_parent_moves_it_on(zygote):
    jumper = start(zygote, "jump", limit_s=1.0)
    assert jumper.receive() is None
    assert jumper.finish().timed_out and jumper.phase == "compile"
    session = start(zygote, "echo")
    session.send({"phase": "timing"})  # echoed back up as a message: not a phase mark
    assert session.receive() == {"echo": {"phase": "timing"}} and session.phase == "trials"
    session.advance("timing")
    session.advance("trials")  # backward: ignored
    assert session.phase == "timing"
    session.send({"done": {}})
    assert session.finish(wait_s=10).result["echoed"] is True


def test_a_flood_on_the_channel_kills_the_job_not_the_zygote(zygote):
    session = start(zygote, "flood")
    assert session.receive() is None
    outcome = session.finish()
    assert not outcome.timed_out and outcome.exit_code is not None and outcome.exit_code < 0
    assert zygote.alive()
    follow_up = start(zygote, "garbage")
    assert follow_up.receive() is None  # nothing but garbage and its result
    assert follow_up.finish().result == {"after": "garbage"}


@pytest.mark.parametrize("behaviour", ["deep_at_done", "deep_now"])
def test_a_line_nested_past_jsons_recursion_ends_that_job_and_the_worker_takes_the_next(zygote, behaviour):
    """Issue 35 b: a helper thread answered "done" with 4,000 `[`; finish() parsed it unguarded, the
    job was never killed and every later job of the worker failed. Now the line is refused by its
    depth, the job is killed with a note, and the next job runs."""
    session = start(zygote, behaviour)
    if behaviour == "deep_at_done":
        session.send({"done": {}})
        outcome = session.finish(wait_s=10)
    else:
        assert session.receive() is None
        outcome = session.finish()
    assert not outcome.timed_out and outcome.result is None and session.refused is not None
    assert any("refused to read" in note and "nested deeper" in note for note in outcome.notes), outcome.notes
    assert zygote.alive()
    follow_up = start(zygote, "echo")
    follow_up.send({"done": {}})
    assert follow_up.finish(wait_s=10).result == {"echoed": True}


class _Clock:
    """The runner's `time`, with seconds the test adds: a walk that "takes" 100 s, on no real clock."""

    def __init__(self):
        self.added = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.added

    def __getattr__(self, name):
        return getattr(time, name)


def test_the_parents_walks_of_a_job_count_against_its_limit(zygote, monkeypatch):
    """Issue 35 c: the disk budget's walks were not counted, so a 75 s limit ran 388 s while the
    verdict said 75. A walk that takes 100 s (by the clock the runner reads) ends a 10 s job at
    once; on main it was walked every half second until ten real seconds had passed."""
    from kernelloop.sandbox import runner
    from kernelloop.tools.verify.verdicts import ended_early

    session = start(zygote, "jump", limit_s=10.0)
    session.disk_budget_bytes = 1 << 30
    clock, walks = _Clock(), []

    def slow_walk(path, max_entries):
        walks.append(path)
        clock.added += 100.0
        return 0

    monkeypatch.setattr(runner, "time", clock)
    monkeypatch.setattr(runner, "dir_usage", slow_walk)
    monkeypatch.setattr(runner.JobSession, "_held_unlinked_bytes", lambda self: 0)
    assert session.receive() is None
    outcome = session.finish()
    assert outcome.timed_out and len(walks) == 1
    verdict = ended_early(outcome, "cpu", 10.0, 10.0)
    assert "timed out after 10s" in verdict.reason and f"{outcome.elapsed_s:.0f}s after the job started" in verdict.reason
    assert outcome.elapsed_s >= 100  # the verdict states the time the job really had


def test_a_walk_that_costs_nothing_leaves_the_job_its_limit(zygote, monkeypatch):
    """The honest twin: walks of no cost never end an echoing job early."""
    from kernelloop.sandbox import runner

    session = start(zygote, "echo")
    session.disk_budget_bytes = 1 << 30
    walks = []
    monkeypatch.setattr(runner, "dir_usage", lambda path, max_entries: walks.append(path) or 0)
    for number in range(3):
        assert session.send({"ping": number})
        assert session.receive() == {"echo": {"ping": number}}
    session.send({"done": {}})
    outcome = session.finish(wait_s=10)
    assert outcome.result == {"echoed": True} and not outcome.timed_out and walks


def test_lines_that_are_not_json_objects_are_dropped(zygote):
    session = start(zygote, "garbage")
    assert session.receive() is None
    outcome = session.finish()
    assert outcome.result == {"after": "garbage"}  # {"result": 5} was no result: not an object


def test_a_job_inherits_no_pipe_of_the_zygote_but_its_channel(zygote):
    """A pipe opened in the zygote (its protocol, a library's) would be shared by every job after it."""
    session = start(zygote, "fds")
    assert session.receive() is None
    report = session.finish().result
    assert sorted(report["pipes"]) == sorted(report["channel"]), report


def test_each_job_has_its_own_compile_cache(zygote):
    first = start(zygote, "cache")
    assert first.receive() is None
    planted = first.finish().result
    second = start(zygote, "cache")
    assert second.receive() is None
    seen = second.finish().result
    assert planted["found"] is False and seen["found"] is False, "a job saw what an earlier one left in its cache"
    assert planted["home"] != seen["home"]


# --------------------------------------------------------------------------- safe_io


def test_a_symlink_is_never_followed(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("sk-SECRET")
    link = tmp_path / "stderr.txt"
    link.symlink_to(secret)
    assert "sk-SECRET" not in read_tail(link, 100) and "not a regular file" in read_tail(link, 100)
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        open_bounded(link, 100).close()


def test_a_named_pipe_never_blocks_the_reader(tmp_path):
    fifo = tmp_path / "trials.sets"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFileError, match="named pipe"):
        open_bounded(fifo, 100).close()
    assert "named pipe" in read_tail(fifo, 100)


def test_a_directory_or_an_oversized_file_is_refused(tmp_path):
    (tmp_path / "result.json").mkdir()
    with pytest.raises(UnsafeFileError, match="directory"):
        open_bounded(tmp_path / "result.json", 100).close()
    big = tmp_path / "outputs.pt"
    big.write_bytes(b"x" * 1000)
    with pytest.raises(UnsafeFileError, match="over the 999"):
        open_bounded(big, 999)
    with open_bounded(big, 1000) as handle:
        assert handle.read() == b"x" * 1000


def test_a_job_dir_renamed_and_swapped_for_a_symlink_moves_nothing_the_parent_reads(tmp_path):
    job_dir, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    job_dir.mkdir()
    elsewhere.mkdir()
    (job_dir / "stderr.txt").write_text("the job's own")
    (elsewhere / "stderr.txt").write_text("sk-SECRET from a dir the sandbox can't see")
    held = JobDir(job_dir)
    job_dir.rename(tmp_path / "moved")
    job_dir.symlink_to(elsewhere)
    assert held.read_tail("stderr.txt", 100) == "the job's own"
    (tmp_path / "moved" / "fresh_inputs.sets").mkdir()  # in the way of a hand-over
    given = tmp_path / "given"
    given.write_text("inputs")
    with pytest.raises(UnsafeFileError, match="could not hand over"):
        held.put(given, "fresh_inputs.sets")
    held.put(given, "inputs.sets")
    assert (tmp_path / "moved" / "inputs.sets").read_text() == "inputs" and not (elsewhere / "inputs.sets").exists()
    held.close()


SHM = Path("/dev/shm")


@pytest.mark.skipif(not SHM.is_dir() or SHM.stat().st_dev == Path(tempfile.gettempdir()).stat().st_dev,
                    reason="no second filesystem here to hand over from")
def test_a_hand_over_across_filesystems_is_a_copy_renamed_into_place(tmp_path):
    source = SHM / f"kernelloop-test-{os.getpid()}.sets"
    source.write_bytes(b"inputs")
    with JobDir(tmp_path) as held:
        assert held.put(source, "inputs.sets") == tmp_path / "inputs.sets"
    assert (tmp_path / "inputs.sets").read_bytes() == b"inputs" and not source.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["inputs.sets"]  # no staged copy left behind


def test_a_missing_file_reads_as_nothing_to_the_tail_and_raises_for_data(tmp_path):
    assert read_tail(tmp_path / "stdout.txt", 100) == ""
    with pytest.raises(FileNotFoundError):
        open_bounded(tmp_path / "outputs.pt", 100).close()


def test_the_tail_of_a_large_capture_says_what_was_cut(tmp_path):
    capture = tmp_path / "stdout.txt"
    capture.write_text("a" * 5000 + "END")
    tail = read_tail(capture, 100)
    assert tail.endswith("END") and "bytes cut" in tail and len(tail) < 200
