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

from kernelloop.tools.verify import speed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "speed"


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def test_an_honest_kernel_is_timed_and_not_a_win_over_an_equal_eager_op():
    judged = speed.judge_speed(recorded("honest"))
    assert judged.rejection is None and not judged.suspicious
    assert judged.speedup == pytest.approx(1.0, abs=0.02)  # a Triton ReLU is torch's ReLU, memory-bound
    assert judged.win is False and any("within the noise floor" in w for w in judged.warnings)
    assert not any(w.startswith("host-bound") for w in judged.warnings)
    assert judged.profile["kernel_split"]["own_share"] > 0.9


def test_side_stream_work_is_rejected_from_the_profile():
    judged = speed.judge_speed(recorded("side_stream"))
    assert judged.rejection.startswith("stream or thread")
    assert judged.timings["candidate"].median_ms < 0.01  # the events saw almost nothing
    assert not any(w.startswith("host-bound") for w in judged.warnings)  # the rejection tells it


def test_a_decoy_kernel_beside_torch():
    """The decoy's one-element kernel still takes 2.8% of device time at this size, so the
    profile rule (under 1% of its own) passes it; the verifier's op rule rejected it (every aten
    op of the reference still ran through torch). Where the decoy is cheaper still, the
    profile rule catches it alone."""
    measurement = recorded("decoy")
    assert measurement["recorded"]["reason"].startswith("leaves the work to torch")
    split = measurement["kernel_split"]
    assert split["library_share"] == pytest.approx(0.972, abs=0.01)
    assert speed.judge_speed(measurement).rejection is None
    cheaper = copy.deepcopy(measurement)
    cheaper["kernel_split"]["library_share"] = 0.995
    assert speed.judge_speed(cheaper).rejection.startswith("no kernel of its own")


def test_host_work_before_the_launch_stays_out_of_device_time_but_is_reported():
    host_bound, honest = speed.judge_speed(recorded("host_bound")), speed.judge_speed(recorded("honest"))
    assert host_bound.rejection is None
    # Held, the events time the same kernel as the honest one, not its 0.3 ms of host work ...
    assert host_bound.timings["candidate"].median_ms == pytest.approx(honest.timings["candidate"].median_ms, rel=0.05)
    # ... and the verdict says the caller will see the host's time.
    assert any(w.startswith("host-bound") for w in host_bound.warnings)


def test_a_time_under_the_roofline_floor_is_rejected():
    measurement = copy.deepcopy(recorded("honest"))
    measurement["roofline"]["floor_ms"] = 10 * max(measurement["samples_ms"]["candidate"])
    assert speed.judge_speed(measurement).rejection.startswith("faster than the roofline floor")


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
    judged = speed.judge_speed(measurement)
    assert judged.speedup == pytest.approx(0.6, rel=0.05) and judged.win is False
    assert any(w.startswith("slower than eager") for w in judged.warnings)
    assert not any("within the noise floor" in w for w in judged.warnings)
