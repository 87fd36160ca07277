"""Floods: whatever a candidate prints, raises or writes, the parent's memory and time stay bounded.

The review's case: a forward that prints one 300 MB line with no newline stalled the parent for
304 s (the run phase's limit, on an H100 where the timing loop calls forward thousands of times).
The parent reads only bounded tails of the streams; the watch on their size (output_watch.py)
kills a job as it passes 256 MiB, so a flood is a verdict in seconds. The bounds below are hang
and leak detectors, generous for a slow shared machine, not benchmarks: the phase limits are set
to 120 s so that a flood left to run would fail the time bound.
"""

from __future__ import annotations

import resource
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status
from kernelloop.tools.verify.output_watch import OutputWatch, flooded

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FLOODS = ["print_flood_line", "print_flood_forever", "stderr_flood", "giant_exception"]
LIMIT_S = 120.0  # each phase's limit: a flood that ran to it would take at least this long
TIME_BOUND_S = 60.0
MEMORY_BOUND_BYTES = 200 << 20


@pytest.fixture(scope="module")
def verifier(tmp_path_factory) -> Iterator:
    """Static rules off: the stderr flood imports sys, which the lint would stop before it runs."""
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("floods"), time_it=False, static_checks=False,
                  compile_timeout_s=LIMIT_S, run_timeout_s=LIMIT_S) as shared:
        yield shared


@pytest.mark.parametrize("name", FLOODS)
def test_a_flood_is_a_verdict_in_seconds_with_the_parents_memory_bounded(verifier, name):
    problem = Problem.from_file(FIXTURES / "problems" / "relu.py")
    candidate = Candidate.from_file(FIXTURES / "cheats" / f"{name}.py")
    verifier.server(problem)  # the reference and both workers up first: their memory is not the flood's
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    tracemalloc.start()
    started = time.monotonic()
    try:
        verdict = verifier.verify(candidate, problem)
        elapsed = time.monotonic() - started
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - rss_before
    assert verdict.status is Status.runtime_error and verdict.code is Code.output_flood, verdict.reason
    assert elapsed < TIME_BOUND_S, f"{elapsed:.0f} s"
    assert python_peak < MEMORY_BOUND_BYTES, f"the parent's Python heap peaked at {python_peak >> 20} MiB"
    assert rss_growth < MEMORY_BOUND_BYTES, f"the parent's peak RSS grew {rss_growth >> 20} MiB"
    text = "".join((verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail))
    assert len(text) < 64_000 and "\n" not in verdict.reason


def test_the_same_verifier_judges_an_honest_kernel_after_the_floods(verifier):
    verdict = verifier.verify(Candidate.from_file(FIXTURES / "honest" / "relu_triton.py"),
                              Problem.from_file(FIXTURES / "problems" / "relu.py"))
    assert verdict.status is Status.correct, verdict.reason


def test_the_watch_kills_once_a_stream_passes_its_limit(tmp_path):
    import os

    killed: list[float] = []
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        watch = OutputWatch(fd, lambda: killed.append(time.monotonic()), limit=1000, poll_s=0.01)
        (tmp_path / "stderr.txt").write_bytes(b"e" * 999)
        time.sleep(0.1)
        assert not killed
        (tmp_path / "stdout.txt").symlink_to("/dev/zero")  # a link is never followed: not a flood
        (tmp_path / "stderr.txt").write_bytes(b"e" * 1001)
        deadline = time.monotonic() + 10
        while not killed and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(killed) == 1
        assert watch.found() == "stderr: 1,001 bytes"
        assert flooded(fd, limit=2000) is None
    finally:
        os.close(fd)


def test_a_timed_wait_walks_the_job_dir_only_while_no_message_has_come(tmp_path, monkeypatch):
    """The disk budget's walk (milliseconds) stays out of the parent's clock around a timed request:
    a message already there is returned without it; a wait with no message still runs it."""
    import json
    from types import SimpleNamespace

    from kernelloop.sandbox import runner

    walks: list[bool] = []
    queue: list = []
    zygote = SimpleNamespace(_read_message=lambda timeout_s: queue.pop(0) if queue else None, alive=lambda: True)
    held = SimpleNamespace(path=tmp_path)
    session = runner.JobSession(zygote, 1, held, 0.0, 10.0, 10.0)
    session.disk_budget_bytes = 1 << 30
    monkeypatch.setattr(runner, "dir_usage", lambda path, most: walks.append(True) or 0)
    held: list[bool] = []  # the held-file count (held_files.py) goes with the walk
    monkeypatch.setattr(session, "_held_unlinked_bytes", lambda: held.append(True) or 0)
    queue.append({"msg": json.dumps({"block": {}})})
    assert session.receive(timed=True) == {"block": {}} and walks == []
    queue.extend([None, {"msg": json.dumps({"back": {}})}])
    assert session.receive(timed=True) == {"back": {}} and walks == [True]  # checked while it waited
    session._disk_checked_at = 0.0
    queue.append({"msg": json.dumps({"pick": {}})})
    assert session.receive() == {"pick": {}} and walks == [True, True]  # untimed: checked as before
    assert held == walks
