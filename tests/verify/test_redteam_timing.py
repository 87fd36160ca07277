"""The timing red team on the CPU: the mechanisms the attacks of tests/gpu/test_redteam_timing_gpu.py
stand on, exercised where no GPU is needed (Triton's interpreter, the fresh-values code, the
timing driver's arithmetic with fakes for both processes, the conversation rehearsed on host clocks).

Two kinds of test:
  * mechanism tests (plain): what an attack relies on, shown to hold, so that its GPU test means
    something (a control that never could have hit proves nothing). These describe the code as it is.
  * open holes (strict xfail, the corpus's convention for attacks found open: tests/verify/
    test_adversarial.py `_OPEN`): what a correct verifier must do, failing on the current code. A fix
    shows as XPASS, which fails the run until its mark goes.
Each is bounded in work (a few calls, a few windows), never in wall-clock time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status
from kernelloop.tools.verify import timing_driver
from kernelloop.tools.verify.fresh_values import Pool, Window
from kernelloop.tools.verify.speed import counted_ms

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CHEATS = FIXTURES / "cheats"
PROBLEMS = FIXTURES / "problems"


# --------------------------------------------------------------------------- mechanisms


DEVICE_MEMO_SCRIPT = """
import importlib.util
import torch
from kernelloop.tools.verify.fresh_values import Pool, Window

spec = importlib.util.spec_from_file_location("device_memo", {path!r})
memo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(memo)
torch.manual_seed(0)
sets = [[torch.randn(96, 80), torch.randn(80, 112)] for _ in range(3)]
model = memo.ModelNew()

def found():
    return int(model.memo[2][0])  # the probe's verdict for the last call: a slot that hit, or -1

A, B = sets[0]
first = model(A, B)
assert found() == -1 and torch.allclose(first, A @ B, atol=1e-4), "a first call must miss and compute"
again = model(A.clone(), B.clone())  # the same values at new addresses
assert found() >= 0 and torch.equal(again, first), "values seen before must hit: the memo works"

pool = Pool(sets)
window = Window(pool, 4, pool.buffers())
for seed in range(3):  # three windows on the same sets (harness.back), each with its request's fresh values
    window.prepare(pool.request(2024 + seed, 4))
    for call in range(4):
        inputs = window.inputs(call)
        out = model(*inputs)
        assert found() == -1, f"window {{seed}} call {{call}}: a fresh value hit the memo"
        assert torch.allclose(out, inputs[0] @ inputs[1], atol=1e-4)
print("memo ok")
"""


def test_the_device_memo_hits_on_values_it_has_seen_and_misses_on_every_fresh_one():
    """redteam_timing_device_memo_matmul.py under Triton's interpreter: its probe and GEMM kernels skip the
    work on values seen before (so its GPU test, which expects it no faster than its twin, is a real guard),
    and windows on the same sets, each with its own fresh values, never hit."""
    script = DEVICE_MEMO_SCRIPT.format(path=str(CHEATS / "redteam_timing_device_memo_matmul.py"))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "memo ok" in done.stdout, done.stderr[-3000:]


def test_an_elementwise_ops_answer_on_fresh_values_is_the_pools_answers_drawn_with_the_same_seed():
    """What redteam_timing_lookup_elementwise.py stands on: every fresh value is one of two trial sets' values
    at its position, so an elementwise op's answer is the same draw from the sets' answers, bit for bit,
    computed with no call of the op on the fresh values (one call and the window's rows alike)."""
    torch.manual_seed(0)
    sets = [[torch.randn(33, 257)] for _ in range(3)]
    gelu = lambda x: torch.nn.functional.gelu(x, approximate="tanh")  # noqa: E731
    pool = Pool(sets)
    answers = Pool([[gelu(s[0])] for s in sets])
    answers.symmetric, answers.within = dict(pool.symmetric), dict(pool.within)
    request, lookup = pool.request(77, 12), answers.request(77, 12)
    for call in range(12):
        assert torch.equal(gelu(request.values(call)[0]), lookup.values(call)[0]), call
    rows = torch.empty(4, 33 * 257)
    lookup.fill_rows({0: rows}, 4)  # a window's 4 calls, straight into "kept" rows
    for k in range(4):
        assert torch.equal(rows[k].view(33, 257), gelu(request.values(k)[0])), k


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The Verifier on the CPU running the timing phase's conversation (host clocks, no speed), rules off."""
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("redteam-rehearsal"), fresh_timing=True,
                  rehearse_timing=True, static_checks=False, compile_timeout_s=60.0, run_timeout_s=120.0) as verifier:
        yield verifier


@pytest.mark.parametrize(("stem", "problem", "marker"), [
    ("redteam_timing_lookup_elementwise", "gelu_scaled.py", "a back-to-back window answered without its forward"),
    ("redteam_timing_memo_integer_inputs", "embedding_gather.py", "a timed call answered from the memo"),
])
def test_timed_outputs_made_outside_the_timed_work_pass_every_check_of_the_timed_calls(rehearsal, stem, problem, marker):
    """Two attacks' conversations on the CPU, each printing one line when its trick runs. The lookup's child
    answers each back-to-back window by writing the answers into its kept copies (no forward call) and its
    blocks' answers before each timed region. The integer memo (no hook, nothing the lint refuses) answers every timed call of
    a problem without floating inputs from a memo by address, rightly: none of their values is fresh. Every
    digest and every checked call is right, so all are correct. On a GPU the same calls read as little or no
    work (tests/gpu/test_redteam_timing_gpu.py): the checks bind the outputs, never how or when they were made."""
    verdict = rehearsal.verify(Candidate.from_file(CHEATS / f"{stem}.py"), Problem.from_file(PROBLEMS / problem))
    assert verdict.status is Status.correct, verdict.reason
    assert "timed calls picked at random" in verdict.feedback
    assert marker in verdict.stdout_tail, verdict.stdout_tail[-1000:]


def test_a_window_batched_from_its_first_call_answers_later_calls_wrong(rehearsal):
    """redteam_timing_batch_window_views.py computes every set of a plain window on its first call (through the
    window's one allocation) and answers the later calls with views of that batch. Each call's values are now
    written just before it, so the batch is of the values the sets held before: a timed call is wrong."""
    verdict = rehearsal.verify(Candidate.from_file(CHEATS / "redteam_timing_batch_window_views.py"),
                               Problem.from_file(PROBLEMS / "relu_twice.py"))
    assert verdict.status is Status.incorrect and verdict.code.value == "wrong_on_timed_call", verdict.reason
    assert "a window's call answered from its first call's batch" in verdict.stdout_tail


def test_a_window_answered_at_its_last_call_is_wrong_on_a_timed_call(rehearsal):
    """review36_window_batch_at_last_call.py learns a window's length from the first window, then hands each later
    window's calls tensors of their own, untouched, and fills them all with one launch at the last call. Writing
    each call's values just before it stops a batch at the first call, not one at the last: a plain window keeps
    each call's outputs as the call ends, so a deferred output is wrong on a checked timed call."""
    verdict = rehearsal.verify(Candidate.from_file(CHEATS / "review36_window_batch_at_last_call.py"),
                               Problem.from_file(PROBLEMS / "relu.py"))
    assert "a window's calls answered at its last call" in verdict.stdout_tail or verdict.status is not Status.correct
    assert verdict.status is Status.incorrect and verdict.code.value == "wrong_on_timed_call", verdict.reason


# --------------------------------------------------------------------------- open holes (strict xfail)


class _Child:
    """The candidate's child as timing_driver._windows sees it: each window answered with a digest a call."""

    def __init__(self):
        self.request: dict = {}

    def send(self, message: dict) -> bool:
        self.request = message["back"]
        return True

    def receive(self, timed: bool = False) -> dict:
        return {"back": {"digests": ["0" * 32] * int(self.request["calls"])}}


class _Trusted:
    def timed(self, kind: str, request: dict) -> tuple[dict, float]:
        return {}, 5.0


class _Checks:
    """TimedChecks as _windows calls it: every (slot, call of the request) picked, each one passing."""

    def __init__(self):
        self.picked: list[tuple[int, int, int]] = []  # (call of the request, calls in the request, calls a replay)

    def check(self, seed: int, calls: int, picked: list[tuple[int, int]], digests: list[str]):
        self.picked += [(index, calls, len(digests)) for _, index in picked]
        return None


def test_every_call_a_window_counts_is_one_it_commits_to_and_any_can_be_picked():
    """What redteam_timing_skip_unchecked_replays.py broke (windows that replayed their graph, of which only the
    last replay's calls could be checked): a window's time is divided by the calls whose outputs it sends
    digests of, and the pick of a check ranges over all of them. 40 windows of 10 calls: every pick is one of
    the window's own calls, and the picks reach every one of them."""
    checks = _Checks()
    for _ in range(40):
        backs = timing_driver._windows(_Child(), _Trusted(), ["eager"], 10, {"eager": 1.0, "candidate": 1.0}, checks)
        assert isinstance(backs, timing_driver.Windows) and backs.calls == 10
    assert all(calls == 10 == digests for _, calls, digests in checks.picked)
    assert {index for index, _, _ in checks.picked} == set(range(10))


@pytest.mark.xfail(strict=True, reason="open: a candidate that inflates its host time in the blocks (outside its "
                   "events) shrinks its windows to MIN_CALLS, whose work then fits under "
                   "FIXED_ALLOWANCE_MS: tests/fixtures/cheats/redteam_timing_few_calls_forged_events.py")
def test_a_slow_host_in_the_blocks_cannot_push_a_windows_work_under_the_allowance():
    """The driver's own arithmetic (_window_calls, Windows.per_call, counted_ms) for a kernel whose
    calls really take 3 us, whose events claim a tenth of that, and which sleeps 5 ms after every timed call
    of a block. The child's window costs the trusted overhead window plus 0.7 ms of the child's own (what the
    H200 measured, timing_driver.FIXED_ALLOWANCE_MS's comment) plus its calls' real work. A correct verifier
    counts at least 90% of the real 3 us a call: the parent's clock must bound a forged timer."""
    real_ms, claimed_ms, eager_ms, rounds = 0.003, 0.0003, 0.003, 50
    samples = {"eager": [eager_ms] * rounds, "candidate": [claimed_ms] * rounds, "candidate_again": [claimed_ms] * rounds}
    parent_block_ms = [rounds * 2 * (5.0 + 0.1)]  # each of a round's two calls: 5 ms slept, 0.1 ms of flush and hold
    calls = timing_driver._window_calls(samples, parent_block_ms, 2000)
    overhead_ms, child_fixed_ms = 0.4, 0.7
    walls = {name: [overhead_ms + (child_fixed_ms if name == "candidate" else 0.0) + calls * real_ms] * 3
             for name in ("eager", "candidate")}
    backs = timing_driver.Windows(calls, walls, [overhead_ms] * 3)
    counted, clock = counted_ms(claimed_ms, backs.per_call()["candidate"])
    assert counted >= 0.9 * real_ms, (f"{calls} calls a window: counted {counted:.5f} ms by {clock} for a call of "
                                      f"{real_ms} ms")


def test_a_later_calls_values_do_not_exist_before_the_windows_call_ahead_of_it():
    """The parent's clock around a window bounds a call's time only if the calls can't be merged: a forward
    that could read call k's values before call 0 has run could batch the window. In a plain window (Python
    between calls) each call's values are written just before the call, after the calls ahead of it were
    issued on the same stream; a replayed graph runs no candidate code between its calls and is written at once."""
    torch.manual_seed(0)
    pool = Pool([[torch.randn(37, 129)] for _ in range(3)])
    window = Window(pool, 8, pool.buffers())
    window.prepare(pool.request(30, 8))  # a window before: every set holds its values
    request = pool.request(31, 8)
    window.prepare(request, each_call=True)  # what harness.back does when a plain window's request arrives
    for k in range(8):
        ahead = [j for j in range(k, 8) if torch.equal(window.sets[j][0], request.values(j)[0])]
        assert not ahead, f"before call {k}: calls {ahead}'s values are already written"
        assert torch.equal(window.inputs(k)[0], request.values(k)[0])
    window.prepare(request)  # a replayed window's: all at once
    assert all(torch.equal(window.sets[j][0], request.values(j)[0]) for j in range(8))


_RELU_TRITON = (FIXTURES / "honest" / "relu_triton.py").read_text()
_SEEN_SETTINGS = """
SEEN = []


def settings():
    return (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision)


class Judged(ModelNew):
    def forward(self, x):
        SEEN.append(settings())
        if SEEN[-1] != SEEN[0]:
            raise RuntimeError(f"call {len(SEEN)} saw {SEEN[-1]}, the first call {SEEN[0]}")
        return super().forward(x)
"""


def _probe(tmp_path: Path, name: str, body: str) -> Candidate:
    """The honest Triton ReLU under another ModelNew whose forward does `body` first."""
    path = tmp_path / f"{name}.py"
    path.write_text(_RELU_TRITON + body + "\n\nModelNew = Judged\n")
    return Candidate.from_file(path)


def test_a_forward_cannot_tell_a_checked_call_from_a_timed_one_by_torchs_settings(rehearsal, tmp_path):
    """Whatever a checked call guards (the type of its outputs, writes to inputs, aliasing, scaled and variant
    sets) a timed call doesn't: a forward that can tell them apart does the right thing only where it is
    checked (redteam_timing_deferred_output_phase_oracle read torch.backends.cudnn.allow_tf32). A forward that
    raises where torch's precision settings differ from its first call's is called in the trials, the decoy
    runs, the timing rounds, the windows and the fresh check: it sees one setting throughout."""
    verdict = rehearsal.verify(_probe(tmp_path, "settings_probe", _SEEN_SETTINGS), Problem.from_file(PROBLEMS / "relu.py"))
    assert verdict.status is Status.correct, verdict.reason
    assert "timed calls picked at random" in verdict.feedback
    oracle = rehearsal.verify(Candidate.from_file(CHEATS / "redteam_timing_deferred_output_phase_oracle.py"),
                              Problem.from_file(PROBLEMS / "matmul.py"))
    assert oracle.status is Status.correct, oracle.reason
    assert "a timed output computed when read" not in oracle.stdout_tail, "the flag told it a timed call"


def test_a_forward_that_switches_tf32_on_in_a_timed_call_is_ended(rehearsal, tmp_path):
    """Past the trials (their 4 checked calls and 2 decoy runs, all at the declared precision), the forward
    turns cuDNN's TF32 on: torch's ops below the precision that was judged, where only the timed checks
    compare. The child reads the settings after each timing request and ends with changes_precision."""
    body = """

CALLS = []


class Judged(ModelNew):
    def forward(self, x):
        CALLS.append(1)
        if len(CALLS) == 12:
            torch.backends.cudnn.allow_tf32 = True
        return super().forward(x)
"""
    verdict = rehearsal.verify(_probe(tmp_path, "switch_probe", body), Problem.from_file(PROBLEMS / "relu.py"))
    assert verdict.code.value == "changes_precision", verdict.reason
    assert "timing" in verdict.reason or "block" in verdict.reason or "time" in verdict.reason, verdict.reason


def test_a_problem_whose_timed_calls_rerun_seen_values_gets_no_speedup():
    """An embedding lookup's only input is its indices: its timed calls rerun the trial sets' indices (an index
    changes the work, so none is drawn afresh), and a memo by address (redteam_timing_memo_integer_inputs.py)
    answers them all. Its times are kept, but no speedup: nothing to reward."""
    from kernelloop.records import Measurement
    from kernelloop.tools.verify.speed import judge_speed

    sets = [[torch.randint(0, 1000, (37, 29), generator=torch.Generator().manual_seed(seed))] for seed in range(3)]
    assert not Pool(sets).fresh
    rounds = 60
    judged = judge_speed(Measurement(samples_ms={"eager": [0.01] * rounds, "candidate": [0.001] * rounds,
                                                 "candidate_again": [0.001] * rounds}, fresh_values=False))
    assert judged.speedup is None and not judged.speedups and not judged.win
    assert any("no speedup" in w for w in judged.warnings)


def test_claims_that_differ_in_the_checked_rounds_gain_nothing():
    """speed.judge_speed on what the parent measures of redteam_timing_scrutiny_block_claims.py: a ReLU whose
    calls really take 2.5 us (the parent's windows say so), eager's 3 us; the candidate claims 1.5x the output
    floor in every block (under the reference's floor: a scrutiny block follows) and a hundredth of that in the
    scrutiny block's 8 rounds. A correct verifier reads it no faster than the same kernel with honest claims."""
    from kernelloop.records import Measurement
    from kernelloop.tools.verify.speed import judge_speed

    real_ms, eager_ms, output_floor_ms = 0.0025, 0.003, 4e-6
    rounds, scrutiny = 410, 8
    roofline = {"output_floor_ms": output_floor_ms, "floor_ms": 2 * output_floor_ms, "output_bytes": 19092}
    picked = [5, 110, 220, 330]  # a round picked at random in each of the blocks (10, 200, 200 rounds)
    checked = picked + list(range(rounds, rounds + scrutiny))

    def measured(claims: list[float]) -> Measurement:
        n = len(claims)
        return Measurement(samples_ms={"eager": [eager_ms] * n, "candidate": claims, "candidate_again": list(claims)},
                           host_ms_per_call={"eager": eager_ms, "candidate": real_ms}, checked_rounds=checked,
                           roofline=roofline, parent_block_ms=[1000.0], claimed_block_ms=[sum(claims)])

    honest = judge_speed(measured([real_ms] * (rounds + scrutiny)))
    forged = judge_speed(measured([1.5 * output_floor_ms] * rounds + [0.015 * output_floor_ms] * scrutiny))
    assert honest.speedup is not None and honest.rejection is None
    assert forged.rejection is not None or forged.speedup <= 1.05 * honest.speedup, (
        f"forged claims read {forged.speedup:.1f}x against the honest claims' {honest.speedup:.2f}x "
        f"({forged.speed_source}; {forged.warnings})")
