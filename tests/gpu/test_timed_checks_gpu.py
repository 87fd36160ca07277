"""Fresh values for every timed call (the default) and checks of timed calls picked at random, on a real GPU.

The digests and the seeded refill must be the same on the device as on the CPU (the parent may
compare on either; the trusted job and the candidate's child must agree bit for bit); an honest
kernel is timed back to back with its windows' own work measured and taken off; an example's
default speedup stands on its events (within 3%), and five verifications agree on the clock
with a spread under 3%; memos keyed by address, `_version` or content are caught or read at
their honest twin's speed with the static rules off; a child that fixes up only the outputs
picked for checking contradicts its digests.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status
from kernelloop.tools.verify import kept_outputs
from kernelloop.tools.verify.fresh_values import Pool, Window
from kernelloop.tools.verify.kept_outputs import Kept, digest_bytes

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = FIXTURES / "problems"
MEMOS = sorted((FIXTURES / "cheats").glob("memo_*.py"))


def _load_corpus_helpers():
    path = Path(__file__).resolve().parents[1] / "verify" / "test_adversarial.py"
    spec = importlib.util.spec_from_file_location("adversarial_corpus_checks", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus_helpers()


def test_the_digest_kernel_on_the_gpu_is_the_torch_reference_bit_for_bit():
    words = torch.randint(-2**31, 2**31 - 1, (3, 100_003), dtype=torch.int32, device="cuda")
    for level in (0, 2):
        assert torch.equal(kept_outputs._level_kernel(words, level).cpu(), kept_outputs._level_torch(words.cpu(), level))


@pytest.mark.parametrize("nbytes", [5, 4096, 1 << 20, (64 << 20) + 3])
def test_the_digest_on_the_gpu_is_the_cpus_bit_for_bit(nbytes):
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, device="cuda")
    assert digest_bytes(raw) == digest_bytes(raw.cpu())


def test_fresh_values_on_the_gpu_are_remade_exactly_and_kept_copies_digest_alike():
    torch.manual_seed(0)
    sets = [[torch.randn(512, 384, device="cuda"), torch.randn(384, device="cuda").half()] for _ in range(3)]
    child, trusted = Pool([[t.clone() for t in s] for s in sets]), Pool(sets)
    buffers = child.buffers()
    version = buffers[0]._version
    request = child.request(seed=2024, calls=16)
    kept = Kept([[[512, 384], "float32"]], calls=16, device="cuda")
    for call in range(16):
        request.fill(buffers, call)
        kept.keep([buffers[0] * 2])
    assert buffers[0]._version > version
    remade = trusted.request(seed=2024, calls=16).values(15)
    assert all(torch.equal(a, b) for a, b in zip(buffers, remade))
    digests = kept.digests()
    assert len(set(digests)) == 16 and digest_bytes(kept.raw(7).cpu()) == digests[7]
    window = Window(child, 16, child.buffers())  # a back-to-back window's sets: what fill writes, each aligned
    window.prepare(child.request(seed=99, calls=16))
    again = trusted.request(seed=99, calls=16)
    for call in range(16):
        inputs = window.inputs(call)
        assert all(torch.equal(a, b) for a, b in zip(inputs, again.values(call)))
        assert all(t.data_ptr() % 256 == 0 for t in inputs if isinstance(t, torch.Tensor))


def test_a_forward_that_cannot_be_captured_leaves_the_stream_it_found():
    """torch.cuda.graph's exit leaves its capture stream current when the capture fails to end; a
    verification that went on there ran its torch ops on a side stream unordered with an extension's
    legacy-stream launches (every leaderboard CUDA solution read zeros on its timed calls)."""
    from kernelloop.tools.verify.window_graph import WindowGraph

    pool = Pool([[torch.randn(256, device="cuda")]])
    window = Window(pool, 4, pool.buffers())
    window.prepare(pool.request(seed=5, calls=4))
    before = torch.cuda.current_stream()
    assert window.fit >= 4 and WindowGraph.capture(lambda inputs: inputs[0] * 2, window, calls=4) is not None

    def syncs(inputs):  # a host read in the forward: not capturable
        return inputs[0] * float(inputs[0].sum().item() > 0)

    assert WindowGraph.capture(syncs, window, calls=4) is None
    assert torch.cuda.current_stream() == before


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("timed-checks"), fresh_timing=True) as verifier:
        yield verifier


@pytest.fixture(scope="module")
def unlinted(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("timed-checks-unlinted"),
                  static_checks=False, fresh_timing=True) as verifier:
        yield verifier


def verify(verifier, fixture: Path):
    header = corpus.parse_header(fixture)
    return verifier.verify(Candidate.from_file(fixture), Problem.from_file(header.problem))


def test_an_extension_launching_on_the_legacy_stream_is_timed_and_correct(timed):
    """The common shape of model-written CUDA (a `<<<...>>>` launch on the legacy stream): its windows
    can't be graphs, so they are timed as plain windows, and its timed calls are right."""
    verdict = verify(timed, FIXTURES / "honest" / "relu_load_inline_cuda.py")
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.speedup is not None and not verdict.timings["candidate"].replayed


@pytest.mark.parametrize("twin", ["matmul_triton.py", "softmax_triton.py", "attention_triton.py"])
def test_an_honest_kernel_is_timed_with_its_fresh_values_overhead_taken_off(timed, twin):
    verdict = verify(timed, FIXTURES / "honest" / twin)
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.speedup is not None and "timed calls picked at random" in verdict.feedback
    candidate = verdict.timings["candidate"]
    assert candidate.overhead_ms_per_call is not None and candidate.overhead_ms_per_call > 0
    assert candidate.host_ms_per_call is not None and candidate.counted_ms is not None
    assert candidate.replayed  # these three can be captured: their windows are graph replays
    # timed step by step: each side's fill, run and keep; an honest child's fill and keep are the trusted job's
    for side in ("candidate", "eager"):
        steps = verdict.timings[side].window_steps_ms
        assert set(steps) == {"fill", "run", "keep", "excess"} and min(steps["fill"], steps["run"], steps["keep"]) > 0, steps
        assert steps["excess"] == 0.0, f"{side}: {steps} ({verdict.speed_source})"


@pytest.mark.parametrize("stem", ["12_Scale_BiasAdd_Tanh_Clamp", "13_CumsumRows", "6_MatmulFP16", "attention/1_causal_mask"])
def test_an_honest_examples_default_speedup_stands_on_its_events_and_verifications_agree(timed, stem):
    folder = "attention_candidates" if stem.startswith("attention/") else "candidates"
    candidate = Candidate.from_file(ROOT / "examples" / folder / f"{stem.split('/')[-1]}.py")
    problem = Problem.from_file(ROOT / "kernelloop" / "evals" / "problems" / f"{stem}.py")
    speedups, clocks = [], set()
    for _ in range(5):
        verdict = timed.verify(candidate, problem)
        assert verdict.status is Status.correct and verdict.speedup is not None, verdict.reason
        cand, eager = verdict.timings["candidate"], verdict.timings["eager"]
        events = verdict.speedup * (cand.counted_ms / cand.median_ms) / (eager.counted_ms / eager.median_ms)
        assert abs(verdict.speedup / events - 1) < 0.03, \
            f"{stem}: {verdict.speedup:.3f}x, events {events:.3f}x ({verdict.speed_source})"
        speedups.append(verdict.speedup)
        clocks.add((cand.clock, eager.clock))
    assert max(speedups) / min(speedups) < 1.03, f"{stem}: {speedups}"
    assert len(clocks) == 1, clocks


@pytest.fixture(scope="module")
def twin_speeds() -> dict:
    return {}


@pytest.mark.parametrize("path", MEMOS, ids=lambda p: p.stem)
def test_a_memo_is_caught_or_timed_at_its_honest_twins_speed_without_the_static_rules(unlinted, twin_speeds, path):
    verdict = corpus.check_fixture(unlinted, path, unlinted=True)
    if "by_address" in path.stem:
        assert verdict.code in (Code.wrong_on_timed_call, Code.stale_on_fresh_inputs, Code.mismatch,
                                Code.nonfinite), verdict.reason
    else:
        assert verdict.status is Status.correct and verdict.speedup is not None
        corpus.assert_no_faster_than_honest(unlinted, path, verdict, twin_speeds)


def test_outputs_fixed_up_after_the_pick_are_rejected(unlinted):
    verdict = verify(unlinted, FIXTURES / "cheats" / "fix_up_picked_outputs.py")
    assert verdict.status is Status.rejected and verdict.code is Code.timing_contradicted, verdict.reason


def test_a_memo_that_starts_after_warm_up_is_caught_in_the_timed_calls(unlinted):
    verdict = verify(unlinted, FIXTURES / "cheats" / "stale_after_warmup.py")
    assert verdict.status is Status.incorrect and verdict.code is Code.wrong_on_timed_call, verdict.reason
