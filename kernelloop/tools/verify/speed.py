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

One clock rule for every side (`counted_ms`): a side's time is the larger of its event median and
its back-to-back time by the parent's clock, less PARENT_CLOCK_SLACK of the events (what a window's
own cost and noise leave in an honest device-bound call). So a device-bound kernel reads its
events, a host-bound one (or a forged timer) what a caller sees, and between the two the time moves
smoothly: a 1% change in either clock moves the speedup by at most 1%. The candidate and every
baseline are measured by the same protocol and counted by the same rule, so a speedup compares like
with like. Speedups above SUSPICIOUS_SPEEDUP and throttled GPUs are marked, not rejected.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from kernelloop.records import Code, GpuState, Measurement, Profile, TimingStats
from kernelloop.tools.profile import profiler, timing
from kernelloop.tools.profile.measure import AGAIN, CANDIDATE, EAGER

SUSPICIOUS_SPEEDUP = 10.0
HIDDEN_WORK_RATIO = 1.5  # profiler time per call over event time; the events include a cold L2, so honest kernels sit below 1
HIDDEN_WORK_SLACK_MS = 0.01
MIN_NON_LIBRARY_SHARE = 0.01  # below 1% of device time in kernels that aren't a library's: a decoy kernel
HOST_BOUND_RATIO = 1.5  # back to back over events past which the verdict calls a call host-bound (a note, no switch)
PARENT_CLOCK_SLACK = 0.03  # of a side's events: back-to-back time within this of them is the window's, not the call's
PARENT_CLOCK_NOISE = 0.05  # the noise of a time counted from a single back-to-back window
# A side's windows confirm its events where they hold at least this many times the clock's resolution of
# claimed work: then a claim a fifth under the truth outweighs the resolution and the slack, and shows.
CONFIRMING_WORK = 4.0
EVENTS = "events"
PARENT_CLOCK = "parent clock"


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


def summarize_all(samples_ms: dict[str, list[float]], host_ms: dict[str, float] | None = None,
                  host_windows_ms: dict[str, list[float]] | None = None, replayed: list[str] | None = None,
                  window_calls: dict[str, int] | None = None, resolution_ms: float | None = None) -> dict[str, TimingStats]:
    """Each callable's event statistics, with its back-to-back time where the parent measured one,
    and the time the clock rule counts (`counted_ms`, `clock`)."""
    stats = {name: timing.summarize(name, values) for name, values in samples_ms.items()}
    for name, value in (host_ms or {}).items():
        if name in stats:
            stats[name].host_ms_per_call = value
    for name, values in (host_windows_ms or {}).items():
        if name in stats and values:
            stats[name].host_spread = window_spread(values)
    for item in stats.values():
        item.counted_ms, item.clock = counted_ms(item.median_ms, item.host_ms_per_call)
        item.replayed = item.name in (replayed or [])
        item.window_calls = (window_calls or {}).get(item.name)
        if item.window_calls and resolution_ms is not None:
            item.confirmed = item.window_calls * item.median_ms >= CONFIRMING_WORK * resolution_ms
    return stats


def counted_ms(event_ms: float, host_ms: float | None) -> tuple[float, str]:
    """The clock rule: the time a side's speed counts, and which clock gave it. The larger of its
    event median and its back-to-back time less PARENT_CLOCK_SLACK of the events: continuous in
    both, the events for a device-bound call, the parent's clock for a host-bound one or a timer
    that claims less than really passed (at most the slack's worth of a claim survives)."""
    if host_ms is None:
        return event_ms, EVENTS
    seen = host_ms - PARENT_CLOCK_SLACK * event_ms
    return (seen, PARENT_CLOCK) if seen > event_ms else (event_ms, EVENTS)


def window_spread(per_call_ms: list[float]) -> float:
    """The relative half-range of a side's per-window back-to-back times (PARENT_CLOCK_NOISE for one)."""
    values = [v for v in per_call_ms if v > 0]
    if len(values) < 2:
        return PARENT_CLOCK_NOISE
    middle = statistics.median(values)
    return (max(values) - min(values)) / (2 * middle)


def clock_line(stats: dict[str, TimingStats], names: list[str]) -> str:
    """One line: which clock decided each side's time, and why."""
    parts = []
    for name in names:
        item = stats.get(name)
        if item is None:
            continue
        host = item.host_ms_per_call
        how = "replayed as a graph" if item.replayed else "back to back"
        if item.window_calls:
            how += f", {item.window_calls} calls a window"
        excess = item.window_steps_ms.get("excess", 0.0)
        if excess > 0:
            how += f", {excess:.3f} ms of writing its sets and keeping its outputs past the trusted job's counted"
        if item.remeasured:
            how += ", rounds measured again: the first ones' events were over what these windows allow"
        if host is None:
            parts.append(f"{name} by its events, {item.median_ms:.4f} ms a call (no back-to-back window)")
        elif item.clock == PARENT_CLOCK:
            parts.append(f"{name} by the parent's clock, {item.counted_ms:.4f} ms a call {how} "
                         f"(its events {item.median_ms:.4f} ms)")
        else:
            unconfirmed = "; a window's claimed work too little for the clock to confirm" if item.confirmed is False else ""
            # a window no longer than its overhead and the allowance: under what the clock resolves, not 0 ms
            seen = f"{host:.4f} ms" if host > 0 else "under the clock's resolution"
            parts.append(f"{name} by its events, {item.median_ms:.4f} ms a call ({how}{':' if item.window_calls else ''} "
                         f"{seen}{unconfirmed})")
    return "; ".join(parts)


def _clock_factor(item: TimingStats) -> float:
    """How much longer the counted time is than the event median (1 where the events decided)."""
    return (item.counted_ms or item.median_ms) / item.median_ms if item.median_ms > 0 else 1.0


def _speedups(samples: dict[str, list[float]], stats: dict[str, TimingStats]) -> dict[str, float]:
    """Over each baseline: the median of per-round event ratios (rounds paired in time cancel drift),
    scaled by each side's clock factor (from `stats`, made of the same rounds), so that where the events
    decided both it is theirs exactly."""
    candidate = samples[CANDIDATE]
    return {name: timing.speedup_from_rounds(values, candidate) * _clock_factor(stats[name]) / _clock_factor(stats[CANDIDATE])
            for name, values in samples.items() if name not in (CANDIDATE, AGAIN)}


def _noise(samples: dict[str, list[float]], stats: dict[str, TimingStats]) -> float:
    """The events' noise (the candidate timed twice in the same rounds), and where the parent's clock
    decided the candidate's or eager's time, that clock's spread over its windows."""
    noise = timing.noise_floor(samples[CANDIDATE], samples[AGAIN])
    for name in (CANDIDATE, EAGER):
        item = stats.get(name)
        if item is not None and item.clock == PARENT_CLOCK:
            noise = max(noise, item.host_spread if item.host_spread is not None else PARENT_CLOCK_NOISE)
    return noise


def judge_speed(measured: Measurement | dict[str, Any]) -> SpeedJudgement:
    measurement = Measurement.model_validate(measured)
    samples = measurement.samples_ms
    stats = summarize_all(samples, measurement.host_ms_per_call, measurement.host_windows_ms, measurement.replayed,
                          measurement.window_calls, measurement.clock_resolution_ms)
    stats[CANDIDATE].overhead_ms_per_call = measurement.fresh_overhead_ms_per_call
    for name, steps in measurement.window_steps_ms.items():
        if name in stats:
            stats[name].window_steps_ms = dict(steps)
    for name in measurement.rounds_remeasured:
        if name in stats:
            stats[name].remeasured = True
    candidate = samples[CANDIDATE]
    speedups = _speedups(samples, stats)
    noise = _noise(samples, stats)
    speedup = speedups.get(EAGER)
    judgement = SpeedJudgement(timings={k: v for k, v in stats.items() if k != AGAIN}, speedup=speedup,
                               speedups=speedups, noise_floor=noise,
                               win=timing.is_win(speedup, noise) if speedup else None)
    event_ms = stats[CANDIDATE].median_ms
    measured_ms = stats[CANDIDATE].counted_ms or event_ms
    roof = dict(measurement.roofline)
    host_ms = stats[CANDIDATE].host_ms_per_call
    judgement.speed_source = clock_line(stats, [CANDIDATE, *[n for n in samples if n not in (CANDIDATE, AGAIN)]])
    profile = judgement.profile = profiler.profile_of(measurement, event_ms, measured_ms, judgement.speed_source)
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
        # only on calls whose values were fresh and whose outputs the parent checked one by one, and
        # every number of it from those rounds alone, the clock rule's too (claims that differ there,
        # in a block the child can tell by its size, would otherwise divide one median by another).
        picked = {name: [values[r] for r in checked] for name, values in samples.items()}
        picked_stats = summarize_all(picked, measurement.host_ms_per_call, measurement.host_windows_ms,
                                     measurement.replayed, measurement.window_calls, measurement.clock_resolution_ms)
        judgement.speedups = speedups = _speedups(picked, picked_stats)
        judgement.speedup = speedup = speedups.get(EAGER)
        picked_ms = picked_stats[CANDIDATE].median_ms
        if roof.get("output_floor_ms") and picked_ms < roof["output_floor_ms"] and not judgement.rejection:
            judgement.rejection_code = Code.faster_than_possible
            judgement.rejection = (f"faster than any correct kernel can be: {picked_ms:.4f} ms claimed in the checked "
                                   f"rounds, but writing its {roof.get('output_bytes', 0):.3g} bytes of output takes at "
                                   f"least {roof['output_floor_ms']:.4f} ms on {roof.get('peaks', 'this GPU')}")
        judgement.win = timing.is_win(speedup, noise) if speedup else None
        judgement.warnings.append(f"under the reference's roofline: its speed counts only the {len(checked)} timed "
                                  "calls whose outputs were checked")
    if measurement.fresh_values is False:
        # Its timed calls reran values it had seen: a memo would read as speed. Its times are kept, no speedup.
        judgement.speedups, judgement.speedup, judgement.win = {}, None, None
        speedup = None
        judgement.warnings.append("no speedup: no floating input to draw fresh values for, so its timed calls reran "
                                  "values it had seen (integer inputs are kept as the problem made them), and a memo "
                                  "would read as speed")
    unsettled = [name for name in measurement.events_contradicted if name not in (CANDIDATE, AGAIN)]
    if unsettled and judgement.speedup is not None:
        # A baseline's events over what its own replayed windows allow, in both measurements: something
        # else ran on the GPU while it was timed (the candidate's process may be that something), so
        # no speedup stands on them. The candidate's own contradicted events are its loss and stand.
        judgement.speedups, judgement.speedup, judgement.win = {}, None, None
        speedup = None
        judgement.warnings.append(f"no speedup: {', '.join(unsettled)}'s events were over what its replayed "
                                  "windows allow, measured twice (other work on the GPU while it was timed)")
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
    # A note, not a switch: the clock rule has already counted what a caller sees. Not beside a
    # rejection: hidden work on a side stream looks host-bound too, and the rejection tells that story.
    if host_ms and host_ms > HOST_BOUND_RATIO * event_ms + HIDDEN_WORK_SLACK_MS and not judgement.rejection:
        judgement.warnings.append(
            f"host-bound: back to back a call takes {host_ms:.4f} ms by the parent's clock but the candidate's "
            f"events claim {event_ms:.4f} ms; its speed counts the parent clock's time, what a caller sees")
    if speedup and speedup < 1.0 - noise:
        judgement.warnings.append(f"slower than eager: speedup {speedup:.3f}x, below the noise floor ({noise:.3f})")
    elif speedup and not judgement.win:
        judgement.warnings.append(f"speedup {speedup:.3f}x is within the noise floor ({noise:.3f}): not a win")
    return judgement
