"""A candidate is parsed and linted in the server's own process (the pool's precheck) before any sandbox,
and the static rules cost about 75 us of CPU a token (tests/verify/test_review38.py: a megabyte of one-line
statements held an MCP server for 40 s). So a candidate over MAX_CANDIDATE_TOKENS is a one-line verdict from
the token pass alone, before Python's parser or any rule sees it; every kernel shipped here is far under it.
Counts only, no clocks."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

from kernelloop import source_ast
from kernelloop.config import defaults
from kernelloop.problem import Candidate
from kernelloop.records import Code
from kernelloop.tools.verify.verdicts import precheck

ROOT = Path(__file__).resolve().parents[2]
HONEST = (ROOT / "tests" / "fixtures" / "honest" / "relu_triton.py").read_text()


def tokens(source: str) -> int:
    return sum(1 for _ in tokenize.generate_tokens(io.StringIO(source).readline))


@pytest.fixture
def parses(monkeypatch) -> list[int]:
    """How many times Python's parser ran."""
    ran: list[int] = []
    original = source_ast.ast.parse

    def counted(*args, **kwargs):
        ran.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(source_ast.ast, "parse", counted)
    return ran


def test_a_megabyte_of_one_line_statements_is_refused_before_the_parser(parses):
    source = HONEST + "\n" + "".join(f"f(x{i})\n" for i in range(100_000))  # lint-clean, ~1 MiB
    assert len(source.encode()) <= defaults.MAX_SOURCE_BYTES
    verdict = precheck(Candidate(source=source), "cpu")
    assert verdict is not None and verdict.code is Code.syntax
    assert f"too large: over {defaults.MAX_CANDIDATE_TOKENS:,} tokens of code" in verdict.reason
    assert "\n" not in verdict.reason and parses == []


def test_the_bound_counts_an_f_strings_fields_too(parses):
    """Python parses each field of an f-string as an expression (a node or more each), so a single string
    token holding 8,000 fields counts them all."""
    source = HONEST + '\ntext = f"' + ",".join(["{x}"] * 8000) + '"\n'
    assert tokens(source) < defaults.MAX_CANDIDATE_TOKENS  # one STRING token to Python's tokenizer
    found = Candidate(source=source).syntax_problem()
    assert found is not None and "too large" in found[1] and parses == []


def test_a_source_just_under_the_bound_parses_and_just_over_does_not():
    line = "f(x)\n"  # 5 tokens
    under = HONEST + "\n" + line * ((defaults.MAX_CANDIDATE_TOKENS - tokens(HONEST) - 10) // 5)
    assert tokens(under) <= defaults.MAX_CANDIDATE_TOKENS
    assert Candidate(source=under).syntax_problem() is None
    over = under + line * 10
    assert tokens(over) > defaults.MAX_CANDIDATE_TOKENS
    assert "too large" in (Candidate(source=over).syntax_problem() or (None, ""))[1]


def test_other_readers_take_any_size():
    """The bound is the candidate precheck's: a problem file, a recorded reply, the package's own code
    are parsed whole."""
    big = "".join(f"f(x{i})\n" for i in range(defaults.MAX_CANDIDATE_TOKENS))
    assert len(source_ast.parse(big).body) == defaults.MAX_CANDIDATE_TOKENS


def test_every_kernel_shipped_here_is_far_under_the_bound():
    """Five times the largest (the largest of the 413 KernelBench leaderboard kernels has 3,960 tokens)."""
    shipped = [path for path in (ROOT / "examples").rglob("*.py") if "class ModelNew" in path.read_text()]
    shipped += list((ROOT / "tests" / "fixtures" / "honest").glob("*.py"))
    assert len(shipped) > 20
    largest = max(tokens(path.read_text()) for path in shipped)
    assert 5 * largest <= defaults.MAX_CANDIDATE_TOKENS, largest
