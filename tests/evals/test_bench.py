"""The bench runner: suites, candidate matching, the three kinds of work, resume, outputs, the CLI.

Most tests inject scripted work (verdicts written in the candidate's first line); one scores
real candidates with the real verifier on the CPU, end to end.
"""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelloop.cli._app import app
from kernelloop.config.units import parse_duration_s
from kernelloop.evals import suite as bench
from kernelloop.evals.kernelbench import KernelBenchName, parse_candidate_name
from kernelloop.evals.records import Mode
from kernelloop.problem import Problem, ProblemError, load_dir
from kernelloop.records import Status, TimingStats, Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

PROBLEM_SOURCE = '''"""Problem {name}: doubles its input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
'''


def write_problems(directory: Path, names: list[str]) -> list[Problem]:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / f"{name}.py").write_text(PROBLEM_SOURCE.format(name=name))
    return load_dir(directory)


def write_candidate(path: Path, script: str) -> Path:
    """A candidate whose first line scripts its verdict: '<status> [baseline=speedup ...]'."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# verdict: {script}\nclass ModelNew:\n    pass\n")
    return path


class ScriptedVerifier:
    """Returns the verdict the candidate's first line asks for; counts calls per device."""

    def __init__(self, device: str, log: dict):
        self.device = device
        self.log = log
        log.setdefault("opened", []).append(device)

    def verify(self, candidate, problem, time_left_s=None) -> Verdict:
        self.log.setdefault("verified", []).append((self.device, problem.name))
        status, *pairs = candidate.source.splitlines()[0].removeprefix("# verdict: ").split()
        if status == "boom":
            raise RuntimeError("verifier bug")
        if status == "bad-problem":
            raise ProblemError(f"{problem.path}: the reference failed to run")
        speedups = {k: float(v) for k, v in (pair.split("=") for pair in pairs)}
        return Verdict(status=Status(status), reason=f"scripted {status}", device=self.device,
                       speedup=speedups.pop("eager", None), speedups=speedups)

    def close(self) -> None:
        self.log.setdefault("closed", []).append(self.device)


def scripted_work(log: dict):
    return bench.scoring_work(lambda device: ScriptedVerifier(device, log))


def run(suite: bench.Suite, out: Path, work, candidates: Path | None = None, mode: Mode = Mode.candidates,
        devices=("cpu",), budget_s=None) -> bench.BenchResult:
    return bench.run_bench(suite, mode, work, list(devices), out, candidates_dir=candidates, budget_s=budget_s,
                           show_progress=False)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --------------------------------------------------------------------------- names and suites


def test_kernelbench_candidate_names():
    assert parse_candidate_name("level_2_problem_17_sample_3_kernel.py") == KernelBenchName(2, 17, 3)
    assert KernelBenchName(2, 17, 3).filename == "level_2_problem_17_sample_3_kernel.py"
    assert parse_candidate_name("17_Conv.py") is None
    assert parse_candidate_name("level_2_problem_17_kernel.py") is None


def test_match_candidates_understands_both_namings(tmp_path):
    problems = write_problems(tmp_path / "KernelBench" / "level1", ["1_Add", "2_Mul", "3_Sub"])
    cands = tmp_path / "cands"
    for name in ["level_1_problem_1_sample_1_kernel.py", "level_1_problem_1_sample_0_kernel.py", "2_Mul.py",
                 "level_2_problem_3_sample_0_kernel.py", "notes.py"]:
        write_candidate(cands / name, "correct")
    match = bench.match_candidates(problems, cands)
    assert [p.name for p in match.by_problem["1_Add"]] == ["level_1_problem_1_sample_0_kernel.py",
                                                          "level_1_problem_1_sample_1_kernel.py"]
    assert [p.name for p in match.by_problem["2_Mul"]] == ["2_Mul.py"]
    assert match.by_problem["3_Sub"] == []  # its file says level 2: not this level's problem 3
    assert sorted(p.name for p in match.unmatched) == ["level_2_problem_3_sample_0_kernel.py", "notes.py"]


def test_resolve_suite(tmp_path):
    attention = bench.resolve_suite("attention")
    assert attention.kind == "attention" and len(attention.problems) == 10
    assert [p.number for p in bench.resolve_suite("attention", subset="1-6").problems] == [1, 2, 3, 4, 5, 6]
    write_problems(tmp_path / "KernelBench" / "level1", ["1_Add", "2_Mul", "3_Sub"])
    kb = bench.resolve_suite("kernelbench", root=tmp_path, level=1, subset="2-3")
    assert kb.name == "kernelbench-level1" and [p.name for p in kb.problems] == ["2_Mul", "3_Sub"]
    with pytest.raises(ProblemError, match="--root"):
        bench.resolve_suite("kernelbench", level=1)
    with pytest.raises(ProblemError, match="unknown suite"):
        bench.resolve_suite("no-such-suite")
    with pytest.raises(ProblemError, match="no problems"):
        bench.resolve_suite("kernelbench", root=tmp_path, level=1, subset="40")


def test_resolve_devices_on_a_machine_without_gpus():
    assert bench.resolve_devices("auto") == ["cpu"]
    assert bench.resolve_devices("cpu") == ["cpu"]
    with pytest.raises(ProblemError, match="no CUDA"):
        bench.resolve_devices("cuda")
    with pytest.raises(ProblemError, match="unknown device"):
        bench.resolve_devices("gpu0")
    assert bench.split_device("cuda:3") == ("cuda", 3) and bench.split_device("cpu") == ("cpu", None)


def test_parse_budget():
    assert parse_duration_s("15m") == 900 and parse_duration_s("1h30m") == 5400 and parse_duration_s("90") == 90
    assert parse_duration_s("1h 30m") == 5400  # the grammar solve and bench share
    for bad in ("", "ten minutes", "0s"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration_s(bad)


# --------------------------------------------------------------------------- scoring, resume, outputs


@pytest.fixture
def three(tmp_path):
    problems = write_problems(tmp_path / "suite", ["1_a", "2_b", "3_c"])
    cands = tmp_path / "cands"
    write_candidate(cands / "1_a.py", "correct eager=2.0 compile=1.2")
    write_candidate(cands / "level_1_problem_2_sample_0_kernel.py", "incorrect")
    write_candidate(cands / "level_1_problem_2_sample_1_kernel.py", "correct eager=0.5 compile=0.4")
    return bench.Suite("suite", "directory", problems), cands


def test_scoring_writes_records_summary_report_and_plots(three, tmp_path):
    suite, cands = three
    log: dict = {}
    result = run(suite, tmp_path / "out", scripted_work(log), cands, devices=["cpu:0", "cpu:1"])
    lines = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert [(r["problem"], r["attempt"], r["status"]) for r in sorted(lines, key=lambda r: (r["problem"], r["attempt"]))] == [
        ("1_a", 0, "correct"), ("2_b", 0, "incorrect"), ("2_b", 1, "correct"), ("3_c", 0, None)]
    assert all(r["environment"]["torch_version"] and r["environment"]["device"] in ("cpu:0", "cpu:1") for r in lines)
    assert sorted(log["opened"]) == ["cpu:0", "cpu:1"] and sorted(log["closed"]) == ["cpu:0", "cpu:1"]

    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["correctness_rate"] == pytest.approx(2 / 3)
    assert summary["fast_p"] == pytest.approx({"0": 2 / 3, "1": 1 / 3, "1.5": 1 / 3, "2": 0.0})
    assert summary["geomean_speedup"] == pytest.approx(1.0)  # sqrt(2.0 * 0.5)
    assert summary["geomean_speedup_compile"] == pytest.approx((1.2 * 0.4) ** 0.5)
    assert any("no candidate file" in note for note in summary["notes"])
    assert result.ran == 3 and result.skipped == 0

    report = (tmp_path / "out" / "report.md").read_text()
    assert "| eager | 66.7% | 33.3% | 33.3% | 0.0% | 1.00x | 2 |" in report
    assert "![solve_curve](plots/solve_rate_vs_time.png)" in report
    for png in result.files.plots.values():
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000
    assert set(result.files.plots) == {"solve_curve", "speedup_distribution"}


def test_nothing_timed_reads_not_timed_and_the_html_report_stands_alone(three, tmp_path):
    suite, cands = three
    for path in cands.glob("*.py"):
        write_candidate(path, "correct")  # correct, no speed measured (as on the CPU)
    result = run(suite, tmp_path / "out", scripted_work({}), cands)
    report = result.files.report_md.read_text()
    assert "| eager | 66.7% | not timed | not timed | not timed | - | 0 |" in report and "0.0%" not in report
    page = result.files.report_html.read_text()
    assert result.files.report_html == tmp_path / "out" / "report.html"
    assert page.count("data:image/png;base64,") == len(result.files.plots) == 1
    assert 'src="plots/' not in page and "<td>not timed</td>" in page and "<h1>kernelloop bench: suite" in page


def test_candidates_outside_the_selection_are_counted_as_such(three, tmp_path):
    suite, cands = three
    chosen = bench.Suite(suite.name, suite.kind, [p for p in suite.problems if p.number == 1], subset="1")
    write_candidate(cands / "stray.py", "correct")
    result = run(chosen, tmp_path / "out", scripted_work({}), cands)
    notes = result.summary.notes
    assert "2 candidate file(s) outside the selection (--problems 1), not scored" in notes
    assert "1 candidate file(s) matched no problem: stray.py" in notes


def test_rerun_skips_finished_problems_and_redoes_changed_candidates(three, tmp_path):
    suite, cands = three
    log: dict = {}
    run(suite, tmp_path / "out", scripted_work(log), cands)
    assert len(log["verified"]) == 3
    again = run(suite, tmp_path / "out", scripted_work(log), cands)
    assert len(log["verified"]) == 3 and again.ran == 0 and again.skipped == 3
    assert again.summary.correctness_rate == pytest.approx(2 / 3)
    assert any("resumed" in note for note in again.summary.notes)

    write_candidate(cands / "3_c.py", "correct eager=3.0")  # the missing one arrives
    third = run(suite, tmp_path / "out", scripted_work(log), cands)
    assert third.ran == 1 and log["verified"][-1] == ("cpu", "3_c")
    assert third.summary.correctness_rate == pytest.approx(1.0)
    assert len(read_jsonl(tmp_path / "out" / "results.jsonl")) == 5  # old records kept, superseded one unused


def test_a_torn_write_is_cut_and_that_problem_rerun(three, tmp_path):
    suite, cands = three
    log: dict = {}
    out = tmp_path / "out"
    run(suite, out, scripted_work(log), cands)
    lines = (out / "results.jsonl").read_text().splitlines(keepends=True)
    others = [line for line in lines if json.loads(line)["problem"] != "2_b"]
    first, second = [line for line in lines if json.loads(line)["problem"] == "2_b"]
    # killed while writing 2_b's two records: its first whole, its second torn
    (out / "results.jsonl").write_text("".join(others) + first + second[:60])
    again = run(suite, out, scripted_work(log), cands)
    assert again.ran == 1 and log["verified"][-2:] == [("cpu", "2_b"), ("cpu", "2_b")]
    after = read_jsonl(out / "results.jsonl")
    assert len(after) == len(lines) and [r["attempt"] for r in after if r["problem"] == "2_b"] == [0, 1]
    assert again.summary.correctness_rate == pytest.approx(2 / 3)


def test_a_results_file_of_something_else_is_a_clear_error(three, tmp_path):
    suite, cands = three
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "results.jsonl").write_text('{"hello": 1}\n{"x": 2}\n')
    with pytest.raises(ProblemError, match="results.jsonl:1: not a bench record"):
        run(suite, tmp_path / "out", scripted_work({}), cands)


def test_a_bad_problem_fails_alone_and_a_harness_bug_stops_the_run(three, tmp_path):
    suite, cands = three
    write_candidate(cands / "3_c.py", "bad-problem")
    result = run(suite, tmp_path / "out", scripted_work({}), cands)
    row = next(r for r in result.summary.per_problem if r.problem == "3_c")
    assert not row.solved and row.reason.startswith("problem error:")

    write_candidate(cands / "3_c.py", "boom")
    with pytest.raises(RuntimeError, match="bench stopped on 3_c: RuntimeError: verifier bug"):
        run(suite, tmp_path / "out2", scripted_work({}), cands)
    finished = {r["problem"] for r in read_jsonl(tmp_path / "out2" / "results.jsonl")}
    assert "3_c" not in finished  # the others may have finished first and are kept for the rerun


def test_a_problem_that_fails_itself_is_recorded_why_and_tried_again_on_a_rerun(three, tmp_path):
    suite, cands = three
    write_candidate(cands / "level_1_problem_2_sample_1_kernel.py", "bad-problem")  # 2_b: after an incorrect one
    write_candidate(cands / "level_1_problem_2_sample_2_kernel.py", "correct eager=9.0")  # never reached
    log: dict = {}
    result = run(suite, tmp_path / "out", scripted_work(log), cands)
    assert [name for _, name in log["verified"]].count("2_b") == 2  # its third candidate was not run
    records = [r for r in read_jsonl(tmp_path / "out" / "results.jsonl") if r["problem"] == "2_b"]
    assert [(r["status"], r["problem_error"] is not None) for r in records] == [("incorrect", False), (None, True)]
    failed = records[1]
    assert "the reference failed to run" in failed["problem_error"]
    assert failed["reason"].startswith("problem error:")
    assert failed["reason"].endswith("its 1 other candidate(s) were not run")
    row = next(r for r in result.summary.per_problem if r.problem == "2_b")
    assert not row.solved and row.attempts == 1 and row.best_status is Status.incorrect
    assert result.summary.correctness_rate == pytest.approx(1 / 3)  # counted as unsolved, not dropped
    assert any("1 problem(s) could not be judged" in note and "2_b" in note for note in result.summary.notes)

    # The rerun, with the same files (the same job keys), tries that problem again (say the
    # verifier was fixed meanwhile); the others stay done.
    fixed: dict = {}

    class FixedVerifier(ScriptedVerifier):
        def verify(self, candidate, problem, time_left_s=None):
            if "bad-problem" in candidate.source:
                self.log.setdefault("verified", []).append((self.device, problem.name))
                return Verdict(status=Status.correct, reason="fixed", device=self.device, speedup=1.5)
            return super().verify(candidate, problem)

    again = run(suite, tmp_path / "out", bench.scoring_work(lambda device: FixedVerifier(device, fixed)), cands)
    assert again.ran == 1 and again.skipped == 2 and {name for _, name in fixed["verified"]} == {"2_b"}
    records = [r for r in read_jsonl(tmp_path / "out" / "results.jsonl") if r["problem"] == "2_b"]
    assert [r["status"] for r in records] == ["incorrect", "correct", "correct"]  # the failed ones are gone
    assert again.summary.correctness_rate == pytest.approx(2 / 3)
    assert not any("could not be judged" in note for note in again.summary.notes)


def test_attention_suite_gets_the_flex_attention_bar_chart(tmp_path):
    suite = bench.resolve_suite("attention", subset="1-3")
    cands = tmp_path / "cands"
    write_candidate(cands / "1_causal_mask.py", "correct eager=6.0 compile=2.0 flex_attention=1.4")
    write_candidate(cands / "2_document_mask.py", "correct eager=5.0 compile=1.5 flex_attention=0.9")
    write_candidate(cands / "3_relative_positional.py", "incorrect")
    result = run(suite, tmp_path / "out", scripted_work({}), cands)
    assert result.summary.by_baseline["flex_attention"].geomean_speedup == pytest.approx((1.4 * 0.9) ** 0.5)
    chart = result.files.plots["variant_speedups"]
    assert chart.read_bytes().startswith(PNG_MAGIC)
    assert "vs flex_attention" in result.files.report_md.read_text()


# --------------------------------------------------------------------------- baselines and agent work


def test_baselines_only_records_timings_and_claims_no_correctness(tmp_path):
    suite = bench.Suite("s", "directory", write_problems(tmp_path / "suite", ["1_a", "2_b"]))
    seen: list[tuple[str, str]] = []

    def time_baselines(problem, device):
        seen.append((problem.name, device))
        return {name: TimingStats(name=name, median_ms=ms, iqr_ms=0.01, min_ms=ms, mean_ms=ms, samples=10)
                for name, ms in (("eager", 2.0), ("compile", 1.0))}

    result = run(suite, tmp_path / "out", bench.baselines_work(time_baselines), mode=Mode.baselines,
                 devices=["cpu"])
    assert sorted(seen) == [("1_a", "cpu"), ("2_b", "cpu")]
    assert result.summary.correctness_rate is None
    assert result.summary.per_problem[0].baseline_ms == {"eager": 2.0, "compile": 1.0}
    report = result.files.report_md.read_text()
    assert "| 1_a | 1.0000 | 2.0000 | baselines timed |" in report  # columns: compile, eager
    assert result.files.plots == {}
    assert result.summary.tokens is None and result.summary.tokens_note == "no model calls"  # not zeros
    assert "## Tokens\n\nNo model calls.\n" in report


def test_baselines_of_a_failing_problem_are_its_record_and_the_others_are_timed(tmp_path):
    suite = bench.Suite("s", "directory", write_problems(tmp_path / "suite", ["1_a", "2_b", "3_c"]))

    def time_baselines(problem, device):
        if problem.name == "2_b":
            raise ProblemError(f"{problem.path}: timing the baselines failed: raised RuntimeError: boom")
        return {"eager": TimingStats(name="eager", median_ms=1.0, iqr_ms=0.0, min_ms=1.0, mean_ms=1.0, samples=3)}

    result = run(suite, tmp_path / "out", bench.baselines_work(time_baselines), mode=Mode.baselines)
    rows = {row.problem: row for row in result.summary.per_problem}
    assert rows["1_a"].baseline_ms == {"eager": 1.0} and rows["3_c"].baseline_ms == {"eager": 1.0}
    assert rows["2_b"].baseline_ms == {} and "timing the baselines failed" in rows["2_b"].reason
    record = next(r for r in read_jsonl(tmp_path / "out" / "results.jsonl") if r["problem"] == "2_b")
    assert record["status"] is None and "boom" in record["problem_error"]


@dataclass
class FakeAttempt:
    verdict: Verdict
    elapsed_s: float
    kernel_path: Path | None = None


@dataclass
class FakeOutcome:
    attempts: list[FakeAttempt]
    tokens: None = None  # the agent loop's tokens: tests/evals/test_bench_tokens.py


def test_agent_work_records_every_attempt_with_its_time(tmp_path):
    suite = bench.Suite("s", "directory", write_problems(tmp_path / "suite", ["1_a", "2_b"]))
    kernel = tmp_path / "kernel.py"
    kernel.write_text("class ModelNew: pass\n")
    calls: list[tuple[str, float, str]] = []
    lock = threading.Lock()

    def solve(problem, budget_s, device):
        with lock:
            calls.append((problem.name, budget_s, device))
        if problem.name == "2_b":
            return FakeOutcome([])
        return FakeOutcome([FakeAttempt(Verdict(status=Status.incorrect, reason="mismatch"), 30.0),
                            FakeAttempt(Verdict(status=Status.correct, reason="ok", speedup=1.3), 95.0, kernel)])

    result = run(suite, tmp_path / "out", bench.agent_work(solve, 600.0), mode=Mode.agent, budget_s=600.0)
    assert sorted(calls) == [("1_a", 600.0, "cpu"), ("2_b", 600.0, "cpu")]
    row_a, row_b = result.summary.per_problem
    assert row_a.time_to_solve_s == 95.0 and row_a.speedups == {"eager": 1.3} and row_a.attempts == 2
    assert not row_b.solved and row_b.reason == "the agent loop verified no attempt"
    records = read_jsonl(tmp_path / "out" / "results.jsonl")
    assert next(r for r in records if r["attempt"] == 1)["candidate_sha256"] is not None
    # a different budget is different work: nothing is skipped
    again = run(suite, tmp_path / "out", bench.agent_work(solve, 60.0), mode=Mode.agent, budget_s=60.0)
    assert again.ran == 2


# --------------------------------------------------------------------------- real verifier, end to end


def test_real_verifier_scores_a_directory_on_cpu(tmp_path):
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    shutil.copy(FIXTURES / "problems" / "relu.py", suite_dir / "relu.py")
    shutil.copy(FIXTURES / "problems" / "scale_add.py", suite_dir / "scale_add.py")
    cands = tmp_path / "cands"
    cands.mkdir()
    shutil.copy(FIXTURES / "honest" / "relu_triton.py", cands / "relu.py")
    shutil.copy(FIXTURES / "honest" / "relu_triton.py", cands / "scale_add.py")  # the wrong kernel
    from kernelloop.tools.verify.verifier import Verifier

    work = bench.scoring_work(lambda device: Verifier(device="cpu", workspace=tmp_path / "ws"))
    result = run(bench.resolve_suite(str(suite_dir)), tmp_path / "out", work, cands)
    by_name = {row.problem: row for row in result.summary.per_problem}
    assert by_name["relu"].solved and by_name["relu"].best_status is Status.correct
    assert not by_name["scale_add"].solved and by_name["scale_add"].best_status is not None
    assert result.summary.correctness_rate == pytest.approx(0.5)
    assert result.summary.geomean_speedup is None  # CPU: correctness only
    assert any("CPU" in note for note in result.summary.notes)


BROKEN_REFERENCE = '''"""A reference whose forward raises: making its outputs fails in the trusted job."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("the reference ran out of memory (simulated)")


def get_inputs():
    return [torch.randn(37, 129)]


def get_init_inputs():
    return []
'''


def test_a_reference_that_raises_is_that_problems_record_and_the_batch_goes_on(tmp_path):
    suite_dir = tmp_path / "suite"
    suite_dir.mkdir()
    (suite_dir / "1_broken.py").write_text(BROKEN_REFERENCE)
    shutil.copy(FIXTURES / "problems" / "relu.py", suite_dir / "2_relu.py")
    cands = tmp_path / "cands"
    cands.mkdir()
    for name in ("1_broken", "2_relu"):
        shutil.copy(FIXTURES / "honest" / "relu_triton.py", cands / f"{name}.py")
    from kernelloop.tools.verify.verifier import Verifier

    work = bench.scoring_work(lambda device: Verifier(device="cpu", workspace=tmp_path / "ws"))
    result = run(bench.resolve_suite(str(suite_dir)), tmp_path / "out", work, cands)  # the broken one goes first
    by_name = {row.problem: row for row in result.summary.per_problem}
    assert by_name["2_relu"].solved
    assert not by_name["1_broken"].solved and by_name["1_broken"].attempts == 0
    record = next(r for r in read_jsonl(tmp_path / "out" / "results.jsonl") if r["problem"] == "1_broken")
    assert record["status"] is None and record["candidate"].endswith("1_broken.py")
    assert "the reference failed" in record["problem_error"]
    assert "ran out of memory (simulated)" in record["problem_error"] and "\n" not in record["reason"]
    assert result.summary.correctness_rate == pytest.approx(0.5)


# --------------------------------------------------------------------------- the command


runner = CliRunner()


def test_cli_baselines_only_on_cpu_is_a_one_line_usage_error(tmp_path):
    result = runner.invoke(app, ["bench", "attention", "--baselines-only", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "needs a CUDA GPU" in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("args, message", [
    (["nowhere"], "unknown suite"),
    (["attention", "--candidates", "examples/attention_candidates"], "sized for a GPU"),
    (["kernelbench", "--level", "1"], "--root"),
    (["attention", "--candidates", "x", "--baselines-only"], "exclude each other"),
    (["attention", "--budget", "soon"], "--budget: 'soon' is not a duration"),
])
def test_cli_bad_usage_exits_2(args, message):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2 and message in result.output


def test_cli_agent_mode_without_an_endpoint_says_what_to_set(three, tmp_path, monkeypatch):
    for name in ("KERNELLOOP_BASE_URL", "KERNELLOOP_MODEL"):
        monkeypatch.delenv(name, raising=False)
    result = runner.invoke(app, ["bench", str(tmp_path / "suite")])
    assert result.exit_code == 2 and "KERNELLOOP_BASE_URL" in result.output


def test_cli_scores_candidates_and_prints_the_summary_json(three, tmp_path, monkeypatch):
    suite, cands = three
    log: dict = {}
    monkeypatch.setattr("kernelloop.cli.bench_cmd._verifier_factory", lambda workspace: lambda d: ScriptedVerifier(d, log))
    result = runner.invoke(app, ["bench", str(tmp_path / "suite"), "--candidates", str(cands),
                                 "--out", str(tmp_path / "out"), "--no-progress", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["correctness_rate"] == pytest.approx(2 / 3) and summary["mode"] == "candidates"
    assert (tmp_path / "out" / "report.md").is_file()


def test_cli_a_worker_failure_is_one_line_and_the_rerun_resumes(three, tmp_path, monkeypatch):
    """The sandbox or the verifier failing (not a candidate) stops bench with one line, no traceback."""
    suite, cands = three
    write_candidate(cands / "3_c.py", "boom")
    monkeypatch.setattr("kernelloop.cli.bench_cmd._verifier_factory", lambda workspace: lambda d: ScriptedVerifier(d, {}))
    result = runner.invoke(app, ["bench", str(tmp_path / "suite"), "--candidates", str(cands),
                                 "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "bench stopped on 3_c: RuntimeError: verifier bug" in lines[0], result.output
    assert "rerun the same command" in lines[0] and "Traceback" not in result.output
