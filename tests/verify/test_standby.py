"""The zygote's standby child: forked and prepared ahead of the job, one fresh process per job,
and a prepare() that crashes costs the job nothing but the time it saved."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelloop.sandbox.runner import Zygote

MODULE = "tests.verify.standby_probe"


@pytest.fixture
def work_dir(tmp_path) -> Path:
    return tmp_path / "verifier" / "cpu"


def run(zygote: Zygote, work_dir: Path, name: str) -> dict:
    outcome = zygote.run({"kind": "probe"}, work_dir / "jobs" / name, 30, 30)
    assert outcome.exit_code == 0, outcome.stderr_tail
    return outcome.result


def test_the_child_is_prepared_before_its_job_arrives(work_dir):
    zygote = Zygote(MODULE, "cpu", work_dir, isolation="plain")
    try:
        time.sleep(0.5)  # idle: the standby prepares meanwhile
        sent_at = time.time()
        first = run(zygote, work_dir, "first")
        time.sleep(0.5)
        sent_again_at = time.time()
        second = run(zygote, work_dir, "second")
    finally:
        zygote.close()
    for result, sent in ((first, sent_at), (second, sent_again_at)):
        assert result["prepared"]["pid"] == result["pid"]  # prepared in the very process that ran the job
        assert result["prepared"]["at"] < sent  # ... and before the job was sent
    # each job still gets a fresh process (each is pid 1 of a namespace of its own, so not told by pid)
    assert first["prepared"]["token"] != second["prepared"]["token"]


def test_a_prepare_that_crashes_leaves_the_job_to_an_unprepared_child(work_dir):
    work_dir.mkdir(parents=True)
    (work_dir / "prepare_mode").write_text("crash")
    zygote = Zygote(MODULE, "cpu", work_dir, isolation="plain")
    try:
        time.sleep(0.3)  # the standby has crashed by now
        results = [run(zygote, work_dir, f"job{i}") for i in range(2)]
        assert zygote.alive()
    finally:
        zygote.close()
    assert all(r["prepared"] == {} for r in results)  # ran without prepare, and ran


def test_without_standby_the_child_is_forked_when_its_job_comes(work_dir):
    zygote = Zygote(MODULE, "cpu", work_dir, isolation="plain", standby=False)
    try:
        time.sleep(0.3)
        sent_at = time.time()
        result = run(zygote, work_dir, "job")
    finally:
        zygote.close()
    assert result["prepared"]["pid"] == result["pid"] and result["prepared"]["at"] >= sent_at
