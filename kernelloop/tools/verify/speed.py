"""From raw GPU measurements to speed claims, and the cross-checks that refuse fake ones.

Pure functions of the measurement dict the parent assembles (tools/verify/timing_driver.py), so
the logic is tested on the CPU with recorded fixtures. The candidate's own numbers (its event
times, its profile) are claims; the baselines' come from the trusted job and host_ms_per_call
from the parent's clock. Rules (each becomes `rejected` with its reason):
  * device work the events missed: the profiler's device time per call (all streams) is
    well above the event time on the current stream -> "stream or thread";
  * the candidate's own kernels take no device time: everything ran in library kernels ->
    "no kernel of its own";
  * faster than the output floor (writing the output once at datasheet bandwidth) -> impossible;
    under the reference's roofline only -> flagged `less_work_than_reference`, not rejected;
  * more device time claimed in a block than the parent's clock saw pass -> "timing contradicted".
Under the reference's roofline, the speedups are taken only over the rounds whose candidate
output the parent checked (timed_checks.py), where there are any.
Event times the parent's clock does not bear out (back to back, a call takes much longer than the
events claim: host-bound, or a forged timer) give way to the parent clock's speedup, with a
warning. Speedups above SUSPICIOUS_SPEEDUP and throttled GPUs are marked, not rejected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernelloop.records import Code, GpuState, Measurement, Profile, TimingStats
from kernelloop.tools.profile import profiler, timing
from kernelloop.tools.profile.measure import AGAIN, CANDIDATE, EAGER

SUSPICIOUS_SPEEDUP = 10.0
HIDDEN_WORK_RATIO = 1.5  # profiler time per call over event time; the events include a cold L2, so honest kernels sit below 1
HIDDEN_WORK_SLACK_MS = 0.01
MIN_NON_LIBRARY_SHARE = 0.01  # below 1% of device time in kernels that aren't a library's: a decoy kernel
HOST_BOUND_RATIO = 1.5  # back-to-back wall time per call over event time (warm L2: device-bound sits below 1)
HOST_BOUND_SLACK_MS = 0.01
PARENT_CLOCK_NOISE = 0.05  # a speedup from the parent's clock has no noise floor of its own: claim no less
EVENTS_CONFIRMED = "events, confirmed by the parent's clock"
EVENTS_CLAIMED = "events (the candidate's own claim; no parent clock recorded)"
PARENT_CLOCK = "parent clock (back-to-back calls)"


@dataclass
class SpeedJudgement:
    timings: dict[str, TimingStats]
    speedup: float | None
    speedups: dict[str, float]
    noise_floor: float | None
    win: bool | None
    rejection: str | None = None
    rejection_code: Code | None = None
    suspicious: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gpu: GpuState | None = None
    profile: Profile | None = None
    # Under the reference's roofline floor but not under the output floor: a correct kernel may
    # legitimately skip work (structured operands), so not a rejection, but worth more scrutiny.
    less_work_than_reference: bool = False
    speed_source: str = ""


def summarize_all(samples_ms: dict[str, list[float]], host_ms: dict[str, float] | None = None) -> dict[str, TimingStats]:
    stats = {name: timing.summarize(name, values) for name, values in samples_ms.items()}
    for name, value in (host_ms or {}).items():
        stats[name].host_ms_per_call = value
    return stats


def judge_speed(measured: Measurement | dict[str, Any]) -> SpeedJudgement:
    measurement = Measurement.model_validate(measured)
    samples = measurement.samples_ms
    stats = summarize_all(samples, measurement.host_ms_per_call)
    stats[CANDIDATE].overhead_ms_per_call = measurement.fresh_overhead_ms_per_call
    candidate = samples[CANDIDATE]
    speedups = {name: timing.speedup_from_rounds(values, candidate)
                for name, values in samples.items() if name not in (CANDIDATE, AGAIN)}
    noise = timing.noise_floor(candidate, samples[AGAIN])
    speedup = speedups.get(EAGER)
    judgement = SpeedJudgement(timings={k: v for k, v in stats.items() if k != AGAIN}, speedup=speedup,
                               speedups=speedups, noise_floor=noise,
                               win=timing.is_win(speedup, noise) if speedup else None)
    event_ms = stats[CANDIDATE].median_ms
    roof = dict(measurement.roofline)
    host_ms = stats[CANDIDATE].host_ms_per_call
    judgement.speed_source = EVENTS_CONFIRMED if host_ms else EVENTS_CLAIMED
    profile = judgement.profile = profiler.profile_of(measurement, event_ms, event_ms, judgement.speed_source)
    profile_ms_per_call = profile.device_ms_total / profiler.PROFILE_ITERS

    if profile_ms_per_call > HIDDEN_WORK_RATIO * event_ms + HIDDEN_WORK_SLACK_MS:
        judgement.rejection_code = Code.stream_or_thread
        judgement.rejection = (f"stream or thread: the profiler saw {profile_ms_per_call:.4f} ms of device work per call "
                               f"but the events on the current stream only {event_ms:.4f} ms: work runs where the timer can't see it")
    elif profile.device_ms_total and 1.0 - profile.library_share < MIN_NON_LIBRARY_SHARE:
        judgement.rejection_code = Code.no_own_kernel
        judgement.rejection = ("no kernel of its own: the profiler puts "
                               f"{100 * profile.library_share:.1f}% of device time in library kernels")
    elif roof.get("output_floor_ms") and event_ms < roof["output_floor_ms"]:
        # The one true floor: whatever structure it exploits, a correct kernel writes its output once.
        judgement.rejection_code = Code.faster_than_possible
        judgement.rejection = (f"faster than any correct kernel can be: {event_ms:.4f} ms measured, but writing its "
                               f"{roof.get('output_bytes', 0):.3g} bytes of output takes at least "
                               f"{roof['output_floor_ms']:.4f} ms on {roof.get('peaks', 'this GPU')}: "
                               "the work or the timing is not real")
    elif roof.get("floor_ms") and event_ms < roof["floor_ms"]:
        # The reference's FLOPs and bytes are not a bound on a kernel that does less (a diagonal or
        # triangular operand, a rank-1 factor, a mask): a note and a flag for more scrutiny, no verdict.
        judgement.less_work_than_reference = True
        judgement.warnings.append(f"does less work than the reference: {event_ms:.4f} ms is under the "
                                  f"{roof['floor_ms']:.4f} ms the reference's {roof.get('flops', 0):.3g} FLOPs and "
                                  f"{roof.get('bytes', 0):.3g} bytes need on {roof.get('peaks', 'this GPU')}; judged on "
                                  "extra input sets (structured/adversarial values)")
    checked = sorted({r for r in measurement.checked_rounds if 0 <= r < len(candidate)})
    if judgement.less_work_than_reference and checked:
        # Doing less work than the reference can be honest (structure) or a skip: its speed stands
        # only on calls whose values were fresh and whose outputs the parent checked one by one.
        judgement.speedups = speedups = {
            name: timing.speedup_from_rounds([values[r] for r in checked], [candidate[r] for r in checked])
            for name, values in samples.items() if name not in (CANDIDATE, AGAIN)}
        judgement.speedup = speedup = speedups.get(EAGER)
        judgement.win = timing.is_win(speedup, noise) if speedup else None
        judgement.warnings.append(f"under the reference's roofline: its speed counts only the {len(checked)} timed "
                                  "calls whose outputs were checked")
    if measurement.fresh_values is False:
        judgement.warnings.append("no floating input to draw fresh values for: its timed calls reran values it had "
                                  "seen (integer inputs are kept as the problem made them)")
    claimed_blocks, parent_blocks = measurement.claimed_block_ms, measurement.parent_block_ms
    impossible = [(c, w) for c, w in zip(claimed_blocks, parent_blocks) if c > w]
    if impossible and not judgement.rejection:
        claimed_ms, wall_ms = impossible[0]
        judgement.rejection_code = Code.timing_contradicted
        judgement.rejection = (f"timing contradicted: the candidate's process reported {claimed_ms:.3f} ms of device time "
                               f"in a block of rounds that the parent's clock saw pass in {wall_ms:.3f} ms")
    if speedup and speedup > SUSPICIOUS_SPEEDUP:
        judgement.suspicious.append(f"speedup {speedup:.1f}x over eager is above {SUSPICIOUS_SPEEDUP:g}x: check it by hand")
    if measurement.gpu is not None:
        judgement.gpu = measurement.gpu
        if judgement.gpu.throttled:
            judgement.warnings.append(f"GPU was throttled during timing ({', '.join(judgement.gpu.throttle_reasons)}): "
                                      "treat the numbers with care")
    # The candidate's event times are its own claim. They stand where the parent's clock, around
    # back-to-back calls ended by a device-wide synchronize, bears them out; otherwise the speedup
    # is the parent clock's. That is honest either way: a host-bound kernel is as slow as a caller
    # sees it, and a forged timer reads what really passed. Not beside a rejection: hidden work on a
    # side stream looks host-bound too, and the rejection tells that story.
    if host_ms and host_ms > HOST_BOUND_RATIO * event_ms + HOST_BOUND_SLACK_MS and not judgement.rejection:
        eager_host_ms = stats[EAGER].host_ms_per_call if EAGER in stats else None
        if profile.host_device is None:  # profile_of always fills it in
            raise RuntimeError("the candidate's profile has no host/device split")
        judgement.speed_source = profile.host_device.speed_source = PARENT_CLOCK
        profile.roofline = profiler.roofline_facts(roof, host_ms, measurement.device_name)
        judgement.speedups = {name: (eager_host_ms if name == EAGER and eager_host_ms else stats[name].median_ms) / host_ms
                              for name in speedups}
        judgement.speedup = speedup = judgement.speedups.get(EAGER)
        noise = judgement.noise_floor = max(noise, PARENT_CLOCK_NOISE)
        judgement.win = bool(speedup and speedup > 1.0 + noise)
        judgement.warnings.append(
            f"host-bound or unconfirmed: back to back a call takes {host_ms:.4f} ms by the parent's clock but the "
            f"candidate's events claim {event_ms:.4f} ms" + (f" (eager: {eager_host_ms:.4f} ms)" if eager_host_ms else "")
            + "; the speedup is the parent clock's, what a caller sees")
    if speedup and speedup < 1.0 - noise:
        judgement.warnings.append(f"slower than eager: speedup {speedup:.3f}x, below the noise floor ({noise:.3f})")
    elif speedup and not judgement.win:
        judgement.warnings.append(f"speedup {speedup:.3f}x is within the noise floor ({noise:.3f}): not a win")
    return judgement
