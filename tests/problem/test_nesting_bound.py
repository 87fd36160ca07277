"""Source nested past what Python's parser takes (issue 35 a): a chain of 10,000 `not` (40 KB) made
`ast.parse`, `compile` and `symtable` raise MemoryError out of verify, bench and a solve's coder
node. The token count (source_ast.nesting) refuses it first, as a SyntaxError every caller turns into
one line; a deep but legal expression still parses. Counts and sizes only, no clocks."""

import pytest

from kernelloop import source_ast
from kernelloop.agents.extract import extract_candidate
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.tools.verify.verdicts import precheck

MODELNEW = "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n\n\n"
PROBLEM = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
           "        return x\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n"
           "    return []\n\n\n")

CHAINS = {
    "not": lambda n: "flag = " + "not " * n + "True\n",
    "minus": lambda n: "value = " + "-" * n + "1\n",
    "power": lambda n: "value = " + " ** ".join(["1"] * n) + "\n",
    "lambda": lambda n: "make = " + "lambda: " * n + "1\n",
    "ternary": lambda n: "value = " + "1 if flag else " * n + "1\n",
    "sum": lambda n: "value = " + " + ".join(["1"] * n) + "\n",
    "attribute": lambda n: "value = nn" + ".x" * n + "\n",
    "calls": lambda n: "value = int" + "()" * n + "\n",
    "f-string": lambda n: 'text = f"{' + "not " * n + 'True}"\n',
}


@pytest.mark.parametrize("kind", CHAINS)
def test_a_chain_ten_thousand_deep_is_a_syntax_error_not_a_crash(kind):
    with pytest.raises(source_ast.TooDeep, match="nested too deeply"):
        source_ast.parse(CHAINS[kind](10_000))


@pytest.mark.parametrize("kind", CHAINS)
def test_a_chain_fifty_deep_still_parses(kind):
    source_ast.parse(CHAINS[kind](50))


def test_the_candidate_gets_a_one_line_syntax_verdict_and_its_honest_twin_none():
    deep = Candidate.from_source(MODELNEW + CHAINS["not"](10_000))
    verdict = precheck(deep, "cpu")
    assert verdict is not None and verdict.status.value == "compile_error" and "nested too deeply" in verdict.reason
    assert precheck(Candidate.from_source(MODELNEW + CHAINS["not"](50)), "cpu") is None


@pytest.mark.parametrize("trusted", [True, False])
def test_a_problem_that_nests_too_deep_is_a_problem_error(trusted):
    with pytest.raises(ProblemError, match="nested too deeply"):
        Problem.from_source(PROBLEM + CHAINS["not"](10_000), trusted=trusted)
    assert Problem.from_source(PROBLEM + CHAINS["not"](50), trusted=trusted).name == "problem"


def test_a_problem_file_that_nests_too_deep_is_a_problem_error(tmp_path):
    path = tmp_path / "deep.py"
    path.write_text(PROBLEM + CHAINS["minus"](10_000))
    with pytest.raises(ProblemError, match="nested too deeply"):
        Problem.from_file(path)


def test_a_reply_holding_a_deep_chain_is_no_candidate_not_a_crash_of_the_coder():
    found = extract_candidate("Here it is:\n```python\n" + MODELNEW + CHAINS["not"](10_000) + "```\n")
    assert not found.ok
    honest = extract_candidate("Here it is:\n```python\n" + MODELNEW + CHAINS["not"](50) + "```\n")
    assert honest.ok


def test_null_bytes_are_a_syntax_error():
    with pytest.raises(SyntaxError):
        source_ast.parse("x = 1\0\n")


def test_operators_after_a_closed_bracket_still_count():
    """Depth split between a bracket's contents and the operators after it, and between commas: each
    piece under the bound, the whole thousands deep; the count takes the deepest path, not the last."""
    source = "not " * 150 + "x"
    for _ in range(60):
        source = "f(" + source + ", 1)" + " + 1" * 150
    with pytest.raises(source_ast.TooDeep):
        source_ast.parse("value = " + source + "\n")


def test_real_code_stays_far_under_the_bound():
    from pathlib import Path

    import kernelloop

    deepest = max(source_ast.nesting(path.read_text()) for path in Path(kernelloop.__file__).parent.rglob("*.py"))
    assert deepest < source_ast.MAX_NESTING // 3


def test_kernelloop_verify_gives_a_verdict_line_not_a_traceback(tmp_path):
    from typer.testing import CliRunner

    from kernelloop.cli._app import app
    from tests.graph.scripted import FIXED_KERNEL, RELU_PROBLEM

    deep = tmp_path / "deep.py"
    deep.write_text(FIXED_KERNEL + "\n" + CHAINS["not"](10_000))
    result = CliRunner().invoke(app, ["verify", str(deep), "-p", str(RELU_PROBLEM), "--device", "cpu",
                                      "--workspace", str(tmp_path / "ws")])
    assert isinstance(result.exception, SystemExit) and "compile_error" in result.output
    assert "nested too" in result.output and "Traceback" not in result.output
