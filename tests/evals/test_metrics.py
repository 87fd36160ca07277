"""KernelBench metrics against values computed by hand."""

from __future__ import annotations

import math
import types

import pytest

from kernelloop.evals import metrics
from kernelloop.evals.metrics import Outcome
from kernelloop.evals.records import BenchRecord, Mode, RunEnvironment
from kernelloop.records import Status

# Six problems: speedups over eager, None where not measured.
#   A correct 2.5 | B correct 1.2 | C correct 0.8 | D incorrect 3.0 | E correct, not timed | F correct 1.0
SIX = [Outcome(True, 2.5), Outcome(True, 1.2), Outcome(True, 0.8), Outcome(False, 3.0),
       Outcome(True, None), Outcome(True, 1.0)]


def test_correctness_rate_counts_correct_over_all_problems():
    assert metrics.correctness_rate(SIX) == pytest.approx(5 / 6)


def test_fast_0_is_the_correctness_rate_even_without_timings():
    assert metrics.fast_p(SIX, 0) == pytest.approx(5 / 6)
    assert metrics.fast_p([Outcome(True, None), Outcome(False, None)], 0) == pytest.approx(0.5)


@pytest.mark.parametrize(("p", "expected"), [(1.0, 2 / 6), (1.5, 1 / 6), (2.0, 1 / 6), (3.0, 0.0)])
def test_fast_p_needs_correct_and_strictly_faster(p, expected):
    # F (exactly 1.0) is not > 1; D (3.0) is incorrect; E has no speedup: none of them count.
    assert metrics.fast_p(SIX, p) == pytest.approx(expected)


def test_geomean_is_over_correct_problems_with_a_speedup():
    # A, B, C, F: (2.5 * 1.2 * 0.8 * 1.0) ** (1/4) = 2.4 ** 0.25
    assert metrics.geomean_speedup(SIX) == pytest.approx(2.4 ** 0.25)
    assert metrics.geomean_speedup(SIX) == pytest.approx(1.244666, rel=1e-6)


def test_geomean_is_none_when_nothing_correct_was_timed():
    assert metrics.geomean_speedup([Outcome(True, None), Outcome(False, 2.0)]) is None


def test_empty_runs_and_bad_speedups_are_errors():
    with pytest.raises(ValueError, match="no problems"):
        metrics.fast_p([], 1.0)
    with pytest.raises(ValueError, match="positive"):
        metrics.geomean_speedup([Outcome(True, 0.0)])


def test_baseline_metrics_keys_and_counts():
    result = metrics.baseline_metrics(SIX)
    assert result.fast_p == pytest.approx({"0": 5 / 6, "1": 2 / 6, "1.5": 1 / 6, "2": 1 / 6})
    assert result.timed == 4


def test_solve_rate_curve_by_hand():
    curve = metrics.solve_rate_curve([10.0, None, 30.0, 5.0], 4, [0, 5, 10, 29, 30, 100])
    assert curve == pytest.approx([0.0, 0.25, 0.5, 0.5, 0.75, 0.75])


ENV = RunEnvironment(device="cuda:0", gpu_name="Test GPU", torch_version="2.x", kernelloop_version="0")


def record(problem: str, attempt: int, status: Status | None, elapsed_s: float, **speedups: float) -> BenchRecord:
    return BenchRecord(suite="s", mode=Mode.candidates, job_key=f"k-{problem}", problem=problem, problem_path="p",
                       problem_sha256="0", attempt=attempt, status=status, reason=f"{status}", speedups=speedups,
                       elapsed_s=elapsed_s, environment=ENV)


def test_problem_summary_takes_the_first_solve_and_the_best_correct_speedup_per_baseline():
    rows = [record("a", 0, Status.incorrect, 10.0, eager=9.0),
            record("a", 1, Status.correct, 25.0, eager=1.1, compile=0.9),
            record("a", 2, Status.correct, 40.0, eager=1.5, compile=0.7)]
    summary = metrics.summarize_problem("a", rows)
    assert summary.solved and summary.attempts == 3
    assert summary.speedups == {"eager": 1.5, "compile": 0.9}  # the incorrect 9.0 never counts
    assert summary.time_to_solve_s == 25.0 and summary.time_spent_s == 40.0
    assert summary.best_status is Status.correct


def test_unsolved_problem_shows_its_most_advanced_failure():
    rows = [record("b", 0, Status.compile_error, 1.0), record("b", 1, Status.incorrect, 2.0)]
    summary = metrics.summarize_problem("b", rows)
    assert not summary.solved and summary.best_status is Status.incorrect and summary.time_to_solve_s is None


def test_summarize_counts_problems_without_records_as_unsolved():
    records = [record("a", 0, Status.correct, 5.0, eager=2.0, compile=1.2),
               record("b", 0, Status.incorrect, 5.0)]
    summary = metrics.summarize("s", Mode.candidates, ["a", "b", "c", "d"], records)
    assert summary.problems == 4 and summary.solved == 1 and summary.attempts == 2
    assert summary.correctness_rate == pytest.approx(0.25)
    assert summary.fast_p == pytest.approx({"0": 0.25, "1": 0.25, "1.5": 0.25, "2": 0.0})  # 2.0 is not > 2
    assert summary.fast_p_compile == pytest.approx({"0": 0.25, "1": 0.25, "1.5": 0.0, "2": 0.0})
    assert summary.geomean_speedup == pytest.approx(2.0)
    assert summary.geomean_speedup_compile == pytest.approx(1.2)
    assert summary.environments == [ENV]
    assert [row.problem for row in summary.per_problem] == ["a", "b", "c", "d"]


def test_baselines_only_summary_claims_no_correctness():
    summary = metrics.summarize("s", Mode.baselines, ["a"], [record("a", 0, None, 3.0)])
    assert summary.correctness_rate is None and summary.fast_p == {} and summary.by_baseline == {}


def test_geomean_against_log_definition():
    values = [0.5, 2.0, 4.0]
    expected = math.exp(sum(math.log(v) for v in values) / 3)
    assert metrics.geomean_speedup([Outcome(True, v) for v in values]) == pytest.approx(expected)


def test_suspicious_speedups_are_carried_to_the_problem_and_the_report(tmp_path):
    from kernelloop.evals.report import write_report

    flagged = record("a", 0, Status.correct, 5.0, eager=40.0).model_copy(
        update={"suspicious": ["speedup 40.0x over eager is above 10x: check it by hand"]})
    plain = record("b", 0, Status.correct, 5.0, eager=1.2)
    summary = metrics.summarize("s", Mode.candidates, ["a", "b"], [flagged, plain])
    assert summary.per_problem[0].suspicious == flagged.suspicious and summary.per_problem[1].suspicious == []
    report = write_report(tmp_path, summary).report_md.read_text()
    assert "## Suspicious results (check by hand)" in report and "- a: speedup 40.0x" in report


def _stats(name: str, median: float, fastest: float):
    from kernelloop.records import TimingStats

    return TimingStats(name=name, median_ms=median, iqr_ms=0.001, min_ms=fastest, mean_ms=median, samples=100)


def test_a_baseline_slowed_by_its_host_overhead_is_explained_in_the_notes():
    """6_MatmulFP16 on the H100: compile's median 5x eager's, its fastest call the same as eager's."""
    from kernelloop.evals.metrics import host_bound_baseline_notes

    record = types.SimpleNamespace(problem="6_MatmulFP16", timings={
        "eager": _stats("eager", 0.0102, 0.0096), "compile": _stats("compile", 0.0495, 0.0097),
        "candidate": _stats("candidate", 0.0224, 0.0175)})
    notes = host_bound_baseline_notes([record])
    assert len(notes) == 1 and notes[0].startswith("6_MatmulFP16: compile reads 0.0495 ms")
    assert "per-call host work" in notes[0]
    # A baseline that is slower on the device too (its fastest call far above eager's) is no such case.
    record.timings["compile"] = _stats("compile", 0.0495, 0.0400)
    assert host_bound_baseline_notes([record]) == []
    # Nor one whose samples are tight (its median near its fastest call).
    record.timings["compile"] = _stats("compile", 0.0110, 0.0097)
    assert host_bound_baseline_notes([record]) == []
