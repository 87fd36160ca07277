"""Red team of the timing protocol: a candidate that reads faster than it is, from inside its own process.

Each test verifies one attack (tests/fixtures/cheats/redteam_timing_*.py, its docstring says what it
does, which line of the protocol it targets and what we expect on the current code) and its honest
twin (tests/fixtures/honest/, same problem, the same kernel without the trick) with ONE verifier: the
static rules off (the rules are a lint; the timing protocol must hold without them), fresh timing on.
The twin is verified before and after the cheat, and the faster of its two readings is the bar, so
drift over the test and one slow reading of the twin can't make an honest-equivalent cheat fail.

What a correct verifier must do with each: reject it (or find a timed call wrong), or judge it no
faster than its twin: its speedup over eager at most NOISE (5%) above the twin's. Speedups are
ratios to eager timed in the same rounds, so nothing here compares absolute times across runs.

A cheat that is judged correct and no faster passes only where its attack engaged (the fixture
prints one line to its stdout, or the verdict shows the window it needed): otherwise the test
fails saying so, as a pass would prove nothing. If the protocol changes so that an attack can no
longer engage (say, windows are no longer replayed), update that precondition with the change.

Work is bounded: three verifications a test (13 tests), each within the verifier's own timing limits.
Run: python -m pytest -q tests/gpu/test_redteam_timing_gpu.py (on an H200, perhaps 10-20 minutes).
Expected on the code these were written against (48489a7): every test FAILS but the device memo's (a control
that must pass), the forged-by-half timer's and the unflushed L2's (small gains, near NOISE); a failure's
message says how much faster the cheat read and which clock decided each side.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status, Verdict

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHEATS = FIXTURES / "cheats"
NOISE = 0.05  # two verifications of one kernel differ by less; every open attack here gains more (but see the docstrings)
CAUGHT = {Status.rejected, Status.incorrect}
# Catching for the wrong reason is no catch: the fixture broke (its import, its ModelNew) or crashed.
NOT_A_CATCH = {Code.import_failed, Code.no_modelnew, Code.modelnew_failed}


def _load_corpus_helpers():
    path = Path(__file__).resolve().parents[1] / "verify" / "test_adversarial.py"
    spec = importlib.util.spec_from_file_location("redteam_timing_corpus", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus_helpers()


@pytest.fixture(scope="module")
def unlinted(tmp_path_factory) -> Iterator:
    """Timed on the GPU with fresh values, the static rules off: only the timing protocol stands."""
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("redteam-timing"), time_it=True, fresh_timing=True,
                  static_checks=False, compile_timeout_s=60.0, run_timeout_s=180.0) as verifier:
        yield verifier


def _verify(verifier, path: Path, problem: Path) -> Verdict:
    return verifier.verify(Candidate.from_file(path), Problem.from_file(problem))


def _describe(verdict: Verdict) -> str:
    candidate = verdict.timings.get("candidate")
    window = "" if candidate is None else (
        f" [candidate: events {candidate.median_ms:.5f} ms, back to back {candidate.host_ms_per_call} ms, "
        f"clock {candidate.clock}, replayed {candidate.replayed}, {candidate.window_calls} calls a window]")
    return f"{verdict.status.value} {verdict.speedup}x: {verdict.speed_source}{window}; {verdict.warnings}"


def judge(verifier, stem: str, engaged: Callable[[Verdict], str | None], no_speed_ok: bool = False) -> None:
    """Verify the twin, the cheat, the twin again; the cheat is caught or no faster than the twin's best
    reading. `engaged(cheat_verdict)`: None where the attack engaged, else why it did not. `no_speed_ok`: a
    correct verdict with no speedup is an answer too (where the verifier may refuse to time the problem)."""
    cheat_path = CHEATS / f"{stem}.py"
    header = corpus.parse_header(cheat_path)
    assert header.honest is not None, f"{stem}: no honest twin in its header"
    twins = [_verify(verifier, header.honest, header.problem)]
    cheat = _verify(verifier, cheat_path, header.problem)
    twins.append(_verify(verifier, header.honest, header.problem))
    for twin in twins:
        assert twin.status is Status.correct and twin.speedup is not None, f"twin {header.honest.name}: {twin.reason}"
    if cheat.status in CAUGHT:
        assert cheat.code not in NOT_A_CATCH, f"{stem}: the fixture itself broke: {cheat.reason}"
        return  # caught: what a sound verifier may do
    if no_speed_ok and cheat.status is Status.correct and cheat.speedup is None:
        return  # the verifier reported no speed for it: nothing to reward
    assert cheat.status is Status.correct and cheat.speedup is not None, (
        f"{stem}: neither caught nor timed ({cheat.status.value}: {cheat.reason}); the fixture may be broken. "
        f"stdout: {cheat.stdout_tail[-500:]!r} stderr: {cheat.stderr_tail[-1500:]!r}")
    best = max(twin.speedup for twin in twins)
    assert cheat.speedup <= best * (1 + NOISE), (
        f"{stem} reads {cheat.speedup / best:.2f}x its honest twin's speed: the attack pays off.\n"
        f"  cheat: {_describe(cheat)}\n  twin:  {_describe(twins[0])}\n  twin again: {_describe(twins[1])}")
    why_not = engaged(cheat)
    assert why_not is None, (f"{stem} read no faster than its twin, but its attack did not engage ({why_not}): "
                             f"this proves nothing; {_describe(cheat)}")


def printed(line: str) -> Callable[[Verdict], str | None]:
    """Engaged where the fixture printed `line` (its marker) to its stdout."""
    def check(verdict: Verdict) -> str | None:
        return None if line in verdict.stdout_tail else f"no {line!r} on its stdout"

    return check


def both(*checks: Callable[[Verdict], str | None]) -> Callable[[Verdict], str | None]:
    def check(verdict: Verdict) -> str | None:
        return next((why for why in (c(verdict) for c in checks) if why is not None), None)

    return check


def candidate_window(predicate: Callable, what: str) -> Callable[[Verdict], str | None]:
    def check(verdict: Verdict) -> str | None:
        candidate = verdict.timings.get("candidate")
        return None if candidate is not None and predicate(candidate) else f"not {what}"

    return check


# --------------------------------------------------------------------------- the parent's clock around windows


def test_windows_shrunk_by_a_slow_host_in_the_blocks_still_bound_forged_events(unlinted):
    """A sleep after each timed call of a block (outside its events) makes timing_driver._window_calls size
    windows at MIN_CALLS and _repeats cut its replays by WINDOW_BUDGET_MS: a window's work falls under
    FIXED_ALLOWANCE_MS and the forged events (a tenth) stand. Expected on current main: FAILS (about 10x)."""
    judge(unlinted, "redteam_timing_few_calls_forged_events",
          candidate_window(lambda c: c.window_calls is not None and c.window_calls <= 64, "a window of at most 64 calls"))


def test_a_timer_forged_by_half_gains_no_more_than_the_noise(unlinted):
    """A timer that claims half is held to the parent's clock less PARENT_CLOCK_SLACK (3% of the events)
    and less FIXED_ALLOWANCE_MS over a window's calls (a tiny kernel's window is a few ms: 10-20% of it).
    Expected on current main: a gain of several % (borderline against NOISE; the protocol's stated margins)."""
    judge(unlinted, "redteam_timing_forge_under_allowance",
          candidate_window(lambda c: c.host_ms_per_call is not None, "timed back to back"))


def test_a_window_of_batched_calls_does_not_read_as_calls(unlinted):
    """The child answers a window with its calls batched (one bmm a replay, every call computed, right):
    the window measures a batch's throughput, not a call's time, and its forged events (a quarter) stand.
    Expected on current main: FAILS (several x)."""
    judge(unlinted, "redteam_timing_batched_window_forged_events",
          printed("redteam_timing_batched_window_forged_events:"))


def test_an_elementwise_answer_drawn_like_the_inputs_is_not_faster(unlinted):
    """GELU of where(mask, a, b) is where(mask, gelu(a), gelu(b)): the answers are drawn from the pool's
    answers by the harness's own generator, in _prepare (outside the events) and straight into the kept
    copies of the last replay (no forward in a window). No timer is forged. Expected on current main: FAILS."""
    judge(unlinted, "redteam_timing_lookup_elementwise",
          printed("redteam_timing_lookup_elementwise: a back-to-back window answered without its forward"))


def test_an_output_computed_when_read_is_not_faster(unlinted):
    """No hook, no forged timer: it reads torch.backends.cudnn.allow_tf32 to tell a timed call (where it would
    return a tensor subclass computed when first read, after the stop event) from a checked one. Both children
    now hold one precision for every call (_runtime.hold_declared_precision), so it never sees a timed call:
    it computes every call, and reads no faster than its twin. Its marker must not show (the oracle closed)."""
    def never_engaged(verdict: Verdict) -> str | None:
        marker = "redteam_timing_deferred_output_phase_oracle: a timed output computed when read"
        return None if marker not in verdict.stdout_tail else "the flag told it a timed call: the oracle is open"

    judge(unlinted, "redteam_timing_deferred_output_phase_oracle", never_engaged)


def test_work_moved_into_a_windows_fill_step_is_counted_as_its_calls(unlinted):
    """A forged timer (a tenth of every interval) and a harness hook: each replayed window's fill step computes
    every call's answer into buffers of its own, and the captured graph only copies them, so the run step the
    parent times as the calls is a copy. The fill step's excess over the trusted job's (Windows.excess_ms) is
    added to the window: the parent's clock outweighs the forged events, no faster than its twin."""
    judge(unlinted, "redteam_timing_work_in_fill_step",
          both(printed("redteam_timing_work_in_fill_step: a window's answers made in its fill step"),
               candidate_window(lambda c: c.replayed, "replayed as a graph (its capture may have failed: see stderr)")))


def test_claims_made_smaller_in_the_scrutiny_block_gain_nothing(unlinted):
    """Claims under the reference's roofline floor (over the output floor) in every block bring a scrutiny block
    (SCRUTINY_ROUNDS, known by its size), where it claims a hundredth of that: the speedup is the median event
    ratio over the checked rounds, most of them that block's, corrected by a clock factor taken over every
    round. Expected on current main: FAILS (about 100x, marked suspicious only)."""
    judge(unlinted, "redteam_timing_scrutiny_block_claims",
          printed("redteam_timing_scrutiny_block_claims: the scrutiny block claimed at a hundredth"))


# --------------------------------------------------------------------------- every side timed the same way


def test_a_child_that_denies_its_graph_gets_no_edge_over_replayed_baselines(unlinted):
    """timing_driver._capture takes the child's word (`bool(answer.get("graph"))`): it says "no graph", so
    every baseline is timed as plain Python windows (eager's host path counted), while its own windows
    replay the graph it has. Expected on current main: FAILS (by eager's host/event ratio)."""
    judge(unlinted, "redteam_timing_capture_lie_private_graph",
          printed("redteam_timing_capture_lie_private_graph: its window replays"))


def test_a_forward_that_batches_a_windows_views_gets_no_edge(unlinted):
    """No hook: its forward sees a window's sets are views of one allocation, answers the whole window on
    its first call and hands out views; the shared outputs refuse every side's graph, so eager is timed
    through Python while its calls cost a slice each. Expected on current main: FAILS."""
    judge(unlinted, "redteam_timing_batch_window_views",
          both(printed("redteam_timing_batch_window_views: a window's call answered from its first call's batch"),
               candidate_window(lambda c: not c.replayed, "plain (unreplayed) windows")))


def test_a_window_answered_at_its_last_call_gets_no_edge(unlinted):
    """review36: its forward hands calls 0..n-2 untouched tensors of their own and fills them all with one launch at
    the last call (and refuses its capture, so every side's window is plain). A plain window keeps each call's
    outputs as the call ends, so a checked call of a later window is wrong: caught."""
    judge(unlinted, "review36_window_batch_at_last_call",
          both(printed("review36_window_batch_at_last_call: a window's calls answered at its last call"),
               candidate_window(lambda c: not c.replayed, "plain (unreplayed) windows")))


# --------------------------------------------------------------------------- the baselines' time, the events' conditions


def test_a_gpu_hog_while_the_baselines_run_gains_nothing(unlinted):
    """A thread of the candidate's keeps the GPU busy whenever its process waits for a request, which is
    when the trusted job times eager, compile and the overhead windows on the same GPU; its own requests
    run on a drained device. Expected on current main: FAILS (eager's events and windows inflated)."""
    judge(unlinted, "redteam_timing_gpu_hog_between_requests",
          printed("redteam_timing_gpu_hog_between_requests: the hog runs"))


def test_a_timer_without_the_l2_flush_gains_no_more_than_the_noise(unlinted):
    """Its timer drops the 256 MiB L2 flush before each timed call: warm events against eager's cold ones,
    and the windows (which never flush) can't contradict warm events. Expected on current main: a gain of
    the kernel's cold/warm ratio, small on 19 kB inputs (may or may not clear NOISE)."""
    judge(unlinted, "redteam_timing_warm_l2_events", printed("redteam_timing_warm_l2_events: its timer flushes nothing"))


def test_a_memo_on_a_problem_without_floating_inputs_is_not_faster(unlinted):
    """No hook, nothing the lint refuses: fresh values are drawn for floating inputs alone, so an embedding
    lookup's timed calls all rerun the indices the candidate has seen, and a memo by address (used only in
    timed calls: the flag of checked calls tells them apart) answers every one, rightly; speed.judge_speed
    only warned. Since then a problem whose timed calls rerun seen values gets no speedup at all: neither the
    cheat nor its honest twin has one to reward."""
    header = corpus.parse_header(CHEATS / "redteam_timing_memo_integer_inputs.py")
    for path in (CHEATS / "redteam_timing_memo_integer_inputs.py", header.honest):
        verdict = _verify(unlinted, path, header.problem)
        assert verdict.status in CAUGHT or (verdict.status is Status.correct and verdict.speedup is None), \
            f"{path.name}: {verdict.status.value} {verdict.speedup} ({verdict.reason})"


# --------------------------------------------------------------------------- a control: what fresh values promise


def test_a_device_side_memo_never_hits_in_replayed_windows(unlinted):
    """A memo on the device (a probe kernel hashes sampled inputs; the GEMM copies a remembered output on a
    hit), captured in the window's graph where no host code runs. Every replay and block call has values of
    its own, so it never hits and pays for its probe. Expected on current main: PASSES (the guard for it)."""
    judge(unlinted, "redteam_timing_device_memo_matmul", candidate_window(lambda c: c.replayed, "replayed as a graph"))
