"""The parent drives the timing phase: baselines in the trusted job, the candidate in its own
child, block by block in turn, and its own clock around what the candidate does.

What comes from where:
  eager, torch.compile, problem baselines   event times from the trusted job (no candidate code)
  candidate, candidate_again                event times the candidate's process reports: claims
  host_ms_per_call (candidate, eager)       this process's clock around K back-to-back calls in
                                            each child, ended by a device-wide synchronize there
  parent_block_ms                           this process's clock around each timed block
  kernels, kernel_split, launches           the candidate's own profile: claims
  roofline, device_name                     the trusted job
  gpu                                       NVML, read here
speed.judge_speed turns these into the verdict's speed: the candidate's event times count only
where this process's clock bears them out.

Known gap, said where it is documented (docs/architecture.md): a candidate that detects the
timing loop and skips work there (computing only the outputs it is later asked for) lowers
both its event times and its back-to-back time; the rotating input sets it is timed on can be
recognised. Outputs of timed calls are not checked one by one.
"""

from __future__ import annotations

import math
import time

from kernelloop.results import Measurement
from kernelloop.sandbox.runner import JobSession
from kernelloop.tools.profile import gpu
from kernelloop.tools.profile.stopwatch import Stopwatch
from kernelloop.tools.verify.reference_server import ReferenceServer
from kernelloop.tools.verify.speed import SpeedJudgement, judge_speed

FIRST_BLOCK_ROUNDS = 10
MAX_BLOCK_ROUNDS = 200
MIN_ROUNDS, MIN_CANDIDATE_MS, MAX_ROUNDS = 50, 100.0, 1000
MAX_TIMED_S = 20.0  # wall-clock cap on the blocks, both processes together
BACK_TO_BACK_MS = 50.0  # about this much eager work per back-to-back check, in K calls
MIN_CALLS, MAX_CALLS = 5, 2000


def _ask(session: JobSession, kind: str, request: dict) -> tuple[dict | None, float]:
    """One request to the candidate's child and its answer, with this process's clock (ms) around it."""
    started = time.perf_counter()
    if not session.send({kind: request}):
        return None, 0.0
    message = session.receive()
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
                 laps: Stopwatch | None = None, timed: dict | None = None) -> SpeedJudgement | str:
    """Time the candidate against its baselines on the sets the trusted job made last; a string
    when the candidate's child broke off or answered nonsense (the caller turns that into a
    verdict). `cuda_index`: this process's index of the GPU being timed, for NVML (None: unknown).
    `skip`: torch.compile baselines not to compile (their times come from a cached record; the
    trusted job builds them anyway if it already has). `laps`: the verification's Stopwatch to mark "baselines",
    "timing" and "profile" on; `timed` gets the baselines timed ("timed") and their compile times."""
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
            if (done >= MIN_ROUNDS and (total >= MIN_CANDIDATE_MS or done >= MAX_ROUNDS)) or \
                    time.perf_counter() - started > MAX_TIMED_S:
                break
            per_round = max(total / done, 1e-3)
            wanted = max(MIN_ROUNDS - done, math.ceil((MIN_CANDIDATE_MS - total) / per_round))
            rounds = max(1, min(MAX_BLOCK_ROUNDS, MAX_ROUNDS - done, wanted))
        # K calls of about BACK_TO_BACK_MS each way, sized by eager's time and by what a candidate
        # call cost on this process's clock in the blocks (flush and hold included: an upper bound),
        # so a candidate slow on the host is not called thousands of times.
        eager_ms = sorted(samples["eager"])[len(samples["eager"]) // 2]
        wall_per_call_ms = sum(parent_block_ms) / (2 * len(samples["candidate"]))
        calls = max(MIN_CALLS, min(MAX_CALLS, math.ceil(BACK_TO_BACK_MS / max(eager_ms, wall_per_call_ms, 1e-3))))
        _, eager_wall_ms = server.timed("back", {"name": "eager", "calls": calls})
        answer, candidate_wall_ms = _ask(session, "back", {"calls": calls})
        if answer is None:
            return "the candidate's process stopped answering during the back-to-back check"
    if laps is not None:
        laps.lap("timing")
    profile, _ = _ask(session, "profile", {})
    if laps is not None:
        laps.lap("profile")
    claimed_profile = profile if isinstance(profile, dict) else {}
    kernels, split = claimed_profile.get("kernels"), claimed_profile.get("kernel_split")
    launches = claimed_profile.get("launches")
    return judge_speed(Measurement(
        samples_ms=samples,
        host_ms_per_call={"candidate": candidate_wall_ms / calls, "eager": eager_wall_ms / calls},
        back_to_back_calls=calls, parent_block_ms=parent_block_ms, claimed_block_ms=claimed_block_ms,
        compile_s=baseline_setup.get("compile_s") or {},
        kernels=[k for k in kernels if isinstance(k, dict)] if isinstance(kernels, list) else [],
        kernel_split=split if isinstance(split, dict) else {},
        launches=[item for item in launches if isinstance(item, dict)] if isinstance(launches, list) else [],
        roofline=baseline_setup.get("roofline") or {}, gpu=state, device_name=baseline_setup.get("device_name"),
        phase_s={"timing": time.perf_counter() - started}))


def _nvml_index(cuda_index: int | None) -> int:
    index = gpu.nvml_index_for_cuda_device(cuda_index) if cuda_index is not None else None
    return index if index is not None else 0
