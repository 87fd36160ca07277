"""Fresh values for every timed call, kept outputs with their digests, and the checks of timed calls
picked at random (fresh_values.py, kept_outputs.py, timed_checks.py, the timing driver), on the CPU.

Nothing is timed on the CPU, but the mechanism runs here: the seeded refill and the trusted job's
remaking of the same values, the digests (bit for bit against a plain-Python model of them), and
the whole conversation through the sandbox in the Verifier's CPU rehearsal of the timing phase,
where memo and fix-up fixtures get their verdicts. tests/gpu/test_timed_checks_gpu.py runs it timed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status
from kernelloop.tools.verify import kept_outputs, speed
from kernelloop.tools.verify.fresh_values import WINDOW_ALIGN, Pool, Window, pool_indices
from kernelloop.tools.verify.kept_outputs import Kept, capacity, digest_bytes, split
from kernelloop.tools.verify.timed_checks import TimedChecks

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = FIXTURES / "problems"


def sets_of(*tensors_per_set: list) -> list[list]:
    return [list(values) for values in tensors_per_set]


# --------------------------------------------------------------------------- fresh values


def test_each_call_writes_new_values_into_the_same_buffers_and_bumps_their_version():
    torch.manual_seed(0)
    pool = Pool(sets_of(*[[torch.randn(37, 129), 3] for _ in range(3)]))
    buffers = pool.buffers()
    address, version = buffers[0].data_ptr(), buffers[0]._version
    request = pool.request(seed=1234, calls=4)
    seen = [buffers[0].clone()]
    for call in range(4):
        request.fill(buffers, call)
        assert buffers[0].data_ptr() == address and buffers[0]._version > version
        version = buffers[0]._version
        assert all(not torch.equal(buffers[0], before) for before in seen), "a call repeated values"
        seen.append(buffers[0].clone())
        # every element is what one of the trial sets holds there, about half from each of two
        from_set = torch.stack([buffers[0] == s[0] for s in pool.sets])
        assert from_set.any(dim=0).all()
        assert 0.3 < from_set.float().mean(dim=(1, 2)).max() < 0.8
    assert buffers[1] == 3  # a non-tensor value is left as it is


def test_the_trusted_job_remakes_any_call_from_the_seed_and_other_seeds_differ():
    torch.manual_seed(1)
    sets = sets_of(*[[torch.randn(8, 16), torch.randn(16)] for _ in range(2)])
    child, trusted = Pool([[t.clone() for t in s] for s in sets]), Pool(sets)
    buffers, request = child.buffers(), child.request(seed=99, calls=6)
    for call in (0, 3, 5):
        request.fill(buffers, call)
        remade = trusted.request(seed=99, calls=6).values(call)
        assert all(torch.equal(a, b) for a, b in zip(buffers, remade))
    assert not torch.equal(trusted.request(seed=98, calls=6).values(3)[0], trusted.request(seed=99, calls=6).values(3)[0])


def test_structure_the_problem_gave_its_inputs_is_kept():
    torch.manual_seed(2)
    n = 24

    def one_set() -> list:
        a = torch.randn(n, n)
        return [torch.tril(torch.randn(n, n)), torch.rand(n, n), (torch.rand(n) > 0.5).float(), a + a.T,
                torch.randint(0, 2, (n,)) * 2.0 - 1.0, torch.randint(0, n, (n,)), torch.rand(n) > 0.5]

    pool = Pool([one_set() for _ in range(3)])
    buffers, request = pool.buffers(), pool.request(seed=7, calls=3)
    ints, bools = buffers[5].clone(), buffers[6].clone()
    for call in range(3):
        request.fill(buffers, call)
        tril, positive, mask, symmetric, signs = buffers[:5]
        assert torch.equal(tril, torch.tril(tril))  # zeros above the diagonal stay zeros
        assert (positive >= 0).all() and (positive < 1).all()  # rand's domain
        assert set(mask.unique().tolist()) <= {0.0, 1.0} and set(signs.unique().tolist()) <= {-1.0, 1.0}
        assert torch.equal(symmetric, symmetric.T)  # the choice is mirrored
        assert torch.equal(buffers[5], ints) and torch.equal(buffers[6], bools)  # integers and bools are kept
    assert pool.symmetric == {0: False, 1: False, 2: False, 3: True, 4: False}


def test_one_set_or_no_float_input_gives_no_fresh_values_and_only_same_shapes_mix():
    single = Pool([[torch.randn(4)]])
    assert not single.fresh
    buffers = single.buffers()
    single.request(seed=1, calls=2).fill(buffers, 1)
    assert torch.equal(buffers[0], single.sets[0][0])
    assert not Pool([[torch.arange(4)], [torch.arange(4) + 1]]).fresh
    sets = [[torch.randn(4, 4)], [torch.randn(3, 3)], [torch.randn(4, 4)], [torch.randn(4, 4).double()]]
    assert pool_indices(sets, [0, 1, 2, 3]) == [0, 2]  # a variant shape or another dtype never mixes in


def test_an_input_whose_rows_each_have_a_location_of_their_own_is_mixed_within_its_rows():
    # 2_SoftmaxIrregular's inputs: an offset per row 50 apart across sets. Mixed element by element
    # across sets, a seventh of a row's exponentials went subnormal (eager's softmax slows on them).
    torch.manual_seed(4)
    offset_rows = [torch.randn(64, 97) * 4.0 + torch.randn(64, 1) * 50.0 for _ in range(3)]
    plain = [torch.randn(64, 97) for _ in range(3)]
    pool = Pool(sets_of(*[[o, p] for o, p in zip(offset_rows, plain)]))
    assert pool.within == {0: True, 1: False}
    request = pool.request(9, 6)
    window = Window(pool, 6, pool.buffers())
    window.prepare(request)
    for call in range(6):
        values, (a, b) = request.values(call), request.pairs[call]
        source = offset_rows[a]
        assert bool(((values[0] == source) | (values[0] == source.roll(1, dims=-1))).all())  # its own rows' values
        assert 0.3 < float((values[0] != source).float().mean()) < 0.7  # about half of them moved: new values
        assert (values[0].mean(1) - source.mean(1)).abs().max() < 2.0  # each row keeps its location
        assert bool(((values[1] == plain[a]) | (values[1] == plain[b])).all())  # the others mix across sets
        assert all(torch.equal(x, y) for x, y in zip(window.inputs(call), values))  # the window writes the same
    exps = torch.exp(values[0] - values[0].max(1, keepdim=True).values)
    assert float((exps < torch.finfo(torch.float32).tiny).float().mean()) < 0.001
    constant_rows = [torch.randn(64, 1).expand(64, 97).contiguous() for _ in range(3)]  # nothing to mix within
    assert Pool(sets_of(*[[c] for c in constant_rows])).within == {0: False}


def test_a_window_gives_each_call_a_set_of_its_own_with_the_values_the_trusted_job_remakes():
    torch.manual_seed(2)
    sym = [torch.randn(6, 6) for _ in range(3)]
    pool = Pool(sets_of(*[[torch.randn(37, 129), s + s.mT, torch.arange(4)] for s in sym]))
    window = Window(pool, 40, pool.buffers())
    request = pool.request(11, 25)
    assert window.fit == 40 and window.prepare(request) == 25
    seen = [window.inputs(call) for call in range(25)]
    for call, inputs in enumerate(seen):  # bit for bit what one call's fill writes, and what regen remakes
        assert all(torch.equal(a, b) for a, b in zip(inputs, request.values(call)))
    starts = {inputs[0].data_ptr() for inputs in seen}
    assert len(starts) == 25  # no two calls of a window read one address: no memo by address or content hits
    assert all((p - min(starts)) % WINDOW_ALIGN == 0 for p in starts)  # every set as aligned as an allocation
    assert all(torch.equal(inputs[1], inputs[1].mT) for inputs in seen)  # structure kept, as by fill
    version = seen[0][0]._version
    window.prepare(pool.request(12, 25))  # the next window rewrites the same sets: new values, new versions
    assert window.inputs(0)[0]._version > version and not torch.equal(window.inputs(0)[0], request.values(0)[0])


def test_a_window_of_more_calls_than_sets_refills_the_set_a_call_reuses():
    torch.manual_seed(3)
    pool = Pool(sets_of(*[[torch.randn(8, 16)] for _ in range(2)]))
    small = Window(pool, 4, pool.buffers())
    request = pool.request(5, 10)
    assert small.prepare(request) == 4
    for call in range(10):
        assert torch.equal(small.inputs(call)[0], request.values(call)[0])
    one_set = Pool(sets_of([torch.randn(8, 16)]))  # no fresh values: every set is the first one's, as regen makes it
    same = Window(one_set, 4, one_set.buffers())
    same.prepare(one_set.request(5, 10))
    assert all(torch.equal(same.inputs(call)[0], one_set.request(5, 10).values(call)[0]) for call in range(10))
    transposed = Pool(sets_of(*[[torch.randn(16, 8).mT] for _ in range(2)]))
    assert Window(transposed, 4, transposed.buffers()).fit == 0  # its layout kept: refilled call by call
    buffers = pool.buffers()
    too_big = Window(pool, 0, buffers)  # a set larger than the window's memory: the timing's own buffers
    assert too_big.fit == 0 and too_big.prepare(request) == 1
    for call in range(3):
        assert too_big.inputs(call)[0] is buffers[0] and torch.equal(buffers[0], request.values(call)[0])


def test_a_request_counts_its_calls():
    pool = Pool([[torch.randn(4)], [torch.randn(4)]])
    with pytest.raises(IndexError):
        pool.request(seed=1, calls=2).fill(pool.buffers(), 2)
    with pytest.raises(ValueError):
        pool.request(seed=1, calls=0)


# --------------------------------------------------------------------------- kept outputs and digests

_M64 = (1 << 64) - 1


def _mix(state: int) -> int:
    state ^= state >> 30
    state = (state * kept_outputs._MIX1) & _M64
    state ^= state >> 27
    state = (state * kept_outputs._MIX2) & _M64
    return state ^ (state >> 31)


def _level(words: list[int], level: int) -> list[int]:
    lanes = max(1, -(-len(words) // kept_outputs.LANE_WORDS))
    padded = words + [0] * (lanes * kept_outputs.LANE_WORDS - len(words))
    states = []
    for lane in range(lanes):
        state = ((lane + 1 + (level << 40)) * kept_outputs._IV) & _M64
        for j in range(kept_outputs.LANE_WORDS):
            state = _mix(state ^ padded[j * lanes + lane])
        states.append(state)
    return states


def plain_digest(data: bytes) -> str:
    """The digest as kept_outputs' docstring describes it, in plain Python integers."""
    padded = data + b"\0" * (-len(data) % 4)
    words = [int.from_bytes(padded[i:i + 4], "little") for i in range(0, len(padded), 4)]
    states, level = _level(words, 0), 1
    while len(states) > kept_outputs.FINAL_STATES:
        states = _level([half for s in states for half in (s & 0xFFFFFFFF, s >> 32)], level)
        level += 1
    return hashlib.blake2b(len(data).to_bytes(8, "little") + b"".join(s.to_bytes(8, "little") for s in states),
                           digest_size=16).hexdigest()


@pytest.mark.parametrize("nbytes", [1, 3, 4, 64, 1000, 4099, 9000])
def test_the_digest_is_the_documented_function_bit_for_bit(nbytes):
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=torch.Generator().manual_seed(nbytes))
    assert digest_bytes(raw) == plain_digest(bytes(raw.tolist()))


def test_the_gpus_digest_kernel_is_the_torch_reference_bit_for_bit_under_the_interpreter():
    """On a GPU each level of the digest is one Triton kernel; here it runs under Triton's CPU
    interpreter (set before triton is imported: a fresh interpreter) against the torch ops."""
    import subprocess
    import sys

    script = """
import torch
from kernelloop.tools.verify import kept_outputs as k
for rows, n in [(1, 1), (2, 17), (3, 1000), (2, 4099)]:
    words = torch.randint(-2**31, 2**31 - 1, (rows, n), dtype=torch.int32, generator=torch.Generator().manual_seed(n))
    for level in (0, 3):
        assert torch.equal(k._level_torch(words, level), k._level_kernel(words, level)), (rows, n, level)
print("same")
"""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "same", done.stderr[-2000:]


def test_kept_copies_their_digests_and_their_bytes_back_as_tensors():
    outputs = [torch.randn(5, 7), torch.arange(3, dtype=torch.int64), torch.tensor([True, False, True])]
    specs = [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in outputs]
    kept = Kept(specs, calls=3, device="cpu")
    kept.keep(outputs)
    changed = [outputs[0].clone(), outputs[1], outputs[2]]
    changed[0][4, 6] = torch.nextafter(changed[0][4, 6], torch.tensor(float("inf")))  # one ulp
    kept.keep(changed)
    outputs[0].zero_()  # what the candidate does with its tensors later changes no copy
    first, second = kept.digests()
    assert first != second and len(first) == 32
    assert digest_bytes(kept.raw(1)) == second
    back = split(kept.raw(1), changed)
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(back, changed))
    kept.reset()
    assert kept.digests() == []


def test_outputs_kept_at_once_after_a_window_are_those_kept_one_by_one():
    """`keep_all` (a window's held outputs, after its calls) keeps what `keep` after each call keeps,
    bit for bit, and refuses calls whose outputs share memory (a buffer returned each call)."""
    specs = [[[3, 5], "float32"], [[7], "float16"]]
    calls = [[torch.randn(3, 5), torch.randn(7).half()] for _ in range(4)]
    one_by_one, at_once = Kept(specs, 4, "cpu"), Kept(specs, 4, "cpu")
    for outputs in calls:
        one_by_one.keep(outputs)
    assert at_once.keep_all(calls) and at_once.count == 4
    assert at_once.digests() == one_by_one.digests()
    shared = torch.randn(3, 5)
    assert not Kept(specs, 4, "cpu").keep_all([[shared, torch.randn(7).half()], [shared, torch.randn(7).half()]])
    overhead = Kept(specs, 4, "cpu")
    assert overhead.keep_all([calls[0]] * 4, shared_ok=True) and overhead.digests()[0] == overhead.digests()[3]
    with pytest.raises(ValueError, match="not the size"):
        Kept(specs, 4, "cpu").keep_all([[torch.randn(2, 5), torch.randn(7).half()]])


def test_kept_refuses_outputs_unlike_the_trials_and_more_calls_than_it_has_room_for():
    kept = Kept([[[4], "float32"]], calls=1, device="cpu")
    with pytest.raises(ValueError, match="size"):
        kept.keep([torch.randn(5)])
    with pytest.raises(ValueError, match="outputs"):
        kept.keep([torch.randn(4), torch.randn(4)])
    kept.keep([torch.randn(4)])
    with pytest.raises(ValueError, match="more than 1"):
        kept.keep([torch.randn(4)])
    with pytest.raises(IndexError):
        kept.raw(1)


def test_how_many_calls_a_request_keeps():
    assert capacity(19_092) == kept_outputs.MAX_KEPT_CALLS  # a small output: the count caps it
    assert capacity(64 << 20) == kept_outputs.KEPT_BYTES // (64 << 20)
    assert capacity(6 << 30) == 1  # a huge output: one copy, whatever it costs


def test_digests_are_read_only_as_well_formed_claims():
    good = ["0123456789abcdef" * 2] * 3
    assert TimedChecks.digests({"digests": good}, 3) == good
    assert TimedChecks.digests(None, 3) is None
    assert TimedChecks.digests({"digests": good}, 4) is None  # one per call kept, no fewer
    assert TimedChecks.digests({"digests": good[:2] + ["x" * 32]}, 3) is None
    assert TimedChecks.digests({"digests": good[:2] + [5]}, 3) is None
    assert TimedChecks.block_probability(256, 1000) == 1.0
    assert 0 < TimedChecks.block_probability(2, 1000) < 0.05
    picked = TimedChecks.pick(10, 3)
    assert len(picked) == 3 and picked == sorted(set(picked)) and all(0 <= p < 10 for p in picked)


# --------------------------------------------------------------------------- speed from checked calls


def test_under_the_roofline_the_speed_counts_only_the_checked_rounds():
    import json

    measurement = json.loads((FIXTURES / "speed" / "honest.json").read_text())
    measurement.pop("recorded")
    samples = measurement["samples_ms"]
    measurement["roofline"]["floor_ms"] = 10 * max(samples["candidate"])
    checked = [3, 50, 700]
    for r in checked:  # the calls checked took ten times what the others claim
        samples["candidate"][r] *= 10
    judged = speed.judge_speed(measurement)
    assert judged.less_work_than_reference and judged.speedup == pytest.approx(1.0, abs=0.05)  # every round counts
    judged = speed.judge_speed({**measurement, "checked_rounds": checked})
    assert judged.speedup == pytest.approx(0.1, abs=0.02)
    assert any("counts only the 3 timed calls" in w for w in judged.warnings)


# --------------------------------------------------------------------------- the trusted job


def test_the_trusted_job_adds_a_donor_set_where_a_problem_gets_one_trial_set_and_remakes_picked_calls(tmp_path):
    from kernelloop.tools.verify.harness import read_sets
    from kernelloop.tools.verify.reference_job import ReferenceJob

    job = ReferenceJob({"device": "cpu", "problem_path": str(PROBLEMS / "matmul.py")})
    job.make({"seeds": [5], "variants": True, "fresh": True, "donor_seeds": [6], "inputs_path": str(tmp_path / "in.sets"),
              "outputs_path": str(tmp_path / "out.sets")})
    sets, extra = read_sets(str(tmp_path / "in.sets"))
    assert extra["donors"] == 1 and extra["pool"] == [0, 1] and len(sets) == 2
    assert job.pool is not None and job.pool.fresh and len(read_sets(str(tmp_path / "out.sets"))[0]) == 1
    job.regen({"seed": 11, "calls": 4, "indices": [2], "outputs_path": str(tmp_path / "regen.sets")})
    remade = read_sets(str(tmp_path / "regen.sets"))[0][0][0]
    a, b = Pool(sets).request(seed=11, calls=4).values(2)  # what the candidate's child gets for that call
    assert torch.allclose(remade, a @ b)

    three = ReferenceJob({"device": "cpu", "problem_path": str(PROBLEMS / "tril_matmul.py")})
    three.make({"seeds": [1, 2, 3], "variants": True, "fresh": True, "donor_seeds": [4], "inputs_path": str(tmp_path / "in3.sets"),
                "outputs_path": str(tmp_path / "out3.sets")})
    sets, extra = read_sets(str(tmp_path / "in3.sets"))
    # the variant (not triangular) sits before the last seed's set and is no donor of values; no donor is needed
    assert extra["donors"] == 0 and extra["pool"] == [0, 1, 3] and len(sets) == 4


# --------------------------------------------------------------------------- the conversation, rehearsed


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The Verifier on the CPU running the timing phase's conversation (host clocks, no speed)."""
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("rehearsal"), fresh_timing=True, rehearse_timing=True,
                  static_checks=False, compile_timeout_s=60.0, run_timeout_s=120.0) as verifier:
        yield verifier


def rehearse(verifier, fixture: str, problem: str):
    return verifier.verify(Candidate.from_file(FIXTURES / fixture), Problem.from_file(PROBLEMS / problem))


def test_an_honest_kernel_passes_the_checks_of_its_timed_calls(rehearsal):
    verdict = rehearse(rehearsal, "honest/matmul_triton.py", "matmul.py")
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.speedup is None and any("timing protocol ran on host clocks" in w for w in verdict.warnings)
    assert "timed calls picked at random" in verdict.feedback
    # where the timing's time went, part by part (the rehearsal makes no graphs, but asks for them)
    from kernelloop.tools.verify.timing_driver import TIMING_PARTS

    parts = {k.removeprefix("timing_"): v for k, v in verdict.cost_s.items() if k.startswith("timing_") and k != "timing_s"}
    assert set(parts) == set(TIMING_PARTS) and all(v > 0 for v in parts.values()), parts
    assert sum(parts.values()) <= verdict.cost_s["timing_s"] + verdict.cost_s.get("phase_rounds_s", 0.0) + 0.01


@pytest.mark.parametrize("fixture", ["cheats/stale_after_warmup.py", "cheats/memo_softmax_by_address.py"])
def test_a_memo_that_answers_timed_calls_stale_is_caught_by_a_checked_timed_call(rehearsal, fixture):
    problem = "relu.py" if "stale" in fixture else "softmax.py"
    verdict = rehearse(rehearsal, fixture, problem)
    assert verdict.status is Status.incorrect and verdict.code is Code.wrong_on_timed_call, verdict.reason


def test_a_memo_keyed_by_version_never_hits_on_fresh_values(rehearsal):
    """Keyed by (data_ptr, _version), it answers from its eleventh sighting of a key: every timed call
    runs on values written in place (a new version), so it computes every time and is right."""
    verdict = rehearse(rehearsal, "cheats/memo_attention_by_version.py", "attention.py")
    assert verdict.status is Status.correct, verdict.reason


def test_a_kernel_that_returns_one_buffer_each_call_has_each_output_kept_as_its_call_ends(rehearsal):
    """Back to back, outputs are held and kept after the calls; a forward that returns the same buffer
    every call would leave only its last output there, so its window is run again keeping each as its
    call ends, and its checked calls are right."""
    verdict = rehearse(rehearsal, "honest/relu_one_buffer_triton.py", "relu.py")
    assert verdict.status is Status.correct, verdict.reason


def test_outputs_fixed_up_after_the_pick_contradict_the_digests_sent_before_it(rehearsal):
    verdict = rehearse(rehearsal, "cheats/fix_up_picked_outputs.py", "relu.py")
    assert verdict.status is Status.rejected and verdict.code is Code.timing_contradicted, verdict.reason
