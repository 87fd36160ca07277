"""From raw GPU measurements to speed claims, and the cross-checks that refuse fake ones.

Pure functions of the measurement dict that tools/measure.py returns from the child, so the
logic is tested on the CPU with recorded fixtures. Rules (each becomes `rejected` with its reason):
  * device work the events missed: the profiler's device time per call (all streams) is
    well above the event time on the current stream -> "stream or thread";
  * the candidate's own kernels take no device time: everything ran in library kernels ->
    "no kernel of its own";
  * faster than the roofline floor (datasheet peaks, L2 flushed) -> impossible, rejected.
Speedups above SUSPICIOUS_SPEEDUP and throttled GPUs are marked, not rejected. So is a host-bound
candidate: back to back, a call takes much longer on the host's clock than on the device's (the
events time the device alone: tools/timing.py holds it so launch gaps stay out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelloop.results import GpuState, TimingStats
from kernelloop.tools.profile import timing
from kernelloop.tools.profile.measure import AGAIN, CANDIDATE, EAGER

SUSPICIOUS_SPEEDUP = 10.0
HIDDEN_WORK_RATIO = 1.5  # profiler time per call over event time; the events include a cold L2, so honest kernels sit below 1
HIDDEN_WORK_SLACK_MS = 0.01
MIN_NON_LIBRARY_SHARE = 0.01  # below 1% of device time in kernels that aren't a library's: a decoy kernel
PROFILE_ITERS = 10  # kernel_table's default iterations, to turn totals into per-call times
HOST_BOUND_RATIO = 1.5  # back-to-back wall time per call over event time (warm L2: device-bound sits below 1)
HOST_BOUND_SLACK_MS = 0.01


@dataclass
class SpeedJudgement:
    timings: dict[str, TimingStats]
    speedup: float | None
    speedups: dict[str, float]
    noise_floor: float | None
    win: bool | None
    rejection: str | None = None
    suspicious: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gpu: GpuState | None = None
    profile: dict[str, Any] = field(default_factory=dict)


def summarize_all(samples_ms: dict[str, list[float]], host_ms: dict[str, float] | None = None) -> dict[str, TimingStats]:
    stats = {name: timing.summarize(name, values) for name, values in samples_ms.items()}
    for name, value in (host_ms or {}).items():
        stats[name].host_ms_per_call = value
    return stats


def judge_speed(measurement: dict[str, Any]) -> SpeedJudgement:
    samples = measurement["samples_ms"]
    stats = summarize_all(samples, measurement.get("host_ms_per_call"))
    candidate = samples[CANDIDATE]
    speedups = {name: timing.speedup_from_rounds(values, candidate)
                for name, values in samples.items() if name not in (CANDIDATE, AGAIN)}
    noise = timing.noise_floor(candidate, samples[AGAIN])
    speedup = speedups.get(EAGER)
    judgement = SpeedJudgement(timings={k: v for k, v in stats.items() if k != AGAIN}, speedup=speedup,
                               speedups=speedups, noise_floor=noise,
                               win=timing.is_win(speedup, noise) if speedup else None)
    event_ms = stats[CANDIDATE].median_ms
    split = measurement.get("kernel_split") or {}
    roof = measurement.get("roofline") or {}
    profile_ms_per_call = split.get("total_ms", 0.0) / PROFILE_ITERS
    judgement.profile = {"kernel_split": split, "kernels": measurement.get("kernels", [])[:15],
                         "roofline": roof, "profile_ms_per_call": profile_ms_per_call,
                         "compile_s": measurement.get("compile_s", {}), "phase_s": measurement.get("phase_s", {}),
                         "device_name": measurement.get("device_name")}
    if roof.get("floor_ms"):
        judgement.profile["roofline"]["percent_of_limit"] = 100.0 * roof["floor_ms"] / event_ms

    if profile_ms_per_call > HIDDEN_WORK_RATIO * event_ms + HIDDEN_WORK_SLACK_MS:
        judgement.rejection = (f"stream or thread: the profiler saw {profile_ms_per_call:.4f} ms of device work per call "
                               f"but the events on the current stream only {event_ms:.4f} ms: work runs where the timer can't see it")
    elif split.get("total_ms") and 1.0 - split.get("library_share", 0.0) < MIN_NON_LIBRARY_SHARE:
        judgement.rejection = ("no kernel of its own: the profiler puts "
                               f"{100 * split.get('library_share', 0.0):.1f}% of device time in library kernels")
    elif roof.get("floor_ms") and event_ms < roof["floor_ms"]:
        judgement.rejection = (f"faster than the roofline floor: {event_ms:.4f} ms measured, {roof['floor_ms']:.4f} ms is "
                               f"the least {roof.get('peaks', 'this GPU')} can take for {roof.get('flops', 0):.3g} FLOPs and "
                               f"{roof.get('bytes', 0):.3g} bytes: the work or the timing is not real")
    if speedup and speedup > SUSPICIOUS_SPEEDUP:
        judgement.suspicious.append(f"speedup {speedup:.1f}x over eager is above {SUSPICIOUS_SPEEDUP:g}x: check it by hand")
    if measurement.get("gpu"):
        judgement.gpu = GpuState.model_validate(measurement["gpu"])
        if judgement.gpu.throttled:
            judgement.warnings.append(f"GPU was throttled during timing ({', '.join(judgement.gpu.throttle_reasons)}): "
                                      "treat the numbers with care")
    host_ms = stats[CANDIDATE].host_ms_per_call
    # Not beside a rejection: hidden work on a side stream looks host-bound too, and that is the story.
    if host_ms and host_ms > HOST_BOUND_RATIO * event_ms + HOST_BOUND_SLACK_MS and not judgement.rejection:
        eager_host_ms = stats[EAGER].host_ms_per_call if EAGER in stats else None
        judgement.warnings.append(
            f"host-bound: back to back a call takes {host_ms:.4f} ms by the host's clock but {event_ms:.4f} ms on the "
            "device" + (f" (eager: {eager_host_ms:.4f} ms)" if eager_host_ms else "") + "; at this size launch overhead, "
            "not the kernel, sets what a caller sees (the speedup compares device time)")
    if speedup and speedup < 1.0 - noise:
        judgement.warnings.append(f"slower than eager: speedup {speedup:.3f}x, below the noise floor ({noise:.3f})")
    elif speedup and not judgement.win:
        judgement.warnings.append(f"speedup {speedup:.3f}x is within the noise floor ({noise:.3f}): not a win")
    return judgement
