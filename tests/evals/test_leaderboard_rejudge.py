"""benchmarks/leaderboard_rejudge.py on a small synthetic run: the raw verdicts keep no code, and the
report counts per level and status and lists every rejection with its check, claim and review."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.evals.test_bench_list import board, run_listed  # noqa: F401 - board is a fixture

ROOT = Path(__file__).resolve().parents[2]


def _script():
    path = ROOT / "benchmarks" / "leaderboard_rejudge.py"
    spec = importlib.util.spec_from_file_location("leaderboard_rejudge", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_raw_file_keeps_verdicts_not_code_and_the_report_lists_each_rejection(board, tmp_path):  # noqa: F811
    run_listed(board, tmp_path / "run", {})
    script = _script()
    out = tmp_path / "docs"
    meta = {"source_commit": "170ca79", "kernelloop_commit": "abc1234", "timing": False, "workers_per_gpu": 4}
    raw = script.extract(tmp_path / "run" / "results.jsonl", "h100", out, meta)
    rows = {r["id"]: r for r in map(json.loads, raw.read_text().splitlines())}
    assert sorted(rows) == ["a", "b", "c", "d", "e"] and "# verdict" not in raw.read_text()
    assert rows["c"]["status"] == "incorrect" and rows["c"]["claimed_status"] == "correct"
    assert rows["a"]["claimed_speedup"] == 1.8 and rows["a"]["gpu"] == "CPU"
    runs = json.loads((out / "runs.json").read_text())
    assert runs["h100"]["solutions"] == 5 and runs["h100"]["workers_per_gpu"] == 4

    (out / "review.json").write_text(json.dumps({
        "c": {"code": "unknown", "right": True, "why": "wrong | answer"},
        "d": {"code": "forbidden_call", "right": False, "why": "a review of another check"}}))
    text = script.report(out)
    assert "5 solutions of github.com/anneouyang/KernelBenchLeaderboard at 170ca79" in text
    assert "(correctness only, 4 worker(s) per GPU); 5 judged, 0 not (their problem failed); 2 not correct, " \
           "of them 2 the leaderboard claimed correct; reviewed: 1 right, 0 false, 1 unreviewed." in text
    assert "| level | solutions | correct | incorrect | rejected | problem failed |" in text
    assert "| 1 | 3 | 2 | 1 | 0 | 0 |" in text and "| 2 | 2 | 1 | 0 | 1 | 0 |" in text
    assert "| c | model-c | 1/2 (l1_p2) | incorrect | unknown: scripted incorrect | correct, 1.50x | right | " \
           "wrong / answer |" in text
    assert "| d | model-d | 2/1 (l2_p1) | rejected | unknown: scripted rejected | correct, 1.50x | unreviewed |  |" in text
    assert "Checks that fired: unknown (2)." in text


def test_a_check_a_shared_gpu_can_cause_is_marked_for_a_check_alone(tmp_path):
    script = _script()
    row = {"id": "x", "model": "m", "level": 1, "problem": 3, "problem_name": "l1_p3", "claimed_status": "correct",
           "claimed_speedup": None, "status": "runtime_error", "code": "out_of_memory", "reason": "CUDA out of memory",
           "problem_error": False, "speedup": None, "max_abs_err": None, "elapsed_s": 1.0, "gpu": "H100"}
    (tmp_path / "verdicts_t.jsonl").write_text(json.dumps(row) + "\n")
    (tmp_path / "runs.json").write_text(json.dumps({"t": {"workers_per_gpu": 8, "timing": False}}))
    assert "out_of_memory: CUDA out of memory (may come from sharing the GPU: check alone)" in script.report(tmp_path)


def test_a_leaderboard_unpacked_inside_another_repository_has_no_commit_of_its_own(tmp_path):
    """An archive unpacked in a project's tree (lb/ in a checkout) must not report the project's commit as its own."""
    import subprocess

    from kernelloop.evals.listed import Leaderboard

    outer = tmp_path / "project"
    (outer / "lb").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    subprocess.run(["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                    "-m", "x"], check=True)
    assert Leaderboard(outer / "lb").commit() == "unknown"
    assert len(Leaderboard(outer).commit()) == 40  # its own checkout: its commit
