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
