"""The request models every entry point shares: the same caps, and bad input as one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from kernelloop.config import defaults
from kernelloop.problem import ProblemError
from kernelloop.serve.langchain import verify_tool
from kernelloop.serve.requests import SolveRequest, VerifyRequest, one_line

PROBLEM = Path(__file__).resolve().parents[2] / "kernelloop" / "evals" / "problems" / "3_LayerNorm.py"
TOO_BIG = "#" * (defaults.MAX_SOURCE_BYTES + 1)


def test_an_oversized_source_is_refused_with_its_size_and_the_limit(tmp_path):
    request = VerifyRequest(problem_path=str(PROBLEM), candidate_source=TOO_BIG)
    with pytest.raises(ProblemError, match=rf"^candidate_source: {defaults.MAX_SOURCE_BYTES + 1:,} bytes, over the "
                                           rf"{defaults.MAX_SOURCE_BYTES:,}-byte limit"):
        request.load_candidate()
    with pytest.raises(ProblemError, match="problem_source: .* bytes, over the"):
        VerifyRequest(problem_source=TOO_BIG, candidate_source="x").load_problem(tmp_path)


def test_the_langchain_tool_answers_bad_input_with_one_line(tmp_path):
    message = verify_tool(workspace=tmp_path).invoke(
        {"type": "tool_call", "id": "1", "name": "verify_kernel",
         "args": {"problem_path": str(PROBLEM), "candidate_source": TOO_BIG}})
    assert message.status == "error" and "-byte limit for a candidate" in message.content
    assert "\n" not in message.content


def test_caps_are_one_line_errors():
    with pytest.raises(ValidationError) as caught:
        SolveRequest(problem_path="p.py", candidates=defaults.MAX_CANDIDATES + 1, budget_s=0)
    line = one_line(caught.value)
    assert "candidates: Input should be less than or equal to 32" in line and "budget_s:" in line
    assert "\n" not in line


def test_hints_are_capped_in_count_and_in_bytes_all_together():
    source = PROBLEM.read_text()
    assert len(SolveRequest(problem_source=source, hints=["h"] * defaults.MAX_HINTS).hints) == defaults.MAX_HINTS
    at_limit = ["é" * (defaults.MAX_HINTS_BYTES // 4)] * 2  # two bytes a character: the limit exactly
    assert SolveRequest(problem_source=source, hints=at_limit).hints == at_limit
    with pytest.raises(ValidationError) as caught:
        SolveRequest(problem_source=source, hints=["h"] * (defaults.MAX_HINTS + 1))
    assert one_line(caught.value).startswith(f"hints: List should have at most {defaults.MAX_HINTS} items")
    with pytest.raises(ValidationError) as caught:  # each small, too many bytes in all (counted as UTF-8)
        SolveRequest(problem_source=source, hints=[*at_limit, "x"])
    assert f"{defaults.MAX_HINTS_BYTES + 1:,} bytes in all, over the {defaults.MAX_HINTS_BYTES:,}-byte limit" \
        in one_line(caught.value)
    with pytest.raises(ValidationError):  # a lone surrogate is counted, not a crash
        SolveRequest(problem_source=source, hints=["\ud800" * defaults.MAX_HINTS_BYTES])
