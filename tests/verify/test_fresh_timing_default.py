"""Fresh timing is the default (Verifier(fresh_timing=True), `--fresh-timing`); `--no-fresh-timing`
(fresh_timing=False) times the trial sets in turn: nothing made for fresh values in the trusted job
or the candidate's child (no pool, no donor sets, no kept copies, no window sets, no digest
kernel), no regen. Both ways time every side back to back by the same windows."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status
from kernelloop.tools.verify import timing_driver

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = FIXTURES / "problems"


def test_fresh_timing_is_on_by_default_and_the_rehearsal_needs_it():
    from kernelloop.tools.verify.verifier import Verifier

    assert inspect.signature(Verifier).parameters["fresh_timing"].default is True
    with pytest.raises(ValueError, match="needs fresh_timing=True"):
        Verifier(device="cpu", fresh_timing=False, rehearse_timing=True)


class _Session:
    """The candidate's child as the driver sees it: every request logged, each answered in form."""

    def __init__(self, log: list):
        self.log, self.last = log, None

    def send(self, message: dict) -> bool:
        self.log.append(("child", message))
        self.last = message
        return True

    def receive(self, timed: bool = False) -> dict:
        self.log.append(("child receive", {"timed": timed}))
        kind, request = next(iter(self.last.items()))
        answers = {"time": {"hold_ms": 0.0}, "back": {}, "profile": {},
                   "block": {"samples_ms": {"candidate": [1.0] * request.get("rounds", 0),
                                            "candidate_again": [1.0] * request.get("rounds", 0)}}}
        return {kind: answers[kind]}


class _Server:
    """The trusted job as the driver sees it: every request logged."""

    def __init__(self, log: list):
        self.log = log

    def ask(self, kind: str, request: dict) -> dict:
        self.log.append(("trusted", {kind: request}))
        if kind == "timing":
            return {"names": ["eager"], "compile_s": {}, "roofline": {}, "device_name": None}
        return {"samples_ms": {"eager": [2.0] * request["rounds"]}}

    def timed(self, kind: str, request: dict) -> tuple[dict, float]:
        self.log.append(("trusted", {kind: request}))
        return {}, 5.0


def test_without_fresh_timing_the_driver_times_the_trial_sets_and_every_side_back_to_back(monkeypatch):
    """Blocks as before fresh timing (1 ms a candidate call, 2 ms eager's: 10 and 90 rounds), then
    windows of 5 calls (WINDOW_MS of eager's work), each round a window of every baseline and one of
    the candidate, its answer waited for with the clock running; no seed, no fresh or keep_calls
    field, no overhead window, no pick, no regen."""
    monkeypatch.setattr(timing_driver.gpu, "measure_around", lambda index: contextlib.nullcontext(None))
    log: list = []
    judged = timing_driver.drive_timing(_Session(log), _Server(log), None, skip=["compile"])  # type: ignore[arg-type]
    assert not isinstance(judged, str), judged
    blocks = [
        ("trusted", {"timing": {"skip": ["compile"]}}),
        ("child", {"time": {}}), ("child receive", {"timed": False}),
        ("trusted", {"block": {"rounds": 10}}),
        ("child", {"block": {"rounds": 10}}), ("child receive", {"timed": False}),
        ("trusted", {"block": {"rounds": 90}}),
        ("child", {"block": {"rounds": 90}}), ("child receive", {"timed": False}),
    ]
    window = [("trusted", {"back": {"name": "eager", "calls": 5}}),
              ("child", {"back": {"calls": 5}}), ("child receive", {"timed": True})]
    profile = [("child", {"profile": {}}), ("child receive", {"timed": False})]
    assert log[:len(blocks)] == blocks and log[-len(profile):] == profile
    windows = log[len(blocks):-len(profile)]
    rounds = len(windows) // len(window)
    assert windows == window * rounds and timing_driver.MIN_WINDOWS <= rounds <= timing_driver.MAX_WINDOWS
    wanted = (5.0 - timing_driver.FIXED_ALLOWANCE_MS) / 5  # the trusted window: 5 ms, less the allowance, over 5 calls
    assert judged.timings["eager"].host_ms_per_call == pytest.approx(wanted)
    with pytest.raises(ValueError, match="needs checks"):
        timing_driver.drive_timing(_Session([]), _Server([]), None, rehearse=True)  # type: ignore[arg-type]


def test_without_fresh_timing_the_trusted_job_makes_and_times_as_before(tmp_path, monkeypatch):
    """No pool of sets for fresh values, no donor set, the inputs file's extra only the problem's
    init inputs, nothing run between timed calls, no kept copies or window sets, and nothing to
    remake a timed call from."""
    from kernelloop.tools.profile import measure
    from kernelloop.tools.verify.harness import read_sets
    from kernelloop.tools.verify.reference_job import ReferenceJob

    monkeypatch.setattr(measure, "baseline_callables",
                        lambda problem, device, sets, seed, full, with_compile=True: ({"eager": lambda i: None}, {}, None))
    job = ReferenceJob({"device": "cpu", "problem_path": str(PROBLEMS / "matmul.py")})
    job.make({"seeds": [5], "variants": True, "inputs_path": str(tmp_path / "in.sets"),
              "outputs_path": str(tmp_path / "out.sets")})
    sets, extra = read_sets(str(tmp_path / "in.sets"))
    assert set(extra) == {"init_inputs"} and len(sets) == 1  # one seed, no donor
    assert job.pool is None and job.like == []
    answer = job.setup_timing({"skip": ["compile", "compile_autotune"]})
    assert answer["window_sets"] == 0 and answer["fresh_values"] is False
    assert job.kept is None and job.window is None and job._timing.prepare is None
    assert job._timing.n_input_sets == len(job.sets)
    job.block({"rounds": 2})  # no seed asked for
    assert job.fresh is None
    assert job.back_to_back({"name": "eager", "calls": 3}) == {}
    with pytest.raises(RuntimeError, match="before any trial sets"):
        job.regen({"seed": 1, "calls": 2, "indices": [0], "outputs_path": str(tmp_path / "regen.sets")})


class _Channel:
    def phase(self, name: str) -> None:
        self.phase_name = name


def test_without_fresh_timing_the_candidates_child_times_the_trial_sets_as_before():
    """The child's timing on the trial sets in turn: no pool, no kept copies, no window, no hooks
    between timed calls, and the launch counter left as installed (the digest kernel never runs)."""
    from kernelloop.tools.verify.harness import LaunchCounter, _CandidateSession

    counter = LaunchCounter()
    sets = [[torch.randn(4, 4)], [torch.randn(4, 4)]]
    session = _CandidateSession(lambda x: x * 2, sets, counter, {"device": "cpu"}, _Channel())  # type: ignore[arg-type]
    assert set(session.setup_timing({})) == {"hold_ms"}  # the parent's "time" request as before: {}
    assert session.pool is None and session.kept is None and session.window is None
    assert session.timing is not None and session.timing.prepare is None and session.timing.after is None
    assert session.timing.n_input_sets == 2 and not counter._own_let_through
    assert session.block({"rounds": 3})["samples_ms"]["candidate"] and "digests" not in session.block({"rounds": 1})
    assert session.back({"calls": 4}) == {}
    with pytest.raises(RuntimeError, match="before timing with fresh values"):
        session.pick({"calls": [0]})


def test_a_cpu_verification_asks_the_trusted_job_for_nothing_fresh_timing_needs(tmp_path, monkeypatch):
    """A whole verification with the default Verifier on the CPU, where nothing is timed: no make
    request names fresh values or donor seeds, and no regen is asked for."""
    from kernelloop.tools.verify.reference_server import ReferenceServer
    from kernelloop.tools.verify.verifier import Verifier

    asked: list[tuple[str, dict]] = []
    original = ReferenceServer.ask

    def recorded(self, kind, request, timed=False):
        asked.append((kind, dict(request or {})))
        return original(self, kind, request, timed)

    monkeypatch.setattr(ReferenceServer, "ask", recorded)
    with Verifier(device="cpu", workspace=tmp_path, compile_timeout_s=60.0, run_timeout_s=120.0) as verifier:
        verdict = verifier.verify(Candidate.from_file(FIXTURES / "honest" / "relu_triton.py"),
                                  Problem.from_file(PROBLEMS / "relu.py"))
    assert verdict.status is Status.correct, verdict.reason
    makes = [request for kind, request in asked if kind == "make"]
    assert makes and not any({"fresh", "donor_seeds"} & set(request) for request in makes)
    assert "regen" not in [kind for kind, _ in asked]
    assert "timed calls picked at random" not in verdict.feedback


def test_the_cli_times_on_fresh_values_unless_told_not_to(tmp_path, monkeypatch):
    """`kernelloop verify` hands fresh_timing=True to the Verifiers' pool, `--no-fresh-timing` False."""
    from typer.testing import CliRunner

    from kernelloop.cli import app
    from kernelloop.tools.verify import pool

    monkeypatch.setenv("KERNELLOOP_HOME", str(tmp_path))
    asked: list[dict] = []

    def no_pool(device, ray=None, **options):
        asked.append(options)
        raise ValueError("no pool in this test")

    monkeypatch.setattr(pool, "make_pool", no_pool)
    monkeypatch.setattr("kernelloop.cli.verify_cmd.prestart_workers", lambda *args: None)
    candidate, problem = FIXTURES / "honest" / "relu_triton.py", PROBLEMS / "relu.py"
    cli = CliRunner()
    for flags, wanted in (([], True), (["--fresh-timing"], True), (["--no-fresh-timing"], False)):
        result = cli.invoke(app, ["verify", str(candidate), "--problem", str(problem), "--device", "cpu",
                                  "--workspace", str(tmp_path), "--no-progress", *flags])
        assert result.exit_code == 2 and "no pool in this test" in result.output, result.output
        assert asked[-1]["fresh_timing"] is wanted
