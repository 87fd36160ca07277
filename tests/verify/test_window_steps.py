"""Replayed windows timed step by step: the sets written ("fill"), the graph's calls ("run"), the
outputs kept and digested ("keep"), each its own request under the parent's clock.

Timed as one request, a small kernel's window was mostly the writing of its fresh values (on an
H200, 0.24 ms a call of writes and keeping around a 0.03 ms GELU), so its time per call was the
difference of two large numbers from two processes, and the parent's clock decided the kernel's
time in one verification of five by noise alone (docs/results/h200_trusted_speed/run8). Now the
run step holds the calls alone, and work moved into the other two steps is counted all the same:
a side's fill or keep step that takes longer than the trusted job's fastest of the same step adds
the excess to its window. Each test is bounded in work (fakes for both processes, a few calls).
"""

from __future__ import annotations

import pytest
import torch

from kernelloop.tools.verify import timing_driver
from kernelloop.tools.verify.timing_driver import OVERHEAD, STAGE_SLACK, STAGE_SLACK_MS, Windows


def _windows(candidate_fill: float, candidate_keep: float = 1.0) -> Windows:
    """Two windows of 10 calls: eager's run step 3 ms, the candidate's 4 ms, the overhead's 1.5 ms; every
    trusted fill 5 ms and keep 1 ms."""
    return Windows(10, {"eager": [3.0, 3.2], "candidate": [4.0, 4.1]}, [1.5, 1.6],
                   fills={"eager": [5.0, 5.1], OVERHEAD: [5.0, 5.2], "candidate": [candidate_fill] * 2},
                   keeps={"eager": [1.0, 1.0], OVERHEAD: [1.0, 1.1], "candidate": [candidate_keep] * 2})


def test_steps_as_long_as_the_trusted_jobs_add_nothing():
    backs = _windows(candidate_fill=5.1, candidate_keep=1.02)
    allowance = timing_driver.FIXED_ALLOWANCE_MS
    assert backs.excess_ms("candidate") == 0.0 and backs.excess_ms("eager") == 0.0
    assert backs.per_call() == pytest.approx({"eager": (3.0 - 1.5 - allowance) / 10, "candidate": (4.0 - 1.5 - allowance) / 10})
    assert backs.overhead_ms_per_call() == pytest.approx((1.5 + 5.0 + 1.0) / 10)
    assert backs.steps_ms()["candidate"] == {"fill": 5.1, "run": 4.0, "keep": 1.02, "excess": 0.0}


@pytest.mark.parametrize("fill, keep", [(9.0, 1.0), (5.0, 4.0), (7.0, 3.0)])
def test_work_moved_into_the_fill_or_keep_step_is_counted_as_the_calls(fill, keep):
    """Answers computed while the sets are written (fill) or while the outputs are read (keep) make that
    step longer than the trusted job's same step: past the slack, every ms of it is the window's."""
    backs = _windows(candidate_fill=fill, candidate_keep=keep)
    wanted = max(0.0, fill - 5.0 * (1 + STAGE_SLACK) - STAGE_SLACK_MS) + max(0.0, keep - 1.0 * (1 + STAGE_SLACK) - STAGE_SLACK_MS)
    assert wanted > 0 and backs.excess_ms("candidate") == pytest.approx(wanted)
    honest = _windows(candidate_fill=5.1).per_call()["candidate"]
    assert backs.per_call()["candidate"] == pytest.approx(honest + wanted / 10)
    assert backs.per_window["candidate"][0] == pytest.approx((4.0 - 1.5 - timing_driver.FIXED_ALLOWANCE_MS + wanted) / 10)


def test_the_excess_is_continuous_in_the_steps_time():
    """A step 1% slower moves the window by about that much, never by a jump (the clock rule's promise)."""
    values = [_windows(candidate_fill=5.0 + k * 0.01).per_call()["candidate"] for k in range(0, 400)]
    steps = [b - a for a, b in zip(values, values[1:])]
    assert max(steps) <= 0.01 / 10 + 1e-12 and min(steps) >= 0


class _StepChild:
    """The candidate's child as _windows sees it: each step's request logged and answered in form."""

    def __init__(self, log: list):
        self.log, self.request = log, {}

    def send(self, message: dict) -> bool:
        self.request = message["back"]
        self.log.append(("child", dict(self.request)))
        return True

    def receive(self, timed: bool = False) -> dict:
        assert timed, "a window's step is waited for with the clock running"
        if self.request["stage"] == "keep":
            return {"back": {"digests": ["0" * 32] * int(self.request["calls"])}}
        return {"back": {}}


class _StepTrusted:
    def __init__(self, log: list):
        self.log = log

    def timed(self, kind: str, request: dict) -> tuple[dict, float]:
        self.log.append(("trusted", dict(request)))
        return {}, {"fill": 5.0, "run": 2.0, "keep": 1.0}[request["stage"]]


class _Checks:
    def __init__(self):
        self.digests: list[list[str]] = []

    def check(self, seed: int, calls: int, picked: list[tuple[int, int]], digests: list[str]):
        self.digests.append(digests)
        return None


def test_a_replayed_window_is_three_requests_on_each_side_with_one_seed_and_digests_from_the_keep_step():
    log: list = []
    checks = _Checks()
    backs = timing_driver._windows(_StepChild(log), _StepTrusted(log), ["eager"], 8, {"eager": 1.0, "candidate": 1.0},
                                   checks, replayed=True)  # type: ignore[arg-type]
    assert isinstance(backs, Windows) and backs.windows >= timing_driver.MIN_WINDOWS
    per_window = log[:9]
    assert [(who, r["stage"], r.get("name")) for who, r in per_window] == [
        ("trusted", "fill", "eager"), ("trusted", "run", "eager"), ("trusted", "keep", "eager"),
        ("trusted", "fill", OVERHEAD), ("trusted", "run", OVERHEAD), ("trusted", "keep", OVERHEAD),
        ("child", "fill", None), ("child", "run", None), ("child", "keep", None)]
    for start in range(0, 9, 3):  # one seed for a side's three steps: the values the run and keep steps see
        assert len({r["seed"] for _, r in per_window[start:start + 3]}) == 1
    assert len(checks.digests) == backs.windows and all(len(d) == 8 for d in checks.digests)
    assert backs.fills[OVERHEAD] == [5.0] * backs.windows and backs.overheads == [2.0] * backs.windows


def test_the_childs_steps_come_in_order_and_run_the_captured_graph(monkeypatch):
    """The child's side on the CPU with a stand-in for the captured graph (window_graph.WindowGraph needs
    CUDA): fill writes the window's values, run replays, keep digests; a step out of order is refused."""
    from kernelloop.tools.verify.harness import LaunchCounter, _CandidateSession

    class _Channel:
        def phase(self, name: str) -> None:
            pass

    torch.manual_seed(0)
    sets = [[torch.randn(6, 5)] for _ in range(3)]
    job = {"device": "cpu", "output_specs": [[[[6, 5], "float32"]]] * 3}
    session = _CandidateSession(lambda x: x * 2, sets, LaunchCounter(), job, _Channel())  # type: ignore[arg-type]
    session.pool_sets = sets
    session.setup_timing({"fresh": True, "keep_calls": 4})
    window = session.window
    assert window is not None and window.fit >= 4

    class _Graph:  # what WindowGraph.replay does: each call on its own set, outputs at fixed addresses
        calls = 4
        outputs = [[torch.empty(6, 5)] for _ in range(4)]

        def replay(self):
            for k in range(self.calls):
                self.outputs[k][0].copy_(window.sets[k][0] * 2)
            return self.outputs

    session.graph = _Graph()  # type: ignore[assignment]
    with pytest.raises(RuntimeError, match="'run' step came after None"):
        session.back({"stage": "run", "calls": 4, "seed": 1})
    assert session.back({"stage": "fill", "calls": 4, "seed": 7}) == {}
    with pytest.raises(RuntimeError, match="'keep' step came after 'fill'"):
        session.back({"stage": "keep", "calls": 4, "seed": 7})
    assert session.back({"stage": "run", "calls": 4, "seed": 7}) == {}
    digests = session.back({"stage": "keep", "calls": 4, "seed": 7})["digests"]
    assert len(digests) == 4 and session.staged is None
    values = session.pool.request(7, 4)  # type: ignore[union-attr]
    for k in range(4):
        assert torch.equal(session.kept.raw(k).view(torch.float32).view(6, 5), values.values(k)[0] * 2)  # type: ignore[union-attr]


def test_a_window_no_longer_than_its_overhead_is_measured_again_and_never_read_as_a_time():
    """Noise can make a side's fastest window no longer than the fastest overhead window: that side is
    unresolved, the windows go on (to MAX_WINDOWS), and its line says the clock could not resolve it
    rather than "0.0000 ms"."""
    from kernelloop.records import TimingStats
    from kernelloop.tools.verify.speed import clock_line, counted_ms

    backs = Windows(10, {"eager": [3.0], "candidate": [1.4]}, [1.5])
    assert backs.unresolved() == ["candidate"] and backs.per_call()["candidate"] == 0.0
    log: list = []

    class _Slow(_StepTrusted):  # an overhead run step longer than anything the child can answer in
        def timed(self, kind: str, request: dict) -> tuple[dict, float]:
            self.log.append(("trusted", dict(request)))
            return {}, {"fill": 5.0, "run": 50.0, "keep": 1.0}[request["stage"]]

    windows = timing_driver._windows(_StepChild(log), _Slow(log), ["eager"], 8, {"eager": 1.0, "candidate": 1.0},
                                     _Checks(), replayed=True)  # type: ignore[arg-type]
    assert isinstance(windows, Windows) and windows.windows == timing_driver.MAX_WINDOWS
    stats = TimingStats(name="candidate", median_ms=0.02, iqr_ms=0.0, min_ms=0.02, mean_ms=0.02, samples=50,
                        host_ms_per_call=0.0, replayed=True, window_calls=40)
    stats.counted_ms, stats.clock = counted_ms(stats.median_ms, stats.host_ms_per_call)
    line = clock_line({"candidate": stats}, ["candidate"])
    assert "under the clock's resolution" in line and "0.0000" not in line, line


def test_events_far_over_a_replayed_windows_run_step_are_contradicted_and_the_line_says_so():
    """A run step's wall (round trip and all) bounds its calls' device time from above: run 13's 4_RMSNorm
    read 0.163 ms events where its run step allowed 0.039 ms a call. Such a side's rounds are measured
    again; events under the bound (or plain windows, which bound nothing step by step) are left alone."""
    from kernelloop.records import Measurement
    from kernelloop.tools.verify.speed import judge_speed

    backs = _windows(candidate_fill=5.1)  # run steps: eager 3.0 ms, the candidate 4.0 ms, for 10 calls
    bound = timing_driver.EVENTS_OVER_RUN_STEP
    assert backs.contradicted({"eager": 0.29, "candidate": 0.39}) == []
    assert backs.contradicted({"eager": 0.29, "candidate": 0.4 * bound + 0.01}) == ["candidate"]
    assert backs.contradicted({"eager": 0.3 * bound + 0.01, "candidate": 0.1}) == ["eager"]
    plain = Windows(10, {"eager": [3.0], "candidate": [0.5]}, [0.2])
    assert plain.contradicted({"eager": 1.0, "candidate": 1.0}) == []
    samples = {"candidate": [0.2] * 50, "candidate_again": [0.2] * 50, "eager": [0.3] * 50}
    verdict = judge_speed(Measurement(samples_ms=samples, host_ms_per_call={"candidate": 0.25, "eager": 0.28},
                                      replayed=["candidate", "eager"], window_calls={"candidate": 10, "eager": 10},
                                      rounds_remeasured=["candidate"]))
    assert verdict.timings["candidate"].remeasured and not verdict.timings["eager"].remeasured
    assert "rounds measured again" in verdict.speed_source.split("; eager")[0], verdict.speed_source
