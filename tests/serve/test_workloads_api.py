"""The Python API and the MCP server's jobs pass a problem with workloads through: the verdict they
answer with carries `workloads`, brief or whole."""

from __future__ import annotations

from pathlib import Path

import kernelloop
from kernelloop.records import Status, Verdict, WorkloadResult
from kernelloop.serve.requests import VerdictBrief

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_the_python_api_verifies_a_problem_with_workloads(tmp_path):
    problem = FIXTURES / "problems" / "rowsum_workloads.py"
    verdict = kernelloop.verify(FIXTURES / "cheats" / "rowsum_fixed_128_cols.py", problem, device="cpu", workspace=tmp_path)
    assert verdict.status is Status.incorrect and verdict.reason.startswith("wrong on workload 'cols_3000'")
    assert verdict.workloads["cols_3000"].status is Status.incorrect
    # source text, as KernelBench's eval_kernel_against_ref takes them
    honest = kernelloop.verify((FIXTURES / "honest" / "rowsum_any_shape_triton.py").read_text(), problem.read_text(),
                               device="cpu", workspace=tmp_path)
    assert honest.status is Status.correct and list(honest.workloads) == ["cols_128", "cols_3000"]


def test_the_mcp_brief_carries_the_workloads_only_where_there_are_some():
    verdict = Verdict(status=Status.correct, reason="correct", speedup=1.5, slowest_workload="b",
                      workloads={"a": WorkloadResult(name="a", speedup=2.25), "b": WorkloadResult(name="b", speedup=1.0)})
    brief = VerdictBrief.of(verdict).model_dump(mode="json")
    assert brief["slowest_workload"] == "b" and brief["workloads"]["a"]["speedup"] == 2.25
    assert brief["workloads"]["b"]["status"] == "correct"
    plain = VerdictBrief.of(Verdict(status=Status.correct, reason="correct")).model_dump(mode="json")
    assert set(plain) == {"status", "code", "speedup", "reason", "feedback"}
