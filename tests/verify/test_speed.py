"""The speed verdict (tools/speed.py) on measurements recorded on an H100.

tests/fixtures/speed/*.json are what the sandboxed child's timing returned for four candidates
of the ReLU problem (recorded by tests/fixtures/speed/record.py, static checks off): an honest
Triton kernel, the same kernel behind 0.3 ms of host work, a side-stream cheat and a decoy that
launches one tiny kernel and leaves the work to torch.relu.
"""

import copy
import json
from pathlib import Path

import pytest

from kernelloop.records import Code
from kernelloop.tools.verify import speed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "speed"


def recorded(name: str) -> dict:
    """The measurement as recorded, without the note of how it was made."""
    measurement = json.loads((FIXTURES / f"{name}.json").read_text())
    measurement.pop("recorded")
    return measurement


def how_recorded(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())["recorded"]


def test_an_honest_kernel_is_timed_and_not_a_win_over_an_equal_eager_op():
    judged = speed.judge_speed(recorded("honest"))
    assert judged.rejection is None and not judged.suspicious
    assert judged.speedup == pytest.approx(1.0, abs=0.02)  # a Triton ReLU is torch's ReLU, memory-bound
    assert judged.win is False and any("within the noise floor" in w for w in judged.warnings)
    assert not any(w.startswith("host-bound") for w in judged.warnings)
    assert judged.profile.own_share > 0.9 and judged.profile.kernels[0].kind == "own"


def test_side_stream_work_is_rejected_from_the_profile():
    judged = speed.judge_speed(recorded("side_stream"))
    assert judged.rejection.startswith("stream or thread") and judged.rejection_code is Code.stream_or_thread
    assert judged.timings["candidate"].median_ms < 0.01  # the events saw almost nothing
    assert not any(w.startswith("host-bound") for w in judged.warnings)  # the rejection tells it


def test_a_decoy_kernel_beside_torch():
    """The decoy's one-element kernel still takes 2.8% of device time at this size, so the
    profile rule (under 1% of its own) passes it; the verifier's op rule rejected it (every aten
    op of the reference still ran through torch). Where the decoy is cheaper still, the
    profile rule catches it alone."""
    measurement = recorded("decoy")
    assert how_recorded("decoy")["reason"].startswith("leaves the work to torch")
    judged = speed.judge_speed(measurement)
    assert judged.profile.library_share == pytest.approx(0.972, abs=0.01)  # the parent's split of the claimed table
    assert judged.rejection is None
    cheaper = copy.deepcopy(measurement)
    own = next(row for row in cheaper["kernels"] if row["name"] == "relu_kernel")
    own["total_ms"] = own["mean_ms"] = 0.0001  # a decoy a hundred times cheaper
    judged = speed.judge_speed(cheaper)
    assert judged.rejection.startswith("no kernel of its own") and judged.rejection_code is Code.no_own_kernel


def test_host_work_before_the_launch_stays_out_of_device_time_but_is_reported():
    host_bound, honest = speed.judge_speed(recorded("host_bound")), speed.judge_speed(recorded("honest"))
    assert host_bound.rejection is None
    # Held, the events time the same kernel as the honest one, not its 0.3 ms of host work ...
    assert host_bound.timings["candidate"].median_ms == pytest.approx(honest.timings["candidate"].median_ms, rel=0.05)
    # ... and the verdict says the caller will see the host's time.
    assert any(w.startswith("host-bound") for w in host_bound.warnings)


def test_a_time_under_the_output_floor_is_rejected():
    """Writing the output once is the least any correct kernel does: under that, nothing is real."""
    measurement = copy.deepcopy(recorded("honest"))
    measurement["roofline"].update(output_bytes=67_108_864, output_floor_ms=10 * max(measurement["samples_ms"]["candidate"]))
    judged = speed.judge_speed(measurement)
    assert judged.rejection.startswith("faster than any correct kernel can be")
    assert "writing its 6.71e+07 bytes of output takes at least" in judged.rejection and "H100 SXM" in judged.rejection
    assert not judged.less_work_than_reference


def test_a_time_under_the_reference_floor_but_over_the_output_floor_is_flagged_not_rejected():
    """The issue's diag(A) @ B kernel (KernelBench L1 #12, N=4096, float32, H100): it scales the
    rows of B in 0.0997 ms; the reference's 1.37e11 FLOPs need 0.2778 ms, but its 64 MiB of
    output only 0.0200 ms. A correct kernel may do less work than the reference."""
    measurement = copy.deepcopy(recorded("honest"))
    scale = 0.0997 / sorted(measurement["samples_ms"]["candidate"])[len(measurement["samples_ms"]["candidate"]) // 2]
    for name in measurement["samples_ms"]:  # the same kernels, scaled: speedups and noise stay as recorded
        measurement["samples_ms"][name] = [scale * ms for ms in measurement["samples_ms"][name]]
    n = 4096
    measurement["roofline"] = {"flops": 2 * n**3, "bytes": (n + 2 * n * n) * 4, "output_bytes": n * n * 4,
                               "peak_key": "tf32", "peaks": "H100 SXM", "compute_floor_ms": 2 * n**3 / 494.7e9,
                               "memory_floor_ms": (n + 2 * n * n) * 4 / 3.35e9, "floor_ms": 2 * n**3 / 494.7e9,
                               "reference_floor_ms": 2 * n**3 / 494.7e9, "output_floor_ms": n * n * 4 / 3.35e9}
    judged = speed.judge_speed(measurement)
    assert judged.rejection is None
    assert judged.less_work_than_reference is True
    assert judged.timings["candidate"].median_ms == pytest.approx(0.0997, rel=0.02)
    notes = [w for w in judged.warnings if w.startswith("does less work than the reference")]
    assert notes == [
        f"does less work than the reference: {judged.timings['candidate'].median_ms:.4f} ms is under the 0.2778 ms "
        "the reference's 1.37e+11 FLOPs and 1.34e+08 bytes need on H100 SXM; judged on extra input sets "
        "(structured/adversarial values)"]
    # percent_of_limit keeps its meaning (the reference floor over the measured time): past 100 here
    assert judged.profile.roofline.percent_of_limit == pytest.approx(100 * 0.2778 / 0.0997, rel=0.02)
    assert judged.profile.roofline.bound == "compute"


def test_a_measurement_without_an_output_floor_is_never_rejected_on_the_reference_floor():
    """Recorded before the output floor existed: the reference floor alone decides no verdict."""
    measurement = copy.deepcopy(recorded("honest"))
    assert "output_floor_ms" not in measurement["roofline"]
    measurement["roofline"]["floor_ms"] = 10 * max(measurement["samples_ms"]["candidate"])
    judged = speed.judge_speed(measurement)
    assert judged.rejection is None and judged.less_work_than_reference


def test_an_honest_kernel_over_both_floors_is_not_flagged():
    measurement = copy.deepcopy(recorded("honest"))
    measurement["roofline"].update(output_bytes=67_108_864, output_floor_ms=0.02)
    judged = speed.judge_speed(measurement)
    assert judged.rejection is None and not judged.less_work_than_reference
    assert not any(w.startswith("does less work") for w in judged.warnings)


def test_a_throttled_gpu_and_a_large_speedup_are_marked_not_rejected():
    measurement = copy.deepcopy(recorded("honest"))
    measurement["gpu"].update(throttled=True, throttle_reasons=["sw_power_cap"])
    measurement["samples_ms"]["eager"] = [20 * ms for ms in measurement["samples_ms"]["eager"]]
    judged = speed.judge_speed(measurement)
    assert judged.rejection is None and judged.speedup == pytest.approx(20.0, rel=0.05)
    assert judged.suspicious and any("throttled" in w for w in judged.warnings)


def test_a_slower_kernel_is_called_slower_not_noise():
    measurement = copy.deepcopy(recorded("honest"))
    measurement["samples_ms"]["eager"] = [0.6 * ms for ms in measurement["samples_ms"]["eager"]]
    measurement["host_ms_per_call"]["eager"] *= 0.6  # both of eager's clocks: the same eager, faster
    judged = speed.judge_speed(measurement)
    assert judged.speedup == pytest.approx(0.6, rel=0.05) and judged.win is False
    assert any(w.startswith("slower than eager") for w in judged.warnings)
    assert not any("within the noise floor" in w for w in judged.warnings)


# --------------------------------------------------------------------------- claims against the parent's clock


def _forged(scale: float) -> dict:
    """The honest recording with the candidate's own event times scaled, as a forged timer (or an
    edited results dict) in its process would report them; the parent's clock keeps the truth."""
    measurement = copy.deepcopy(recorded("honest"))
    for name in ("candidate", "candidate_again"):
        measurement["samples_ms"][name] = [scale * ms for ms in measurement["samples_ms"][name]]
    for row in measurement["kernels"]:  # its profile agrees with its timer: both forged
        row["total_ms"] *= scale
    return measurement


def test_event_times_the_parent_clock_bears_out_stand():
    judged = speed.judge_speed(recorded("honest"))
    assert judged.timings["candidate"].clock == speed.EVENTS and judged.timings["eager"].clock == speed.EVENTS
    assert judged.speed_source.startswith("candidate by its events, 0.0490 ms a call (back to back 0.0500 ms)")
    assert "eager by its events" in judged.speed_source and "\n" not in judged.speed_source


def test_a_forged_timer_gets_the_parent_clocks_speedup_not_its_own():
    honest = speed.judge_speed(recorded("honest"))
    judged = speed.judge_speed(_forged(0.25))  # it claims 4x
    assert judged.rejection is None and judged.timings["candidate"].clock == speed.PARENT_CLOCK
    assert judged.speed_source.startswith("candidate by the parent's clock")
    host = recorded("honest")["host_ms_per_call"]["candidate"]
    claimed = judged.timings["candidate"].median_ms
    eager = judged.timings["eager"].median_ms  # eager's events decide eager (its window agrees with them)
    assert judged.speedup == pytest.approx(eager / (host - speed.PARENT_CLOCK_SLACK * claimed), rel=0.02)
    assert judged.speedup < 1.2 and honest.speedup < 1.2 and not judged.win  # the claimed 4x is nowhere
    assert any(w.startswith("host-bound") for w in judged.warnings)


def test_the_clock_rule_has_no_edge():
    """A candidate whose back-to-back time grows 1% at a time moves its speedup by about 1% at a time,
    through the point where the parent's clock takes over from its events: never a jump."""
    base = recorded("honest")
    event = speed.judge_speed(base).timings["candidate"].median_ms
    speedups = []
    for step in range(120):
        measurement = copy.deepcopy(base)
        measurement["host_ms_per_call"]["candidate"] = event * 0.9 * 1.01 ** step
        speedups.append(speed.judge_speed(measurement).speedup)
    ratios = [b / a for a, b in zip(speedups, speedups[1:])]
    assert all(0.985 < r <= 1.0 + 1e-9 for r in ratios), max(ratios, key=lambda r: abs(r - 1))
    assert speedups[-1] < 0.4 * speedups[0]  # and it does move: the parent's clock counts what a caller sees


def test_both_sides_are_counted_by_the_same_rule():
    """Eager host-bound on a tiny problem: its back-to-back time counts for it as the candidate's does."""
    measurement = copy.deepcopy(recorded("honest"))
    measurement["host_ms_per_call"]["eager"] *= 3
    judged = speed.judge_speed(measurement)
    assert judged.timings["eager"].clock == speed.PARENT_CLOCK
    assert judged.speedup == pytest.approx(3 * 0.0488 / 0.0490, rel=0.05)
    assert "eager by the parent's clock" in judged.speed_source


def test_a_parent_clock_speed_takes_its_windows_spread_as_noise():
    measurement = _forged(0.25)
    measurement["host_windows_ms"] = {"candidate": [0.050, 0.055, 0.060]}
    judged = speed.judge_speed(measurement)
    assert judged.timings["candidate"].host_spread == pytest.approx(0.005 / 0.055)  # half the range, over the median
    assert judged.noise_floor >= judged.timings["candidate"].host_spread


def test_more_device_time_claimed_than_the_parent_saw_pass_is_rejected():
    measurement = copy.deepcopy(recorded("honest"))
    measurement.update(parent_block_ms=[12.0, 30.0], claimed_block_ms=[10.0, 31.5])
    judged = speed.judge_speed(measurement)
    assert judged.rejection.startswith("timing contradicted") and "31.500 ms" in judged.rejection
    assert "30.000 ms" in judged.rejection


def test_a_recording_without_the_parent_clock_says_its_speed_is_a_claim():
    measurement = copy.deepcopy(recorded("honest"))
    measurement["host_ms_per_call"] = {}
    assert speed.judge_speed(measurement).speed_source.startswith(
        "candidate by its events, 0.0490 ms a call (no back-to-back window)")


def test_a_measurement_with_an_unknown_field_is_refused():
    with pytest.raises(ValueError, match="unknown fields"):
        speed.judge_speed({**recorded("honest"), "made_up": 1})


def test_a_window_with_too_little_claimed_work_leaves_the_events_unconfirmed():
    """The parent's clock resolves a window to about its fixed allowance: a side whose windows hold less than
    CONFIRMING_WORK times that of claimed work has events the clock could not have caught lying, and the
    verdict says so (TimingStats.confirmed, and the speed's one line)."""
    from kernelloop.records import Measurement
    from kernelloop.tools.verify.speed import CONFIRMING_WORK, judge_speed

    rounds = 60
    measured = {"samples_ms": {"eager": [0.05] * rounds, "candidate": [0.02] * rounds, "candidate_again": [0.02] * rounds},
                "host_ms_per_call": {"eager": 0.0, "candidate": 0.0}, "clock_resolution_ms": 1.0}
    blind = judge_speed(Measurement(**measured, window_calls={"eager": 60, "candidate": 60}))
    assert blind.timings["candidate"].confirmed is False and blind.timings["eager"].confirmed is False
    assert "too little for the clock to confirm" in blind.speed_source
    calls = int(CONFIRMING_WORK / 0.02) + 1
    seen = judge_speed(Measurement(**measured, window_calls={"eager": calls, "candidate": calls}))
    assert seen.timings["candidate"].confirmed is True and "confirm" not in seen.speed_source
    assert judge_speed(Measurement(samples_ms=measured["samples_ms"])).timings["candidate"].confirmed is None
