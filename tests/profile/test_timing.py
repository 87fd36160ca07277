"""timing.py on the CPU: the statistics against hand-computed values, the round loop on a fake clock."""

from __future__ import annotations

import math

import pytest
import torch

from kernelloop.tools.profile import timing
from kernelloop.tools.profile.timing import (
    MIN_NOISE_FLOOR,
    TimingError,
    is_win,
    noise_floor,
    run_rounds,
    speedup_from_rounds,
    summarize,
)

# --------------------------------------------------------------------------- statistics


def test_summarize_hand_computed():
    stats = summarize("candidate", [4.0, 1.0, 3.0, 2.0, 5.0])
    assert stats.name == "candidate"
    assert stats.median_ms == 3.0
    assert stats.min_ms == 1.0
    assert stats.mean_ms == 3.0
    # linear-interpolation quartiles of 1..5 are 2 and 4
    assert stats.iqr_ms == pytest.approx(2.0)
    assert stats.samples == 5


def test_summarize_single_sample_has_zero_spread():
    stats = summarize("eager", [0.25])
    assert (stats.median_ms, stats.iqr_ms, stats.min_ms, stats.mean_ms) == (0.25, 0.0, 0.25, 0.25)


@pytest.mark.parametrize("samples", [[], [1.0, float("nan")], [1.0, -0.5], [float("inf")]])
def test_summarize_rejects_bad_samples(samples):
    with pytest.raises(TimingError, match="eager"):
        summarize("eager", samples)


def test_speedup_is_median_of_per_round_ratios_not_ratio_of_medians():
    baseline = [2.0, 2.0, 10.0]
    candidate = [1.0, 4.0, 5.0]
    # per-round ratios 2.0, 0.5, 2.0 -> median 2.0; ratio of medians would be 2/4 = 0.5
    assert speedup_from_rounds(baseline, candidate) == 2.0


def test_speedup_needs_aligned_rounds():
    with pytest.raises(TimingError, match="not aligned"):
        speedup_from_rounds([1.0, 2.0], [1.0])


def test_speedup_rejects_zero_candidate_time():
    with pytest.raises(TimingError, match="denominator"):
        speedup_from_rounds([1.0], [0.0])


def test_noise_floor_of_identical_times_is_the_minimum():
    assert noise_floor([1.0] * 10, [1.0] * 10) == MIN_NOISE_FLOOR


def test_noise_floor_hand_computed():
    # ratios 1.0, 1.1, 1.2, 1.3 (a/b): median 1.15; quartiles 1.075 and 1.225 -> IQR 0.15
    a = [1.0, 1.1, 1.2, 1.3]
    b = [1.0, 1.0, 1.0, 1.0]
    sigma = 0.15 / 1.349
    spread = 2.0 * math.sqrt(math.pi / 2) * sigma / math.sqrt(4) / 1.15
    assert noise_floor(a, b) == pytest.approx(0.15 + spread)


def test_noise_floor_grows_with_spread_and_shrinks_with_samples():
    jittery = [1.0, 1.2] * 8
    steady = [1.0, 1.02] * 8
    ones = [1.0] * 16
    assert noise_floor(jittery, ones) > noise_floor(steady, ones)
    assert noise_floor(jittery * 4, ones * 4) < noise_floor(jittery, ones)


def test_is_win_needs_to_clear_the_noise():
    assert is_win(1.10, 0.05)
    assert not is_win(1.04, 0.05)
    assert not is_win(1.05, 0.05)  # exactly at the floor is not a win
    with pytest.raises(TimingError):
        is_win(-1.0, 0.05)
    with pytest.raises(TimingError):
        is_win(1.1, float("nan"))


# --------------------------------------------------------------------------- the round loop


class FakeDevice:
    """A clock in ms that callables advance, and a CallTimer reading it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.flushes = 0
        self.syncs = 0
        self.holds: list[float] = []
        self._start = None
        self._done: list[float] = []

    def now_ms(self) -> float:
        return self.now

    def start(self) -> None:
        self.flushes += 1
        self._start = self.now

    def stop(self) -> None:
        self._done.append(self.now - self._start)

    def collect_ms(self) -> list[float]:
        done, self._done = self._done, []
        return done

    def sync(self) -> None:
        self.syncs += 1

    def hold(self, ms: float) -> None:
        self.holds.append(ms)


def make_fns(device: FakeDevice, durations_ms: dict[str, float], log: list[tuple[str, int]]):
    def make(name: str, duration_ms: float):
        def call(input_set: int) -> None:
            log.append((name, input_set))
            device.now += duration_ms + 0.001 * input_set  # input sets differ a little

        return call

    return {name: make(name, ms) for name, ms in durations_ms.items()}


def test_rounds_are_aligned_rotated_and_cycle_input_sets():
    device = FakeDevice()
    log: list[tuple[str, int]] = []
    fns = make_fns(device, {"candidate": 1.0, "eager": 2.0, "compile": 3.0}, log)
    samples = run_rounds(fns, 2, device, device.now_ms, min_samples=6, min_total_ms=0.0, warmup_ms=0.0)

    assert {name: len(ms) for name, ms in samples.items()} == {"candidate": 6, "eager": 6, "compile": 6}
    # the first calls are the untimed ones, on input set 0
    assert log[:3] == [("candidate", 0), ("eager", 0), ("compile", 0)]
    timed = log[3:]
    rounds = [timed[i : i + 3] for i in range(0, len(timed), 3)]
    assert [name for name, _ in rounds[0]] == ["candidate", "eager", "compile"]
    assert [name for name, _ in rounds[1]] == ["eager", "compile", "candidate"]
    assert [name for name, _ in rounds[2]] == ["compile", "candidate", "eager"]
    assert [{s for _, s in r} for r in rounds] == [{0}, {1}, {0}, {1}, {0}, {1}]
    # aligned: round r of each name ran on input set r % 2, with its own duration
    assert samples["eager"] == pytest.approx([2.0, 2.001, 2.0, 2.001, 2.0, 2.001])
    assert samples["compile"][1] == pytest.approx(3.001)
    assert device.flushes == 18  # one flush per timed call


def test_warmup_is_time_based():
    device = FakeDevice()
    log: list[tuple[str, int]] = []
    fns = make_fns(device, {"candidate": 10.0}, log)
    run_rounds(fns, 1, device, device.now_ms, min_samples=1, min_total_ms=0.0, warmup_ms=200.0)
    # 1 untimed call, then warm-up calls until 200 ms passed (20 calls of 10 ms), then 1 timed round
    assert len(log) == 1 + 20 + 1


def test_the_hold_covers_the_slowest_host_enqueue_seen_in_warm_up():
    device = FakeDevice()
    fns = make_fns(device, {"candidate": 0.03, "eager": 0.4}, [])  # here host time = call time
    run_rounds(fns, 1, device, device.now_ms, min_samples=1, min_total_ms=0.0, warmup_ms=5.0)
    assert device.holds == [pytest.approx(timing.HOLD_FACTOR * 0.4 + timing.HOLD_MARGIN_MS)]
    hiccup = FakeDevice()
    calls = iter([0.03, 5.0] + [0.03] * 1000)  # the untimed call, one slow warm-up call (a GC pause, say), fast ones
    fns = {"candidate": lambda i: setattr(hiccup, "now", hiccup.now + next(calls))}
    run_rounds(fns, 1, hiccup, hiccup.now_ms, min_samples=1, min_total_ms=0.0, warmup_ms=10.0)
    assert hiccup.holds == [pytest.approx(timing.HOLD_FACTOR * 0.03 + timing.HOLD_MARGIN_MS)]
    slow = FakeDevice()
    run_rounds(make_fns(slow, {"candidate": 50.0}, []), 1, slow, slow.now_ms, min_samples=1, min_total_ms=0.0,
               warmup_ms=5.0)
    assert slow.holds == [timing.MAX_HOLD_MS]  # a call that waits on the device: the hold is capped


def test_runs_until_candidate_time_reaches_min_total():
    device = FakeDevice()
    fns = make_fns(device, {"candidate": 0.5, "eager": 5.0}, [])
    samples = run_rounds(fns, 1, device, device.now_ms, min_samples=3, min_total_ms=10.0, warmup_ms=0.0)
    assert len(samples["candidate"]) == 20  # 20 x 0.5 ms = 10 ms of candidate time


def test_candidate_can_be_named():
    device = FakeDevice()
    fns = make_fns(device, {"eager": 0.5, "candidate": 5.0}, [])
    samples = run_rounds(
        fns, 1, device, device.now_ms, candidate="candidate", min_samples=1, min_total_ms=10.0, warmup_ms=0.0
    )
    assert len(samples["candidate"]) == 2  # 2 x 5 ms reach 10 ms; the first key would have needed 20


def test_max_samples_caps_a_tiny_kernel():
    device = FakeDevice()
    fns = make_fns(device, {"candidate": 0.01}, [])  # 100 ms of it would be 10000 rounds
    samples = run_rounds(fns, 1, device, device.now_ms, min_samples=50, min_total_ms=100.0, warmup_ms=0.0,
                         max_samples=300)
    assert len(samples["candidate"]) == 300


def test_max_total_caps_a_slow_run():
    device = FakeDevice()
    fns = make_fns(device, {"candidate": 100.0}, [])
    samples = run_rounds(
        fns, 1, device, device.now_ms, min_samples=50, min_total_ms=0.0, warmup_ms=0.0, max_total_ms=350.0
    )
    assert len(samples["candidate"]) == 4  # rounds end at 100, 200, 300, 400 ms: the 4th crosses 350


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_input_sets": 0}, "n_input_sets"),
        ({"min_samples": 0}, "min_samples"),
        ({"min_samples": 10, "max_samples": 5}, "max_samples"),
        ({"min_total_ms": 20.0, "max_total_ms": 10.0}, "max_total_ms"),
        ({"candidate": "nope"}, "candidate"),
        ({"warmup_ms": -1.0}, "warmup_ms"),
    ],
)
def test_run_rounds_rejects_bad_arguments(kwargs, message):
    device = FakeDevice()
    fns = make_fns(device, {"candidate": 1.0}, [])
    args = {"n_input_sets": 1, **kwargs}
    n_input_sets = args.pop("n_input_sets")
    with pytest.raises(TimingError, match=message):
        run_rounds(fns, n_input_sets, device, device.now_ms, **args)


def test_run_rounds_rejects_empty_fns():
    device = FakeDevice()
    with pytest.raises(TimingError, match="empty"):
        run_rounds({}, 1, device, device.now_ms)


def test_cuda_timers_say_clearly_that_they_need_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TimingError, match="CUDA is not available"):
        timing.time_interleaved({"candidate": lambda i: None}, 1)
    with pytest.raises(TimingError, match="CUDA is not available"):
        timing.host_ms_per_call(lambda i: None, 1, 10)
    with pytest.raises(TimingError, match="CUDA is not available"):
        timing.time_plain_ms(lambda: None)


def test_fresh_values_go_in_before_each_timed_call_and_its_output_is_kept_after_it():
    """Rounds' hooks (fresh values in, a copy of the output out) run outside each call's timed
    region: `prepare` before the timer starts (the flush), `after` once its stop is recorded, with
    the round's number within the block; the untimed warm-up calls get neither."""
    log: list = []

    class Logged(FakeDevice):
        def start(self) -> None:
            log.append("start")
            super().start()

        def stop(self) -> None:
            log.append("stop")
            super().stop()

    device = Logged()

    def fn(name: str):
        def call(input_set: int) -> str:
            log.append(("call", name))
            device.now += 1.0
            return f"{name}-output"
        return call

    rounds = timing.Rounds({"candidate": fn("candidate"), "eager": fn("eager")}, 1, device, device.now_ms,
                           prepare=lambda name, step: log.append(("prepare", name, step)),
                           after=lambda name, output: log.append(("after", name, output)))
    rounds.warm(0.0)
    assert all(entry[0] == "call" for entry in log)  # warm-up: no fresh values, nothing kept
    log.clear()
    samples = rounds.block(2)
    assert samples == {"candidate": [1.0, 1.0], "eager": [1.0, 1.0]}  # the hooks cost the timed calls nothing
    assert log[:5] == [("prepare", "candidate", 0), "start", ("call", "candidate"), "stop",
                       ("after", "candidate", "candidate-output")]
    assert [entry for entry in log if entry[0] == "prepare"] == [
        ("prepare", "candidate", 0), ("prepare", "eager", 0), ("prepare", "eager", 1), ("prepare", "candidate", 1)]


def test_a_back_to_back_time_per_call_is_the_fastest_window_less_its_overhead():
    """Stray milliseconds (a collection, a walk of a dir) only ever add to a window, so a side's time is
    its fastest window less the fastest overhead window and the fixed allowance; window by window (the
    spread) a window its overhead outlasts is no time at all (never a made-up floor), and the sides
    whose clock would outweigh their events are the ones to measure again."""
    from kernelloop.tools.verify.timing_driver import FIXED_ALLOWANCE_MS, Windows

    calls, a = 21, FIXED_ALLOWANCE_MS  # every window is `a` longer than its calls and overhead: nothing moves
    steady = Windows(calls, {"candidate": [3.0 + a, 3.1 + a, 2.9 + a, 3.0 + a], "eager": [4.0 + a] * 4}, [2.3, 2.4, 2.2, 2.3])
    assert steady.per_window["candidate"] == [pytest.approx(0.7 / calls)] * 4
    assert steady.per_call()["candidate"] == pytest.approx(0.7 / calls)  # its fastest window less the fastest overhead
    assert steady.per_call()["eager"] == pytest.approx(1.8 / calls)
    assert steady.deciding({"candidate": 0.7 / calls, "eager": 1.8 / calls}) == []  # the events stand
    assert steady.deciding({"candidate": 0.5 / calls, "eager": 1.8 / calls}) == ["candidate"]  # the clock would outweigh them
    with_stray = Windows(calls, {"candidate": [3.0 + a, 3.1 + a, 9.0, 3.0 + a], "eager": [4.0 + a] * 4}, [2.3, 2.4, 2.2, 2.3])
    assert with_stray.per_call()["candidate"] == pytest.approx(0.8 / calls)  # its next fastest window: the stray one is never taken
    swamped = Windows(calls, {"candidate": [2.0 + a, 2.6 + a], "eager": [4.0 + a, 4.0 + a]}, [2.5, 2.5])
    assert swamped.per_window["candidate"] == [0.0, pytest.approx(0.1 / calls)]
    assert swamped.per_call()["candidate"] == 0.0  # under the clock's reach: the events decide
    assert steady.overhead_ms_per_call() == pytest.approx(2.2 / calls)
    plain = Windows(calls, {"candidate": [2.1 + a] * 2, "eager": [4.2 + a] * 2}, [])  # no fresh values: no overhead window
    assert plain.per_call() == {"candidate": pytest.approx(0.1), "eager": pytest.approx(0.2)}
    assert plain.overhead_ms_per_call() is None
    with pytest.raises(ValueError):
        _ = Windows(calls, {"candidate": [3.0, 3.0], "eager": [4.0, 4.0]}, [2.0]).per_window  # a round without its overhead


def test_blocks_grow_to_the_candidates_work_but_end_within_the_rounds_budget():
    """Blocks go on to MIN_CANDIDATE_MS of the candidate's work in blocks of at most MAX_BLOCK_ROUNDS;
    past MIN_ROUNDS a block is no longer than the budget left at the pace so far; a block still gives
    MIN_ROUNDS what it needs within twice the budget, and FEWEST_ROUNDS whatever the pace."""
    from kernelloop.tools.verify import timing_driver as td

    assert td._next_block(10, 0.2, 0.01) == td.MAX_BLOCK_ROUNDS  # a 0.02 ms kernel, fast rounds: a full block
    assert td._next_block(10, 0.2, 0.2) == td.MIN_ROUNDS - 10  # 20 ms a round: MIN_ROUNDS fits in twice the budget
    assert td._next_block(60, 1.2, 0.6) == 40  # 10 ms a round, 0.4 s of the budget left
    assert td._next_block(10, 500.0, 0.8) == 15  # eager attention's pace, 80 ms a round: to twice the budget
    assert td._next_block(10, 500.0, 3.0) == td.FEWEST_ROUNDS - 10  # slower still: the fewest rounds
    assert td._enough_rounds(60, 1.2, td.ROUNDS_BUDGET_S + 0.01) and not td._enough_rounds(40, 1.2, td.ROUNDS_BUDGET_S + 0.01)
    assert td._enough_rounds(td.FEWEST_ROUNDS, 500.0, 2 * td.ROUNDS_BUDGET_S + 0.01)
    assert not td._enough_rounds(td.FEWEST_ROUNDS - 1, 500.0, 2 * td.ROUNDS_BUDGET_S + 0.01)
