"""Hostile directories: a problems or candidates dir is not ours to trust.

An entry named relu.py may be a named pipe (an open or a read that blocks forever: it hung
`kernelloop bench --candidates`), a symlink (to a secret outside, to /proc/self/environ, to a
device), a socket, a device, a directory or a file of gigabytes. Every reader of problem and
candidate files (problem.read_source, bench's matching and resume keys, the MCP and LangChain
requests) treats each as a one-line error of that item, at once: never a hang, never the link's
target read.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelloop.config import defaults
from kernelloop.evals import suite as bench
from kernelloop.evals.records import Mode
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.records import Status, Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELU = (FIXTURES / "problems" / "relu.py").read_text()
HONEST = (FIXTURES / "honest" / "relu_triton.py").read_text()
SECRET = "sk-hostile-dir-SECRET"
HANG_S = 20.0  # a hang detector, not a benchmark: each read here takes milliseconds


def finishes(work: Callable[[], object], limit_s: float = HANG_S) -> object:
    """work()'s value (or the exception it raised), failing the test if it has not returned in limit_s."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"still blocked after {limit_s:g} s"
    return box[0]


def _fifo(path: Path) -> str:
    os.mkfifo(path)
    return "named pipe"


def _symlink_outside(path: Path) -> str:
    secret = path.parent.parent / "secret.py"
    secret.write_text(f"# {SECRET}\n" + HONEST)
    path.symlink_to(secret)
    return "symlink"


def _symlink_environ(path: Path) -> str:
    path.symlink_to("/proc/self/environ")
    return "symlink"


def _symlink_dangling(path: Path) -> str:
    path.symlink_to(path.parent / "nowhere.py")
    return "symlink"


def _socket(path: Path) -> str:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))  # left bound for the test's life: a listening name in the directory
    _SOCKETS.append(sock)
    return "socket"


def _directory(path: Path) -> str:
    path.mkdir()
    return "directory"


def _oversized(path: Path) -> str:
    with path.open("wb") as handle:
        handle.truncate(defaults.MAX_SOURCE_BYTES + 1)  # sparse: a megabyte that costs nothing
    return "limit"


_SOCKETS: list[socket.socket] = []
KINDS = {"fifo": _fifo, "symlink_outside": _symlink_outside, "symlink_environ": _symlink_environ,
         "symlink_dangling": _symlink_dangling, "socket": _socket, "directory": _directory, "oversized": _oversized}


@pytest.fixture(scope="module", autouse=True)
def _close_sockets():
    yield
    for sock in _SOCKETS:
        sock.close()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_reading_a_hostile_entry_is_one_line_at_once(tmp_path, kind):
    where = tmp_path / "dir"
    where.mkdir()
    path = where / "relu.py"
    said = KINDS[kind](path)
    for read in (lambda: Candidate.from_file(path), lambda: Problem.from_file(path)):
        error = finishes(read)
        assert isinstance(error, ProblemError), error
        assert said in str(error) and "\n" not in str(error) and SECRET not in str(error)


def test_a_device_is_not_read():
    error = finishes(lambda: Candidate.from_file(Path("/dev/zero")))  # endless: read whole, it never returns
    assert isinstance(error, ProblemError) and "a device" in str(error)


def test_a_device_node_in_a_directory_is_not_read(tmp_path):
    node = tmp_path / "relu.py"
    try:
        os.mknod(node, 0o600 | 0o020000, os.makedev(1, 5))  # a character device: /dev/zero's numbers
    except (PermissionError, OSError):
        pytest.skip("no permission to make a device node here")
    error = finishes(lambda: Candidate.from_file(node))
    assert isinstance(error, ProblemError) and "a device" in str(error)


# ------------------------------------------------------------------------- bench over such directories

class EchoVerifier:
    """Judges nothing: a candidate it is handed is `correct` (only files read the careful way get here)."""

    def verify(self, candidate: Candidate, problem: Problem, time_left_s=None) -> Verdict:
        assert SECRET not in candidate.source
        return Verdict(status=Status.correct, reason="read", device="cpu")

    def close(self) -> None:
        pass


def test_bench_scores_a_candidates_dir_of_traps_one_line_each(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    names = sorted(KINDS)
    for name in [*names, "honest"]:
        (problems / f"{name}.py").write_text(RELU)
    cands = tmp_path / "cands"
    cands.mkdir()
    for name in names:
        KINDS[name](cands / f"{name}.py")
    (cands / "honest.py").write_text(HONEST)
    work = bench.scoring_work(lambda device: EchoVerifier())
    result = finishes(lambda: bench.run_bench(bench.resolve_suite(str(problems)), Mode.candidates, work, ["cpu"],
                                              tmp_path / "out", candidates_dir=cands, show_progress=False), 120.0)
    assert isinstance(result, bench.BenchResult), result
    rows = {row.problem: row for row in result.summary.per_problem}
    assert rows["honest"].solved
    for name in names:  # the directory one is matched too: its name ends in .py
        assert not rows[name].solved and rows[name].reason.startswith("candidate file not read:"), rows[name]
        assert "\n" not in rows[name].reason
    report = result.files.report_md.read_text()
    assert SECRET not in report and SECRET not in result.results_path.read_text()


def test_bench_leaves_out_problem_entries_that_are_traps_saying_so(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "honest.py").write_text(RELU)
    for name in sorted(KINDS):
        KINDS[name](problems / f"{name}.py")
    suite = finishes(lambda: bench.resolve_suite(str(problems)))
    assert isinstance(suite, bench.Suite), suite
    assert [p.name for p in suite.problems] == ["honest"]
    assert len(suite.skipped) == len(KINDS) and all("\n" not in line for line in suite.skipped)
    cands = tmp_path / "cands"
    cands.mkdir()
    (cands / "honest.py").write_text(HONEST)
    result = bench.run_bench(suite, Mode.candidates, bench.scoring_work(lambda device: EchoVerifier()), ["cpu"],
                             tmp_path / "out", candidates_dir=cands, show_progress=False)
    assert sum("problem file not read" in note for note in result.summary.notes) == len(KINDS)


def test_the_bench_command_with_a_fifo_candidate_ends(tmp_path):
    """The review's hang: `kernelloop bench DIR --candidates DIR` with a FIFO named relu.py."""
    from typer.testing import CliRunner

    from kernelloop.cli._app import app

    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "relu.py").write_text(RELU)
    cands = tmp_path / "cands"
    cands.mkdir()
    os.mkfifo(cands / "relu.py")
    started = time.monotonic()
    result = finishes(lambda: CliRunner().invoke(app, ["bench", str(problems), "--candidates", str(cands), "--device",
                                                       "cpu", "--out", str(tmp_path / "out"), "--no-progress",
                                                       "--workspace", str(tmp_path / "ws")]), 300.0)
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 300.0
    assert "named pipe" in (tmp_path / "out" / "report.md").read_text()


# ------------------------------------------------------------------------- the MCP server and LangChain tool

@pytest.mark.parametrize("kind", ["fifo", "symlink_outside", "socket", "oversized"])
def test_mcp_and_langchain_requests_refuse_trap_paths_in_one_line(tmp_path, kind):
    from kernelloop.serve.requests import VerifyRequest

    (tmp_path / "d").mkdir()
    trap = tmp_path / "d" / "relu.py"
    KINDS[kind](trap)
    problem, candidate = tmp_path / "problem.py", tmp_path / "candidate.py"
    problem.write_text(RELU)
    candidate.write_text(HONEST)
    for fields in ({"problem_path": str(trap), "candidate_path": str(candidate)},
                   {"problem_path": str(problem), "candidate_path": str(trap)}):
        request = VerifyRequest(**fields, device="cpu")

        def load(request=request):
            request.load_candidate()
            return request.load_problem(tmp_path / "ws")

        error = finishes(load)
        assert isinstance(error, ProblemError), error
        assert str(trap) in str(error) and "\n" not in str(error) and SECRET not in str(error), error
