"""Bench over JSON nested past json's recursion and candidates that nest past Python's parser
(issue 35 a, d): one line, or one item's record, never a traceback that stops the run. Sizes only."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kernelloop import bounded_json
from kernelloop.cli._app import app
from kernelloop.evals import suite as bench
from kernelloop.evals.listed import read_list
from kernelloop.graph.rundir import read_recording
from kernelloop.problem import Problem, ProblemError
from tests.evals.test_bench import PROBLEM_SOURCE, ScriptedVerifier
from tests.evals.test_bench_list import board  # noqa: F401 - the fixture

runner = CliRunner()


def test_bench_list_of_a_json_100000_deep_is_one_line(board, tmp_path):  # noqa: F811
    path, problems = board
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = runner.invoke(app, ["bench", "board", "--list", str(deep), "--problems-dir", str(problems),
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and (result.exception is None or isinstance(result.exception, SystemExit))
    assert "nested deeper than" in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) <= 2


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": ' * 5000 + "1" + "}" * 5000])
def test_a_deep_list_file_or_jsonl_line_is_a_problem_error(tmp_path, text):
    for name, body in (("list.json", text), ("list.jsonl", json.dumps({"id": "x", "level": 1, "problem": 1,
                                                                       "code": "pass"}) + "\n" + text + "\n")):
        path = tmp_path / name
        path.write_text(body)
        with pytest.raises(ProblemError, match="nested deeper than"):
            read_list(path)


def test_a_list_nested_a_few_levels_is_still_read(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps([{"id": "x", "level": 1, "problem": 1, "code": "pass", "extra": [[[[[[1]]]]]]}]))
    assert [s.claim.id for s in read_list(path)] == ["x"]


def test_a_deep_recording_is_one_line(tmp_path):
    path = tmp_path / "turns.jsonl"
    path.write_text("[" * 100_000 + "\n")
    with pytest.raises(bounded_json.JsonBoundError, match="line 1: JSON nested deeper than"):
        read_recording(path)
    path.write_text('{"not": "a turn"}\n')
    with pytest.raises(bounded_json.JsonBoundError, match="not a recorded turn"):
        read_recording(path)


class _ParserCrash(ScriptedVerifier):
    def verify(self, candidate, problem, time_left_s=None):
        if "crash" in candidate.source:
            raise RecursionError("maximum recursion depth exceeded")
        return super().verify(candidate, problem, time_left_s)


def test_an_item_the_verifier_cant_parse_is_that_items_record_and_the_next_is_judged(tmp_path):
    (tmp_path / "p.py").write_text(PROBLEM_SOURCE.format(name="p"))
    problem = Problem.from_file(tmp_path / "p.py")
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    first.write_text("# verdict: crash\nclass ModelNew:\n    pass\n")
    second.write_text("# verdict: correct eager=2.0\nclass ModelNew:\n    pass\n")
    job = bench.Job(problem=problem, key="k", candidates=(first, second))
    attempts = bench._score(_ParserCrash("cpu", {}), job)
    assert "candidate not judged: RecursionError" in attempts[0].note and attempts[0].verdict is None
    assert attempts[1].verdict is not None and attempts[1].verdict.status.value == "correct"
