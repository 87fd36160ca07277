"""The bench report of a problem with workloads: a per-workload table (status, speed, times, the
slowest named) beside the per-problem row, whose speedup is their geometric mean; a suite without
workloads gets no such table, and records written before workloads still read."""

from __future__ import annotations

from pathlib import Path

from kernelloop.evals import metrics
from kernelloop.evals.records import BenchRecord, Mode, RunEnvironment
from kernelloop.evals.report import render_markdown
from kernelloop.records import Status, WorkloadResult

ENV = RunEnvironment(device="cuda:0", gpu_name="Test GPU", torch_version="2.x", kernelloop_version="0")


def record(problem: str, status: Status, eager: float | None = None, **extra) -> BenchRecord:
    return BenchRecord(suite="s", mode=Mode.candidates, job_key=f"k-{problem}", problem=problem, problem_path="p",
                       problem_sha256="0", attempt=0, status=status, reason=str(status.value),
                       speedups={"eager": eager} if eager else {}, elapsed_s=1.0, environment=ENV, **extra)


def test_a_problem_with_workloads_gets_a_per_workload_table():
    workloads = {"cols_128": WorkloadResult(name="cols_128", trials=3, speedup=2.25, speedups={"eager": 2.25},
                                            times_ms={"candidate": 0.01, "eager": 0.0225}),
                 "cols_3000": WorkloadResult(name="cols_3000", trials=3, speedup=1.0, speedups={"eager": 1.0},
                                             times_ms={"candidate": 0.05, "eager": 0.05})}
    rows = [record("rowsum_workloads", Status.correct, 1.5, workloads=workloads, slowest_workload="cols_3000"),
            record("relu", Status.correct, 1.2)]
    summary = metrics.summarize("s", Mode.candidates, ["rowsum_workloads", "relu"], rows)
    text = render_markdown(summary, {}, [], Path("."))
    assert "## Per workload" in text
    assert "| rowsum_workloads | cols_128 | correct | 2.25x | 0.0100 | 0.0225 |  |" in text
    assert "| rowsum_workloads | cols_3000 | correct | 1.00x | 0.0500 | 0.0500 | slowest |" in text
    assert "| relu |" not in text.split("## Per workload")[1]  # only problems with workloads


def test_a_wrong_workload_shows_its_reason_and_old_records_read():
    wrong = {"cols_128": WorkloadResult(name="cols_128", trials=3),
             "cols_3000": WorkloadResult(name="cols_3000", status=Status.incorrect, trials=3, reason="max_abs_err 40")}
    summary = metrics.summarize("s", Mode.candidates, ["w"], [record("w", Status.incorrect, workloads=wrong)])
    text = render_markdown(summary, {}, [], Path("."))
    assert "| w | cols_3000 | incorrect | - | - | - | max_abs_err 40 |" in text
    old = record("relu", Status.correct, 1.2).model_dump(mode="json")
    assert "workloads" not in old and "slowest_workload" not in old  # written only where a problem has workloads
    assert BenchRecord.model_validate(old).workloads == {}
    assert "workloads" in record("w", Status.incorrect, workloads=wrong).model_dump(mode="json")
    plain = metrics.summarize("s", Mode.candidates, ["relu"], [BenchRecord.model_validate(old)])
    assert "Per workload" not in render_markdown(plain, {}, [], Path("."))
