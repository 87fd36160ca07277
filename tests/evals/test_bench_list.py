"""bench over a list of solutions (the KernelBench leaderboard's raw_data.json): reading the list,
one resumable job per solution, the comparison with the list's verdicts, the time cap, the pace
shown, and workers that share a GPU only when nothing is timed.

Most tests inject scripted verdicts (test_bench.py's ScriptedVerifier); one runs the real verifier
on the CPU through the command, with two workers."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelloop.cli._app import app
from kernelloop.evals import suite as bench
from kernelloop.evals.listed import find_problem_file, listed_problems, read_list, write_candidates
from kernelloop.evals.pace import pace
from kernelloop.evals.records import Mode
from kernelloop.problem import ProblemError
from kernelloop.records import Status
from kernelloop.tools.verify.pool import LocalPool, PoolError, check_sharing, make_pool
from tests.evals.test_bench import PROBLEM_SOURCE, ScriptedVerifier, read_jsonl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = CliRunner()


def board_entry(file: str, level: int, problem_id: int, code: str, speedup: float = 1.5) -> dict:
    """One solution as the leaderboard's raw_data.json holds it (problem_id is 0-based)."""
    return {"file": file, "level": level, "problem_id": problem_id, "code": code, "model": "m-id",
            "display_name": f"model-{file}", "torch_speedup": speedup, "torch_compile_speedup": 0.0,
            "baseline_torch_time": 1.0, "baseline_torch_compile_time": 1.0, "kernel_eval_time": 1.0}


def scripted(script: str) -> str:
    return f"# verdict: {script}\nclass ModelNew:\n    pass\n"


@pytest.fixture
def board(tmp_path):
    """Three problems over two levels (l1_p1, l1_p2, l2_p1) and five solutions, all claimed correct."""
    problems = tmp_path / "problems"
    problems.mkdir()
    for name in ("l1_p1", "l1_p2", "l2_p1"):
        (problems / f"{name}.py").write_text(PROBLEM_SOURCE.format(name=name))
    entries = [board_entry("a", 1, 0, scripted("correct eager=2.0"), 1.8),
               board_entry("b", 1, 0, scripted("correct eager=0.5"), 1.4),  # we measure it slower: a disagreement
               board_entry("c", 1, 1, scripted("incorrect")),
               board_entry("d", 2, 0, scripted("rejected")),
               board_entry("e", 2, 0, scripted("correct"))]  # correct, no speed measured: agrees
    listed = tmp_path / "raw_data.json"
    listed.write_text(json.dumps(entries))
    return listed, problems


def listed_of(path: Path, problems: Path, out: Path, level=None, subset=None) -> tuple[bench.Suite, bench.Listed]:
    solutions = read_list(path, level, subset)
    skipped: list[str] = []
    found = listed_problems(solutions, problems, skipped)
    kept = [s for s in solutions if (s.level, s.number) in found]
    suite = bench.Suite("board", "list", sorted(found.values(), key=lambda p: (p.level, p.number)), subset, skipped)
    return suite, bench.Listed(kept, found, write_candidates(kept, out / "listed"))


def run_listed(board, out: Path, log: dict, devices=("cpu",), stop_after_s=None, show_progress=False, **pick):
    suite, listed = listed_of(*board, out, **pick)
    work = bench.scoring_work(lambda device: ScriptedVerifier(device, log))
    return bench.run_bench(suite, Mode.candidates, work, list(devices), out, show_progress=show_progress,
                           listed=listed, stop_after_s=stop_after_s)


# --------------------------------------------------------------------------- the list file


def test_the_leaderboards_raw_data_is_read_with_its_claims(board):
    solutions = {s.claim.id: s for s in read_list(board[0])}
    a = solutions["a"]
    assert (a.level, a.number) == (1, 1)  # problem_id 0 is problem 1
    assert a.claim.status is Status.correct and a.claim.model == "model-a"
    assert a.claim.speedups == {"eager": 1.8}  # its 0.0 over compile is no measurement, not a slow kernel
    assert [s.claim.id for s in read_list(board[0], level=2)] == ["d", "e"]
    assert [s.claim.id for s in read_list(board[0], subset="2")] == ["c"]


def test_a_plain_jsonl_list_and_its_errors(tmp_path):
    path = tmp_path / "list.jsonl"
    path.write_text(json.dumps({"id": "x/1", "level": 1, "problem": 3, "code": "pass", "status": "incorrect",
                                "speedup": 0.7}) + "\n" + json.dumps({"id": "y", "level": 1, "problem": 4, "code": ""}))
    x, y = read_list(path)
    assert (x.number, x.claim.status, x.claim.speedups, x.filename) == (3, Status.incorrect, {"eager": 0.7}, "x_1.py")
    assert y.claim.status is None and y.claim.speedups == {}
    path.write_text(json.dumps([{"id": "x", "level": 1, "code": "pass"}]))
    with pytest.raises(ProblemError, match=r"entry 0: problem: Field required"):
        read_list(path)
    path.write_text(json.dumps([{"id": "x", "level": 1, "problem": 1, "code": ""}] * 2))
    with pytest.raises(ProblemError, match="ids repeat"):
        read_list(path)


def test_problem_files_of_the_leaderboard_and_of_a_kernelbench_checkout(tmp_path):
    (tmp_path / "l1_p2.py").write_text("")
    (tmp_path / "KernelBench" / "level2").mkdir(parents=True)
    (tmp_path / "KernelBench" / "level2" / "7_Conv.py").write_text("")
    assert find_problem_file(tmp_path, 1, 2) == tmp_path / "l1_p2.py"
    assert find_problem_file(tmp_path, 2, 7) == tmp_path / "KernelBench" / "level2" / "7_Conv.py"
    assert find_problem_file(tmp_path, 3, 1) is None


# --------------------------------------------------------------------------- a run over the list


def test_each_solution_is_a_record_with_its_claim_and_the_report_lists_each_disagreement(board, tmp_path):
    log: dict = {}
    result = run_listed(board, tmp_path / "out", log)
    rows = {r["claim"]["id"]: r for r in read_jsonl(tmp_path / "out" / "results.jsonl")}
    assert sorted(rows) == ["a", "b", "c", "d", "e"] and len(log["verified"]) == 5
    assert rows["c"]["status"] == "incorrect" and rows["c"]["problem"] == "l1_p2" and rows["c"]["level"] == 1
    assert all("# verdict" not in json.dumps(r) for r in rows.values())  # the code stays in its file
    assert result.summary.problems == 3 and result.summary.solved == 2  # l1_p1 (a, b) and l2_p1 (e)
    check = result.summary.claims
    assert check is not None and (check.compared, check.agreed) == (5, 2)
    assert [(d.id, d.kind) for d in check.disagreements] == [("b", "speedup"), ("c", "verdict"), ("d", "verdict")]
    report = result.files.report_md.read_text()
    assert "5 solution(s) carried a verdict or a speedup: 2 agree, 3 disagree." in report
    assert "| c | model-c | l1_p2 | verdict | correct | incorrect |" in report
    assert "| b | model-b | l1_p1 | speedup | correct | correct | unknown | 1.40x | 0.50x |" in report


def test_a_rerun_skips_every_judged_solution_and_judges_a_new_one(board, tmp_path):
    log: dict = {}
    run_listed(board, tmp_path / "out", log)
    again = run_listed(board, tmp_path / "out", log)
    assert len(log["verified"]) == 5 and (again.ran, again.skipped) == (0, 5)
    path, _ = board
    entries = json.loads(path.read_text())
    entries.append(board_entry("f", 1, 1, scripted("correct")))
    entries[0]["code"] = scripted("incorrect")  # a changed solution is judged again
    path.write_text(json.dumps(entries))
    third = run_listed(board, tmp_path / "out", log)
    assert (third.ran, third.skipped) == (2, 4) and sorted(p for _, p in log["verified"][5:]) == ["l1_p1", "l1_p2"]


def test_two_solutions_with_the_same_code_are_two_jobs(board, tmp_path):
    path, _ = board
    entries = json.loads(path.read_text())
    entries.append(dict(entries[0], file="a2"))
    path.write_text(json.dumps(entries))
    run_listed(board, tmp_path / "out", {})
    assert len(bench.read_records(tmp_path / "out" / "results.jsonl")) == 6  # not cut as one torn job
    assert run_listed(board, tmp_path / "out", {}).skipped == 6


class SlowVerifier(ScriptedVerifier):
    def verify(self, candidate, problem, time_left_s=None):
        time.sleep(0.4)
        return super().verify(candidate, problem)


def test_the_time_cap_stops_cleanly_across_levels_and_the_rerun_goes_on(board, tmp_path):
    suite, listed = listed_of(*board, tmp_path / "out")
    log: dict = {}
    work = bench.scoring_work(lambda device: SlowVerifier(device, log))
    first = bench.run_bench(suite, Mode.candidates, work, ["cpu"], tmp_path / "out", show_progress=False,
                            listed=listed, stop_after_s=0.5)
    assert 1 <= first.ran < 5 and first.left == 5 - first.ran
    assert any("not run yet: the time cap" in note for note in first.summary.notes)
    if first.ran >= 2:  # levels interleaved: level 1's first problem, then level 2's
        assert [p for _, p in log["verified"][:2]] == ["l1_p1", "l2_p1"]
    rest = bench.run_bench(suite, Mode.candidates, work, ["cpu"], tmp_path / "out", show_progress=False, listed=listed)
    assert rest.left == 0 and rest.ran + first.ran == 5 and len(log["verified"]) == 5
    assert rest.summary.claims is not None and rest.summary.claims.compared == 5


def test_the_pace_fields():
    assert pace(0, 4, 10, 5.0).line() == "4/10 candidates, -/min, eta -"
    state = pace(3, 4, 10, 60.0)  # 3 judged in this run's minute; 3 left
    assert (state.done, state.per_minute, state.eta_s) == (7, 3.0, 60.0)
    assert state.line() == "7/10 candidates, 3.0/min, eta 0:01:00"
    assert pace(2, 0, 200, 30.0).eta_text == "eta 0:49:30"


def test_a_log_file_gets_plain_pace_lines(board, tmp_path, capsys):
    run_listed(board, tmp_path / "out", {}, show_progress=True)
    err = capsys.readouterr().err
    assert "board: 5/5 candidates," in err and "/min, eta 0:00:00" in err


# --------------------------------------------------------------------------- sharing a GPU


def test_a_gpu_is_shared_only_when_nothing_is_timed():
    check_sharing("cuda", 1, time_it=True)
    check_sharing("cuda", 4, time_it=False)
    check_sharing("cpu", 2, time_it=True)  # the CPU never times
    with pytest.raises(PoolError, match="timing needs its GPU alone"):
        check_sharing("cuda", 2, time_it=True)
    with pytest.raises(PoolError, match="timing needs its GPU alone"):
        LocalPool(["cuda:0"], workers_per_device=2)  # refused before any worker is made (no GPU here)
    with pytest.raises(PoolError, match="a Ray pool has one actor per GPU"):
        make_pool("cpu", "local", workers_per_device=2, time_it=False)


def test_lanes_on_one_device_have_their_own_dirs(tmp_path):
    pool = LocalPool(["cpu"], workspace=tmp_path / "ws", workers_per_device=3, time_it=False)
    try:
        assert pool.slots == ["cpu"] * 3 and pool.shared
        roots = {w.root.name for w in pool._workers.workers}
        assert roots == {"cpu", "cpu-w1", "cpu-w2"}
        with pytest.raises(PoolError, match="needs its GPU alone"):
            pool.device = "cuda"  # as a shared GPU pool would be
            pool.time_baselines(None)  # type: ignore[arg-type]
    finally:
        pool.device = "cpu"
        pool.close()


@pytest.mark.parametrize("args, message", [
    (["--workers-per-gpu", "2"], "needs --no-timing"),
    (["--workers-per-gpu", "2", "--no-timing", "--ray", "local"], "for local GPUs"),
    (["--candidates", "x"], "--list excludes"),
    (["--stop-after", "soon"], "--stop-after"),
])
def test_cli_bad_list_usage_exits_2(board, args, message):
    path, problems = board
    result = runner.invoke(app, ["bench", "board", "--list", str(path), "--problems-dir", str(problems), *args])
    assert result.exit_code == 2 and message in result.output, result.output


def test_cli_list_without_problems_dir_is_usage(board):
    result = runner.invoke(app, ["bench", "board", "--list", str(board[0])])
    assert result.exit_code == 2 and "go together" in result.output


def test_cli_an_out_dir_that_cant_be_written_is_one_line(board):
    path, problems = board
    result = runner.invoke(app, ["bench", "board", "--list", str(path), "--problems-dir", str(problems),
                                 "--out", str(path), "--no-timing", "--device", "cpu"])  # --out is a file
    assert result.exit_code == 2 and "can't write the listed solutions" in result.output
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- the real verifier, two workers


def test_cli_judges_a_list_for_correctness_with_two_workers_on_the_cpu(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(FIXTURES / "problems" / "relu.py", problems / "l1_p1.py")
    shutil.copy(FIXTURES / "problems" / "gelu_scaled.py", problems / "l1_p2.py")  # relu is not its answer
    honest = (FIXTURES / "honest" / "relu_triton.py").read_text()
    cheat = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return eval('x')\n"
    listed = tmp_path / "raw_data.json"
    listed.write_text(json.dumps([board_entry("good", 1, 0, honest), board_entry("wrong", 1, 1, honest),
                                  board_entry("cheat", 1, 0, cheat), board_entry("lost", 3, 9, honest)]))
    out = tmp_path / "out"
    args = ["bench", "lb", "--list", str(listed), "--problems-dir", str(problems), "--device", "cpu", "--no-timing",
            "--workers-per-gpu", "2", "--workspace", str(tmp_path / "ws"), "--out", str(out), "--no-progress", "--json"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = {r["claim"]["id"]: r for r in read_jsonl(out / "results.jsonl")}
    assert {k: v["status"] for k, v in rows.items()} == {"good": "correct", "wrong": "incorrect", "cheat": "rejected"}
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert [d["id"] for d in summary["claims"]["disagreements"]] == ["cheat", "wrong"]
    assert any("level 3 problem 10: no problem file" in note for note in summary["notes"])
    assert (tmp_path / "ws" / "verifier" / "cpu-w1").is_dir()  # the second worker ran in its own dirs
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "resumed: 3 job(s)" in again.output


# --------------------------------------------------------------------------- KernelBench's own verdicts beside a directory


def test_kernelbench_eval_results_beside_the_samples_are_compared(tmp_path):
    from tests.evals.test_bench import write_candidate, write_problems

    problems = write_problems(tmp_path / "suite", ["1_a", "2_b"])
    cands = tmp_path / "cands"
    write_candidate(cands / "level_1_problem_1_sample_0_kernel.py", "correct")
    write_candidate(cands / "level_1_problem_1_sample_1_kernel.py", "incorrect")
    write_candidate(cands / "level_1_problem_2_sample_0_kernel.py", "runtime_error")
    (cands / "eval_results.json").write_text(json.dumps({
        "1": [{"sample_id": 0, "compiled": True, "correctness": False, "metadata": {}, "runtime": -1.0},
              {"sample_id": 1, "compiled": True, "correctness": True, "metadata": {}, "runtime": 0.2}],
        "2": {"0": {"compiled": True, "correctness": False}}}))  # the older shape, by sample id
    suite = bench.Suite("suite", "directory", problems)
    result = bench.run_bench(suite, Mode.candidates, bench.scoring_work(lambda d: ScriptedVerifier(d, {})), ["cpu"],
                             tmp_path / "out", candidates_dir=cands, show_progress=False)
    check = result.summary.claims
    assert check is not None and (check.compared, check.agreed) == (3, 1)  # runtime_error vs "not correct": agree
    assert sorted((d.id, d.claimed_status, d.status) for d in check.disagreements) == [
        ("level_1_problem_1_sample_0_kernel.py", Status.incorrect, Status.correct),
        ("level_1_problem_1_sample_1_kernel.py", Status.correct, Status.incorrect)]
    (cands / "eval_results.json").write_text("[1]")
    with pytest.raises(ProblemError, match="not KernelBench's eval results"):
        bench.match_candidates(problems, cands)


def test_a_lanes_work_dir_is_never_taken_for_the_trusted_cache(tmp_path, monkeypatch):
    from kernelloop.tools.verify import trusted_cache

    for lane_dir in ("cuda0-w1", "cpu-w3", "cuda0"):
        monkeypatch.setenv(trusted_cache.TRUSTED_CACHE_ENV, str(tmp_path / "ws" / "verifier" / lane_dir / "cache"))
        root, note = trusted_cache.trusted_cache_root("bubblewrap")
        assert root is None and "inside a candidates' work dir" in note, lane_dir
