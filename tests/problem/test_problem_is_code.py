"""A problem is code: one from outside never runs in the orchestrator's process.

Through the MCP server, `verify_kernel(problem_source=...)` imported the problem in the server's
own process, which holds the API key, and a problem that patched the comparison at import time
passed every later candidate of every problem. Now a problem from outside (MCP, LangChain, a
directory bench was pointed at) is only parsed here; its trusted job, in the sandbox, imports and
checks it and sends back what the parent needs as plain data (its tolerance). The hostile problems
in tests/fixtures/hostile_problems/ each try one thing at import time; after each, through the
real MCP tools and the real verifier on the CPU: nothing was written by this process, the key is
in nothing returned, and an honest problem's wrong candidate is still judged incorrect.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import torch
from mcp import Client

import kernelloop.tools.verify.compare as compare
from kernelloop.problem import Problem, ProblemError
from kernelloop.records import Status, Verdict
from kernelloop.serve.jobs import JobManager
from kernelloop.serve.mcp import build_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HOSTILE = FIXTURES / "hostile_problems"
RELU = FIXTURES / "problems" / "relu.py"
HONEST = (FIXTURES / "honest" / "relu_triton.py").read_text()
# A ReLU that forgets the negative half: incorrect against any honest comparison.
WRONG = HONEST.replace("tl.maximum(x, 0.0)", "x")
SECRET = "sk-problem-is-code-SECRET-42"
ORIGINAL = {"allclose": torch.allclose, "assert_close": torch.testing.assert_close,
            "compare_outputs": compare.compare_outputs, "compare_one": compare.compare_one,
            "tolerance_for": compare.tolerance_for, "post_init": Verdict.__post_init__}


_IMPORTED: set[str] = set()  # problems imported in this process before the test (trusted ones other tests load)


def _problem_modules() -> set[str]:
    return {name for name in sys.modules if name.startswith("kernelloop_problem_")}


@pytest.fixture(autouse=True)
def _imported_before():
    _IMPORTED.clear()
    _IMPORTED.update(_problem_modules())


def _untouched() -> None:
    """This process is as it was: nothing a problem did at import time reached it."""
    now = {"allclose": torch.allclose, "assert_close": torch.testing.assert_close,
           "compare_outputs": compare.compare_outputs, "compare_one": compare.compare_one,
           "tolerance_for": compare.tolerance_for, "post_init": Verdict.__post_init__}
    assert now == ORIGINAL, [name for name in now if now[name] is not ORIGINAL[name]]
    assert _problem_modules() <= _IMPORTED, "a problem was imported here"


def _source(name: str, marker: Path) -> str:
    return (HOSTILE / f"{name}.py").read_text().replace("MARKER_PATH", str(marker))


@pytest.fixture
def manager(tmp_path, monkeypatch) -> Iterator[JobManager]:
    monkeypatch.setenv("KERNELLOOP_API_KEY", SECRET)
    with JobManager(tmp_path / "ws") as jobs:
        yield jobs


async def _verify(client: Client, **arguments) -> dict:
    result = await client.call_tool("verify_kernel", {"device": "cpu", "wait_s": 10.0, **arguments})
    text = result.content[0].text if result.content else ""
    if result.is_error:
        return {"error": text}
    status = result.structured_content
    while status["state"] not in ("succeeded", "failed", "cancelled"):
        status = (await client.call_tool("job_status", {"job_id": status["job_id"], "wait_s": 10.0})).structured_content
    return status


HOSTILE_NAMES = sorted(path.stem for path in HOSTILE.glob("*.py"))


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_an_mcp_problem_source_runs_only_in_the_sandbox(manager, tmp_path, name):
    marker = tmp_path / "written-by-the-problem.txt"

    async def session() -> tuple[dict, dict]:
        async with Client(build_server(manager, "cpu")) as client:
            hostile = await _verify(client, problem_source=_source(name, marker), problem_name=name,
                                    candidate_source=HONEST)
            _untouched()  # checked while the server still runs: the patch would be live now
            honest = await _verify(client, problem_path=str(RELU), candidate_source=WRONG)
            return hostile, honest

    hostile, honest = anyio.run(session)
    assert SECRET not in repr(hostile), "the API key reached the caller"
    assert honest.get("verdict", {}).get("status") == Status.incorrect.value, honest
    _untouched()
    isolation = (honest.get("verdict") or {}).get("isolation")
    if isolation == "bubblewrap":  # in plain mode a sandboxed job can write what the user can: no promise then
        assert not marker.exists(), "the problem wrote a file outside its sandbox"


def test_a_langchain_problem_source_runs_only_in_the_sandbox(tmp_path, monkeypatch):
    from kernelloop.serve.langchain import verify_tool

    monkeypatch.setenv("KERNELLOOP_API_KEY", SECRET)
    marker = tmp_path / "written-by-the-problem.txt"
    tool = verify_tool(device="cpu", workspace=tmp_path / "ws")
    for name in ("patch_comparison", "steal_api_key", "write_file"):
        answer = tool.invoke({"problem_source": _source(name, marker), "problem_name": name,
                              "candidate_source": HONEST})
        assert SECRET not in str(answer)
        _untouched()
    wrong = tool.invoke({"problem_path": str(RELU), "candidate_source": WRONG})
    assert "incorrect" in str(wrong)
    _untouched()


def test_bench_over_a_directory_runs_its_problems_only_in_the_sandbox(tmp_path, monkeypatch):
    from kernelloop.evals import suite as bench
    from kernelloop.evals.records import Mode
    from kernelloop.tools.verify.verifier import Verifier

    monkeypatch.setenv("KERNELLOOP_API_KEY", SECRET)
    problems, cands = tmp_path / "problems", tmp_path / "cands"
    problems.mkdir()
    cands.mkdir()
    marker = tmp_path / "written-by-the-problem.txt"
    for name in ("patch_comparison", "patch_verdicts"):
        (problems / f"{name}.py").write_text(_source(name, marker))
        (cands / f"{name}.py").write_text(HONEST)
    (problems / "relu.py").write_text(RELU.read_text())
    (cands / "relu.py").write_text(WRONG)
    suite = bench.resolve_suite(str(problems))
    assert all(not problem.trusted for problem in suite.problems)
    _untouched()
    work = bench.scoring_work(lambda device: Verifier(device="cpu", workspace=tmp_path / "ws", time_it=False))
    result = bench.run_bench(suite, Mode.candidates, work, ["cpu"], tmp_path / "out", candidates_dir=cands,
                             show_progress=False)
    rows = {row.problem: row for row in result.summary.per_problem}
    assert rows["relu"].best_status is Status.incorrect  # the wrong kernel stays wrong beside the patchers
    _untouched()


def test_an_outside_problem_is_parsed_never_imported(tmp_path):
    marker = tmp_path / "marker.txt"
    path = tmp_path / "write_file.py"
    path.write_text(_source("write_file", marker))
    problem = Problem.from_file(path, trusted=False)
    assert not marker.exists()
    with pytest.raises(ProblemError, match="not run in this process"):
        _ = problem.module
    with pytest.raises(ProblemError, match="missing Model"):
        (tmp_path / "no_model.py").write_text("import torch\ndef get_inputs(): return []\n"
                                             "def get_init_inputs(): return []\n")
        Problem.from_file(tmp_path / "no_model.py", trusted=False)
    _untouched()


def test_a_bad_tolerance_from_the_sandbox_is_a_problem_error(tmp_path):
    """What the trusted job sends is checked again: a problem from outside may say anything."""
    from kernelloop.problem_meta import checked_tolerance

    assert checked_tolerance({"float32": {"atol": 1e-4}}, "p") == {"float32": {"atol": 1e-4}}
    for bad in ({"float32": {"atol": float("nan")}}, {"float32": {"atol": -1}}, {"float32": {"evil": 1}},
                {"float32": [1]}, ["atol"], {"float32": {"atol": True}}):
        with pytest.raises(ProblemError):
            checked_tolerance(bad, "p")


def test_the_checks_the_parent_no_longer_runs_run_in_the_trusted_job(tmp_path):
    """A problem from outside with a Model that is no nn.Module: the sandboxed job says so in one line."""
    from kernelloop.problem import Candidate
    from kernelloop.tools.verify.verifier import Verifier

    path = tmp_path / "not_a_module.py"
    path.write_text("import torch\nclass Model:\n    pass\ndef get_inputs():\n    return [torch.randn(3)]\n"
                    "def get_init_inputs():\n    return []\n")
    problem = Problem.from_file(path, trusted=False)
    with Verifier(device="cpu", workspace=tmp_path / "ws", time_it=False) as verifier:
        with pytest.raises(ProblemError, match="Model must be a subclass of torch.nn.Module") as caught:
            verifier.verify(Candidate(source=HONEST), problem)
    assert "\n" not in str(caught.value)
