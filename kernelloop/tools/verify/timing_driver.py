"""The parent drives the timing phase: baselines in the trusted job, the candidate in its own
child, block by block in turn, and its own clock around what the candidate does.

What comes from where:
  eager, torch.compile, problem baselines   event times from the trusted job (no candidate code)
  candidate, candidate_again                event times the candidate's process reports: claims
  host_ms_per_call (candidate, eager)       this process's clock around K back-to-back calls in
                                            each child, ended by a device-wide synchronize there
                                            (the candidate's less the same per-call work without
                                            it, timed the same way in the trusted job)
  parent_block_ms                           this process's clock around each timed block
  kernels, kernel_split, launches           the candidate's own profile: claims
  roofline, device_name                     the trusted job
  gpu                                       NVML, read here
speed.judge_speed turns these into the verdict's speed: the candidate's event times count only
where this process's clock bears them out.

Two ways, chosen per verification. With fresh timing (the default, `checks` given;
`_drive_fresh`), no input repeats: every timed call, the baselines' and the candidate's, runs on
fresh values drawn from a secret seed sent with its request (fresh_values.py), so a memo (by
address, `_version` or content) never meets values it has seen; outputs of the candidate's timed
calls picked at random after each request are checked against the reference on the same values
(timed_checks.py). Without it (`Verifier(fresh_timing=False)`, `--no-fresh-timing`; `_drive_plain`)
the trial sets are timed in turn, and a candidate that recognises them can memoise.

Back to back (`_windows`, both ways): every side, the candidate and each baseline, is timed the
same way, in windows: the parent's clock around the child's work on `calls` calls. With fresh values
a window writes a set of its own per call (so an answer computed from them is timed too), runs the
calls, then keeps and digests their outputs. Where every side's calls can be captured, they are one
CUDA graph per side (window_graph.py), replayed in each window: no host work between the calls and no
candidate code while they run, so the clock bounds their device time. Such a window is three
requests, each timed on its own (STAGES): "fill" (the sets written), "run" (the replay alone) and
"keep"; a side's time per call is its fastest run step less the trusted job's fastest "overhead" run
step (the round trip) and FIXED_ALLOWANCE_MS, over the calls, plus whatever its fill and keep steps
took past the trusted job's fastest of the same steps (Windows.excess_ms): work moved out of the run
step is counted all the same, and a small kernel's time is no longer the difference of two large
numbers (its fresh values' writes were 8x a GELU's calls). A plain window (no graph: Python between
its calls) is one request: each call's values written just before it and its outputs kept as it
ends, so no call can be batched with the ones after or before it; the overhead window does the same
writes and keeps alone. Noise only ever adds to a window. Windows are sized to WINDOW_MS of work;
MIN_WINDOWS of them, more (to MAX_WINDOWS) while the parent's clock would outweigh a side's events
(speed.counted_ms weighs one against the other).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field

from kernelloop.records import Measurement
from kernelloop.sandbox.runner import JobSession
from kernelloop.tools.profile import gpu
from kernelloop.tools.profile.measure import CANDIDATE
from kernelloop.tools.profile.stopwatch import Stopwatch
from kernelloop.tools.verify._runtime import no_collection
from kernelloop.tools.verify.kept_outputs import capacity
from kernelloop.tools.verify.reference_server import ReferenceServer
from kernelloop.tools.verify.speed import PARENT_CLOCK, SpeedJudgement, counted_ms, judge_speed
from kernelloop.tools.verify.timed_checks import BLOCK_PICKS, SCRUTINY_ROUNDS, TimedChecks, TimedFailure

FIRST_BLOCK_ROUNDS = 10
MAX_BLOCK_ROUNDS = 200
MIN_ROUNDS, MIN_CANDIDATE_MS, MAX_ROUNDS = 50, 100.0, 1000
MAX_TIMED_S = 20.0  # wall-clock cap on the blocks, both processes together
WINDOW_MS = 10.0  # about this much work in one window (fewer calls where their sets don't fit)
MIN_CALLS, MAX_CALLS = 5, 2000
MIN_WINDOWS, MAX_WINDOWS = 3, 6
ROUNDS_BUDGET_S = 1.0  # past MIN_ROUNDS, the blocks end by this much time (a median of 50+ paired rounds is steady)
FEWEST_ROUNDS = 20  # past twice ROUNDS_BUDGET_S, enough (slow baselines: eager attention takes 17 ms a round)
# Of every window, what the parent's clock can't attribute to its calls: the request's round trip and
# the child's own fixed work, which on an H200 ran about 0.7 ms longer in a candidate's child than in
# the trusted job whose overhead window is taken off (from the excess of 8 examples' graph replays
# over their events). Taken off every side alike: an honest call's time then stays at or under its
# events, and a forged timer gains at most this over a window's calls.
FIXED_ALLOWANCE_MS = 1.0
OVERHEAD = "overhead"  # the trusted job's window of everything but the calls


TIMING_PARTS = {  # where fresh timing's wall time goes (Verdict.cost_s "timing_<part>"), the parent's clock
    "rounds_trusted_s": "the baselines' blocks of rounds, in the trusted job",
    "rounds_child_s": "the candidate's blocks of rounds, in its child",
    "rounds_checks_s": "checks of the blocks' picked calls (handed over, remade in the trusted job, compared)",
    "capture_s": "each side's window captured as a CUDA graph",
    "windows_trusted_s": "the baselines' and the overhead's back-to-back windows",
    "windows_child_s": "the candidate's back-to-back windows",
    "windows_checks_s": "checks of the windows' picked calls",
}


class _Spent:
    """Adds the wall time of each `with spent(part):` block to parts[part] (seconds)."""

    def __init__(self, parts: dict[str, float]):
        self.parts = parts

    @contextlib.contextmanager
    def __call__(self, part: str):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.parts[part] = self.parts.get(part, 0.0) + time.perf_counter() - started


@dataclass
class Rehearsed:
    """The timing protocol run on the CPU (host clocks, tests only): how many timed calls were
    checked; nothing timed reaches the verdict."""

    checked: int


def _ask(session: JobSession, kind: str, request: dict, timed: bool = False) -> tuple[dict | None, float]:
    """One request to the candidate's child and its answer, with this process's clock (ms) around it
    (`timed`: the session's own checks kept out of it, JobSession.receive's `timed`, and this
    process's garbage collector held off while it waits)."""
    with no_collection() if timed else contextlib.nullcontext():
        started = time.perf_counter()
        if not session.send({kind: request}):
            return None, 0.0
        message = session.receive(timed=timed)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
    answer = message.get(kind) if message else None
    return (answer if isinstance(answer, dict) else None), elapsed_ms


def _samples(answer: dict | None, names: list[str]) -> dict[str, list[float]] | None:
    """Per-name lists of finite, non-negative floats, or None: a claim that doesn't parse is no claim."""
    raw = (answer or {}).get("samples_ms")
    if not isinstance(raw, dict):
        return None
    out = {}
    for name in names:
        values = raw.get(name)
        if not isinstance(values, list) or not values:
            return None
        try:
            floats = [float(v) for v in values]
        except (TypeError, ValueError):
            return None
        if not all(math.isfinite(v) and v >= 0 for v in floats):
            return None
        out[name] = floats
    return out


def drive_timing(session: JobSession, server: ReferenceServer, cuda_index: int | None, skip: list[str] | None = None,
                 laps: Stopwatch | None = None, timed: dict | None = None, checks: TimedChecks | None = None,
                 rehearse: bool = False, parts: dict[str, float] | None = None) -> SpeedJudgement | TimedFailure | Rehearsed | str:
    """Time the candidate against its baselines on the sets the trusted job made last; a string
    when the candidate's child broke off or answered nonsense, a TimedFailure when a timed call
    failed its check (the caller turns either into a verdict). `cuda_index`: this process's index
    of the GPU being timed, for NVML (None: unknown). `skip`: torch.compile baselines not to
    compile (their times come from a cached record; the trusted job builds them anyway if it
    already has). `laps`: the verification's Stopwatch to mark "baselines", "timing" and "profile"
    on; `timed` gets the baselines timed ("timed") and their compile times. `checks`: fresh timing
    (the verifier's default): fresh values for every timed call and checks of calls picked at
    random; None (`fresh_timing=False`) times as before them. `rehearse` (fresh timing only): the
    CPU, for tests: the same conversation on host clocks, no profile and no speed. `parts` (fresh
    timing) gets where the timing's wall time went, seconds by TIMING_PARTS, added to what it holds."""
    if checks is None:
        if rehearse:
            raise ValueError("a timing rehearsal runs fresh timing: it needs checks")
        return _drive_plain(session, server, cuda_index, skip, laps, timed)
    return _drive_fresh(session, server, cuda_index, skip, laps, timed, checks, rehearse, {} if parts is None else parts)


def _drive_plain(session: JobSession, server: ReferenceServer, cuda_index: int | None, skip: list[str] | None,
                 laps: Stopwatch | None, timed: dict | None) -> SpeedJudgement | str:
    """Timing without fresh values: the trial sets in turn, as before fresh timing existed (the same
    requests to both children, in the same order, and the same measurement)."""
    baseline_setup = server.ask("timing", {"skip": list(skip or [])})
    if timed is not None:
        timed.update(timed=[str(n) for n in baseline_setup.get("names") or []], compile_s=baseline_setup.get("compile_s") or {})
    if laps is not None:
        laps.lap("baselines")
    setup, _ = _ask(session, "time", {})
    if setup is None:
        return "the candidate's process stopped answering when timing began"
    names = [str(n) for n in baseline_setup["names"]]
    candidate_names = ["candidate", "candidate_again"]
    samples: dict[str, list[float]] = {name: [] for name in names + candidate_names}
    parent_block_ms: list[float] = []
    claimed_block_ms: list[float] = []
    started = time.perf_counter()
    with gpu.measure_around(_nvml_index(cuda_index)) as state:
        rounds = FIRST_BLOCK_ROUNDS
        while True:
            baseline_block = server.ask("block", {"rounds": rounds})
            answer, wall_ms = _ask(session, "block", {"rounds": rounds})
            claimed = _samples(answer, candidate_names)
            trusted = _samples(baseline_block, names)
            if claimed is None or trusted is None or any(len(v) != rounds for v in (*claimed.values(), *trusted.values())):
                return "the candidate's process answered a timing block with something other than its samples"
            for name, values in {**claimed, **trusted}.items():
                samples[name] += values
            parent_block_ms.append(wall_ms)
            claimed_block_ms.append(sum(claimed["candidate"]) + sum(claimed["candidate_again"]))
            done = len(samples["candidate"])
            total = sum(samples["candidate"])
            elapsed = time.perf_counter() - started
            if _enough_rounds(done, total, elapsed):
                break
            rounds = _next_block(done, total, elapsed)
        calls = _window_calls(samples, parent_block_ms, MAX_CALLS)
        backs = _windows(session, server, names, calls, _medians(samples), None)
        if not isinstance(backs, Windows):  # no checks without fresh values: only the child's breaking off
            return backs if isinstance(backs, str) else backs.reason
    if laps is not None:
        laps.lap("timing")
    profile, _ = _ask(session, "profile", {})
    if laps is not None:
        laps.lap("profile")
    claimed_profile = profile if isinstance(profile, dict) else {}
    kernels, split = claimed_profile.get("kernels"), claimed_profile.get("kernel_split")
    launches = claimed_profile.get("launches")
    judged = judge_speed(Measurement(
        samples_ms=samples, host_ms_per_call=backs.per_call(), host_windows_ms=backs.per_window,
        window_calls={name: calls for name in backs.walls}, clock_resolution_ms=FIXED_ALLOWANCE_MS,
        back_to_back_calls=calls * backs.windows, parent_block_ms=parent_block_ms, claimed_block_ms=claimed_block_ms,
        compile_s=baseline_setup.get("compile_s") or {},
        kernels=[k for k in kernels if isinstance(k, dict)] if isinstance(kernels, list) else [],
        kernel_split=split if isinstance(split, dict) else {},
        launches=[item for item in launches if isinstance(item, dict)] if isinstance(launches, list) else [],
        roofline=baseline_setup.get("roofline") or {}, gpu=state, device_name=baseline_setup.get("device_name"),
        phase_s={"timing": time.perf_counter() - started}))
    return judged


def _drive_fresh(session: JobSession, server: ReferenceServer, cuda_index: int | None, skip: list[str] | None,
                 laps: Stopwatch | None, timed: dict | None, checks: TimedChecks,
                 rehearse: bool, parts: dict[str, float]) -> SpeedJudgement | TimedFailure | Rehearsed | str:
    """Timing with fresh values and checks of timed calls."""
    spent = _Spent(parts)
    keep_calls = capacity(checks.nbytes)
    # Both set up at once: the child's (its buffers and warm-up; its standby compiled the digest
    # kernel) while the trusted job builds and warms the baselines.
    asked = session.send({"time": {"fresh": True, "keep_calls": keep_calls}})
    baseline_setup = server.ask("timing", {"skip": list(skip or []), "fresh": True, "keep_calls": keep_calls})
    if timed is not None:
        timed.update(timed=[str(n) for n in baseline_setup.get("names") or []], compile_s=baseline_setup.get("compile_s") or {})
    if laps is not None:
        laps.lap("baselines")
    message = session.receive() if asked else None
    if not message or not isinstance(message.get("time"), dict):
        return "the candidate's process stopped answering when timing began"
    names = [str(n) for n in baseline_setup["names"]]
    candidate_names = ["candidate", "candidate_again"]
    samples: dict[str, list[float]] = {name: [] for name in names + candidate_names}
    parent_block_ms: list[float] = []
    claimed_block_ms: list[float] = []
    checked_rounds: list[int] = []
    block_probability = TimedChecks.block_probability(keep_calls, MAX_ROUNDS)

    def run_block(rounds: int, check_all: bool = False) -> TimedFailure | str | None:
        """One block of rounds in both processes, its samples kept; its candidate calls checked
        (some, with a probability, or all)."""
        seed = TimedChecks.seed()
        with spent("rounds_trusted_s"):
            baseline_block = server.ask("block", {"rounds": rounds, "seed": TimedChecks.seed()})
        with spent("rounds_child_s"):
            answer, wall_ms = _ask(session, "block", {"rounds": rounds, "seed": seed}, timed=True)
        claimed = _samples(answer, candidate_names)
        trusted = _samples(baseline_block, names)
        if claimed is None or trusted is None or any(len(v) != rounds for v in (*claimed.values(), *trusted.values())):
            return "the candidate's process answered a timing block with something other than its samples"
        done = len(samples["candidate"])
        for name, values in {**claimed, **trusted}.items():
            samples[name] += values
        parent_block_ms.append(wall_ms)
        claimed_block_ms.append(sum(claimed["candidate"]) + sum(claimed["candidate_again"]))
        digests = TimedChecks.digests(answer, rounds)
        if digests is None:
            return "the candidate's process answered a timing block without a digest of each timed output"
        if not check_all and not TimedChecks.chosen(block_probability):
            return None
        picked = list(range(rounds)) if check_all else TimedChecks.pick(rounds, BLOCK_PICKS)
        # the candidate's call of round r is call 2r of the request (the rounds' calls numbered candidate first)
        with spent("rounds_checks_s"):
            failed = checks.check(seed, 2 * rounds, [(r, 2 * r) for r in picked], digests)
        checked_rounds.extend(done + r for r in picked)
        return failed

    def measure_rounds() -> TimedFailure | str | None:
        """Blocks of rounds to enough of them (_enough_rounds), and under the reference's roofline a
        block checked call by call (its speed counts only from those)."""
        began = time.perf_counter()
        rounds = FIRST_BLOCK_ROUNDS
        while True:
            failed = run_block(max(1, min(rounds, keep_calls or rounds)))
            if failed is not None:
                return failed
            done = len(samples["candidate"])
            total = sum(samples["candidate"])
            elapsed = time.perf_counter() - began
            if _enough_rounds(done, total, elapsed):
                break
            rounds = _next_block(done, total, elapsed)
        floor_ms = (baseline_setup.get("roofline") or {}).get("floor_ms")
        if floor_ms and statistics.median(samples["candidate"]) < floor_ms:
            return run_block(min(SCRUTINY_ROUNDS, keep_calls), check_all=True)
        return None

    started = time.perf_counter()
    remeasured: list[str] = []
    contradicted: list[str] = []
    with gpu.measure_around(_nvml_index(cuda_index)) as state:
        failed = measure_rounds()
        if failed is not None:
            return failed
        if laps is not None:
            laps.lap("rounds")
        # Each call of a window on a set of its own (no refill between calls) where the sets fit
        # in the window's memory; past that, as few calls as a window needs.
        fit = max(int(baseline_setup.get("window_sets") or 0), MIN_CALLS)
        calls = _window_calls(samples, parent_block_ms, max(1, min(keep_calls, fit)))
        with spent("capture_s"):
            replayed = _capture(session, server, names, calls)
        if isinstance(replayed, str):
            return replayed
        backs = _windows(session, server, names, calls, _medians(samples), checks, replayed, spent)
        if not isinstance(backs, Windows):
            return backs
        remeasured = backs.contradicted(_medians(samples))
        if remeasured:
            # Events far over what a side's own replayed windows allow were not its calls' alone
            # (another context's work on the GPU during its rounds: H200 run 13, one verification's
            # events 8x its others'). The rounds once more, every side's (their rounds are paired).
            for values in samples.values():
                values.clear()
            parent_block_ms.clear()
            claimed_block_ms.clear()
            checked_rounds.clear()
            failed = measure_rounds()  # their parts add to the rounds' in `parts`
            if failed is not None:
                return failed
            # Held against the same windows again: the candidate can ask for this second measurement (its
            # own events are its claim) and tell it from the first, so a baseline still over its bound gets
            # no speedup from these events (judge_speed), and the candidate's own stand against it
            contradicted = backs.contradicted(_medians(samples))
    if laps is not None:
        laps.lap("timing")
    if rehearse:
        return Rehearsed(checked=checks.checked)
    profile, _ = _ask(session, "profile", {})
    if laps is not None:
        laps.lap("profile")
    claimed_profile = profile if isinstance(profile, dict) else {}
    kernels, split = claimed_profile.get("kernels"), claimed_profile.get("kernel_split")
    launches = claimed_profile.get("launches")
    judged = judge_speed(Measurement(
        samples_ms=samples, host_ms_per_call=backs.per_call(), host_windows_ms=backs.per_window,
        replayed=[*names, CANDIDATE] if replayed else [], window_calls={name: calls for name in backs.walls},
        clock_resolution_ms=FIXED_ALLOWANCE_MS + (2 * STAGE_SLACK_MS if replayed else 0.0),
        back_to_back_calls=calls * backs.windows, parent_block_ms=parent_block_ms, claimed_block_ms=claimed_block_ms,
        fresh_overhead_ms_per_call=backs.overhead_ms_per_call(), window_steps_ms=backs.steps_ms(),
        checked_rounds=checked_rounds, fresh_values=bool(baseline_setup.get("fresh_values")), rounds_remeasured=remeasured,
        events_contradicted=contradicted,
        compile_s=baseline_setup.get("compile_s") or {},
        kernels=[k for k in kernels if isinstance(k, dict)] if isinstance(kernels, list) else [],
        kernel_split=split if isinstance(split, dict) else {},
        launches=[item for item in launches if isinstance(item, dict)] if isinstance(launches, list) else [],
        roofline=baseline_setup.get("roofline") or {}, gpu=state, device_name=baseline_setup.get("device_name"),
        phase_s={"timing": time.perf_counter() - started}))
    return judged


def _enough_rounds(done: int, candidate_total_ms: float, elapsed_s: float) -> bool:
    """Whether the blocks have enough rounds: MIN_ROUNDS with MIN_CANDIDATE_MS of the candidate's work,
    MAX_ROUNDS or ROUNDS_BUDGET_S of both processes' time; FEWEST_ROUNDS past twice the budget; or
    MAX_TIMED_S whatever the count."""
    if elapsed_s > MAX_TIMED_S or (done >= FEWEST_ROUNDS and elapsed_s > 2 * ROUNDS_BUDGET_S):
        return True
    return done >= MIN_ROUNDS and (candidate_total_ms >= MIN_CANDIDATE_MS or done >= MAX_ROUNDS or elapsed_s > ROUNDS_BUDGET_S)


def _next_block(done: int, candidate_total_ms: float, elapsed_s: float) -> int:
    """The next block's rounds: to MIN_ROUNDS and MIN_CANDIDATE_MS of the candidate's work (at most
    MAX_BLOCK_ROUNDS, and MAX_ROUNDS in all), but no more than ROUNDS_BUDGET_S leaves room for at the
    pace of the blocks so far (a round's host work in both processes is most of a small kernel's round:
    a block of 200 ran seconds past the budget), save what MIN_ROUNDS needs, and that only within twice
    the budget, save what FEWEST_ROUNDS needs."""
    per_round_ms = max(candidate_total_ms / done, 1e-3)
    wanted = max(MIN_ROUNDS - done, math.ceil((MIN_CANDIDATE_MS - candidate_total_ms) / per_round_ms))
    rounds = max(1, min(MAX_BLOCK_ROUNDS, MAX_ROUNDS - done, wanted))
    pace_s = max(elapsed_s / done, 1e-9)
    within = math.floor((ROUNDS_BUDGET_S - elapsed_s) / pace_s)
    within_twice = math.floor((2 * ROUNDS_BUDGET_S - elapsed_s) / pace_s)
    needed = min(MIN_ROUNDS - done, max(within_twice, FEWEST_ROUNDS - done))
    return max(1, min(rounds, max(within, needed)))


def _medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in samples.items() if values}


def _window_calls(samples: dict[str, list[float]], parent_block_ms: list[float], most: int) -> int:
    """Calls in one window: about WINDOW_MS of work, by eager's event time and by what a candidate
    call cost on this process's clock in the blocks (flush and hold included: an upper bound, so a
    candidate slow on the host is not called thousands of times); at most `most`."""
    eager_ms = statistics.median(samples["eager"])
    wall_per_call_ms = sum(parent_block_ms) / (2 * len(samples["candidate"]))
    wanted = max(MIN_CALLS, min(MAX_CALLS, math.ceil(WINDOW_MS / max(eager_ms, wall_per_call_ms, 1e-3))))
    return max(1, min(wanted, most))


STAGES = ("fill", "run", "keep")  # a replayed window's steps, each its own request timed on its own
# A replayed window's "fill" and "keep" steps are the same work on every side (the sets written, the
# outputs kept and digested): a side's step that takes longer than the trusted job's fastest of the
# same step, by more than this share and this many ms, has the excess added to its window's time, so
# work moved into them (answers computed while the sets are written or while the outputs are read) is
# counted as the calls' own. The slack is what honest sides differ by: on an H200 the trusted job's own
# sides' fastest fill steps differed by up to 0.8 ms for the same work (run 10 of
# docs/results/h200_trusted_speed), so with a 0.5 ms slack honest sides were charged up to 0.6 ms.
# What a window can't charge is part of the clock's resolution (clock_resolution_ms).
STAGE_SLACK, STAGE_SLACK_MS = 0.05, 1.0
# Events this many times a replayed window's run step a call are not the calls' (a back-to-back window on
# values its fill just wrote may run from a warm L2 where the events' rounds flush it: some margin)
EVENTS_OVER_RUN_STEP = 1.5


@dataclass
class Windows:
    """Each side's back-to-back windows: the parent's clock (ms) around each, and with fresh values
    the trusted job's overhead window beside each round of them. Replayed windows are timed step by
    step: `walls` and `overheads` then hold the "run" step alone (the graph's replay, nothing else),
    `fills` and `keeps` each side's (OVERHEAD's too) other two steps."""

    calls: int
    walls: dict[str, list[float]]
    overheads: list[float]
    fills: dict[str, list[float]] = field(default_factory=dict)
    keeps: dict[str, list[float]] = field(default_factory=dict)

    @property
    def windows(self) -> int:
        return len(self.walls[CANDIDATE])

    def excess_ms(self, name: str, index: int | None = None) -> float:
        """What side `name`'s fill and keep steps took past the trusted job's fastest of the same steps
        (STAGE_SLACK and STAGE_SLACK_MS let through), in window `index` or (None) its fastest; 0 for
        plain windows."""
        total = 0.0
        for steps in (self.fills, self.keeps):
            trusted = [ms for side, values in steps.items() if side != CANDIDATE for ms in values]
            if name not in steps or not trusted or not steps[name]:
                continue
            own = steps[name][index] if index is not None else min(steps[name])
            total += max(0.0, own - min(trusted) * (1 + STAGE_SLACK) - STAGE_SLACK_MS)
        return total

    @property
    def per_window(self) -> dict[str, list[float]]:
        """Per side, each window's time per call, its round's overhead and FIXED_ALLOWANCE_MS taken off
        and its steps' excess added (never below 0)."""
        overheads = self.overheads or [0.0] * self.windows
        return {name: [max(0.0, wall - over - FIXED_ALLOWANCE_MS + self.excess_ms(name, i)) / self.calls
                       for i, (wall, over) in enumerate(zip(walls, overheads, strict=True))]
                for name, walls in self.walls.items()}

    def per_call(self) -> dict[str, float]:
        """Per side, its fastest window: whatever else runs (a collection, the scheduler, the request's
        round trip) only adds to a window, and nothing a candidate does can take time off its calls'
        device work, so the least is the truest, and no side can lower it but by being faster. Each
        window's run step with its own steps' excess (never one window's run beside another's fill), less
        the fastest overhead window and FIXED_ALLOWANCE_MS, over the calls (never below 0)."""
        overhead = min(self.overheads, default=0.0)
        return {name: max(0.0, min(wall + self.excess_ms(name, i) for i, wall in enumerate(walls))
                          - overhead - FIXED_ALLOWANCE_MS) / self.calls
                for name, walls in self.walls.items()}

    def contradicted(self, events_ms: dict[str, float]) -> list[str]:
        """Replayed sides whose event median is over EVENTS_OVER_RUN_STEP times their fastest run step
        a call: a run step's wall, the request's round trip and all, bounds its calls' device time
        from above, so events that far over it were not the calls' alone."""
        if not self.fills:
            return []
        return [name for name, walls in self.walls.items()
                if name in events_ms and events_ms[name] > EVENTS_OVER_RUN_STEP * min(walls) / self.calls]

    def deciding(self, events_ms: dict[str, float]) -> list[str]:
        """Sides whose parent-clock time would outweigh their events (speed.counted_ms): the ones the
        windows go on for, so the clock that decides has had its fastest window found."""
        return [name for name, ms in self.per_call().items()
                if name in events_ms and counted_ms(events_ms[name], ms)[1] == PARENT_CLOCK]

    def unresolved(self) -> list[str]:
        """Sides whose fastest window took no longer than the fastest overhead window: noise, not a time
        (a window's calls can't take less than nothing), so the windows go on for them."""
        if not self.overheads:
            return []
        overhead = min(self.overheads)
        return [name for name, walls in self.walls.items() if min(walls) <= overhead]

    def overhead_ms_per_call(self) -> float | None:
        """What a window's work besides its calls cost the trusted job, per call (all its steps)."""
        if not self.overheads:
            return None
        steps = [min(self.overheads)] + [min(s[OVERHEAD]) for s in (self.fills, self.keeps) if s.get(OVERHEAD)]
        return sum(steps) / self.calls

    def steps_ms(self) -> dict[str, dict[str, float]]:
        """Per side of replayed windows, the fastest of each step (ms): what the verdict shows of them."""
        if not self.fills:
            return {}
        return {name: {"fill": min(self.fills[name]), "run": min(walls), "keep": min(self.keeps[name]),
                       "excess": self.excess_ms(name)}
                for name, walls in self.walls.items() if self.fills.get(name) and self.keeps.get(name)}


def _capture(session: JobSession, server: ReferenceServer, names: list[str], calls: int) -> bool | str:
    """Each side's window of `calls` calls as one CUDA graph (window_graph.py), untimed: True where
    every side's was made (then every window is a replay), False where one's could not be (then no
    side's is: all are timed the same way), a string where the child broke off."""
    made = server.ask("capture", {"calls": calls}).get("graphs") or []
    answer, _ = _ask(session, "capture", {"calls": calls})
    if answer is None:
        return "the candidate's process stopped answering when its window was captured"
    return bool(answer.get("graph")) and set(names) <= set(made)


def _windows(session: JobSession, server: ReferenceServer, names: list[str], calls: int, events_ms: dict[str, float],
             checks: TimedChecks | None, replayed: bool = False, spent: _Spent | None = None) -> Windows | TimedFailure | str:
    """Rounds of back-to-back windows, every baseline's in the trusted job and the candidate's in its
    child, with (fresh values, `checks`) the overhead window and a check of one call of each
    candidate window picked at random; MIN_WINDOWS, then more (to MAX_WINDOWS) while the parent's
    clock would decide a side over its events (`Windows.deciding`, with `events_ms`, each side's
    event median). `replayed`: every window a replay of its side's CUDA graph. `spent`: where the time went."""
    spent = spent or _Spent({})
    backs = Windows(calls, {name: [] for name in [*names, CANDIDATE]}, [])
    if replayed:
        backs.fills = {name: [] for name in [*names, OVERHEAD, CANDIDATE]}
        backs.keeps = {name: [] for name in [*names, OVERHEAD, CANDIDATE]}
    started = time.perf_counter()
    while True:
        with spent("windows_trusted_s"):
            for name in names:
                _trusted_window(server, backs, name, calls, checks is not None, replayed)
            if checks is not None:
                _trusted_window(server, backs, OVERHEAD, calls, True, replayed)
        seed = TimedChecks.seed()
        with spent("windows_child_s"):
            answer = _child_window(session, backs, calls, seed if checks is not None else None, replayed)
        if answer is None:
            return "the candidate's process stopped answering during the back-to-back check"
        if checks is not None:
            digests = TimedChecks.digests(answer, calls)
            if digests is None:
                return "the candidate's process answered the back-to-back check without a digest of each output"
            picks = TimedChecks.pick(calls, 1)
            with spent("windows_checks_s"):
                failed = checks.check(seed, calls, [(i, i) for i in picks], digests)
            if failed is not None:
                return failed
        enough = backs.windows >= MIN_WINDOWS and not backs.deciding(events_ms) and not backs.unresolved()
        out_of_time = backs.windows >= 2 and time.perf_counter() - started > MAX_TIMED_S
        if enough or out_of_time or backs.windows >= MAX_WINDOWS:
            return backs


def _child_window(session: JobSession, backs: Windows, calls: int, seed: int | None, replayed: bool) -> dict | None:
    """One back-to-back window of the candidate's, its times put in `backs`: one request (`seed`: its
    fresh values'), or a replayed window's three steps; its last answer, None where the child broke off."""
    answer: dict | None = None
    if not replayed:
        answer, wall_ms = _ask(session, "back", {"calls": calls, **({"seed": seed} if seed is not None else {})}, timed=True)
        backs.walls[CANDIDATE].append(wall_ms)
        return answer
    times = {}
    for stage in STAGES:
        answer, times[stage] = _ask(session, "back", {"stage": stage, "calls": calls, "seed": seed}, timed=True)
        if answer is None:
            return None
    _record(backs, CANDIDATE, times)
    return answer


def _record(backs: Windows, name: str, times: dict[str, float]) -> None:
    """A replayed window's step times (ms) into `backs`: the run step where a plain window's whole time goes."""
    (backs.overheads if name == OVERHEAD else backs.walls[name]).append(times["run"])
    backs.fills[name].append(times["fill"])
    backs.keeps[name].append(times["keep"])


def _trusted_window(server: ReferenceServer, backs: Windows, name: str, calls: int, fresh: bool,
                    replayed: bool = False) -> None:
    """This process's clock (ms) around one back-to-back window in the trusted job, into `backs`: a
    baseline's calls (`replayed`: its graph, step by step), or (OVERHEAD) the window's work without
    them, each with its window's values."""
    if not replayed:
        request = {"name": name, "calls": calls, **({"seed": TimedChecks.seed()} if fresh else {})}
        _, wall_ms = server.timed("back", request)
        (backs.overheads if name == OVERHEAD else backs.walls[name]).append(wall_ms)
        return
    seed = TimedChecks.seed()
    times = {stage: server.timed("back", {"name": name, "calls": calls, "seed": seed, "stage": stage})[1]
             for stage in STAGES}
    _record(backs, name, times)


def _nvml_index(cuda_index: int | None) -> int:
    index = gpu.nvml_index_for_cuda_device(cuda_index) if cuda_index is not None else None
    return index if index is not None else 0
