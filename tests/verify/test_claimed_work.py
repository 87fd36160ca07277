"""'Leaves the work to torch' counts ops, not only their names: on the KernelBench leaderboard a
ResNet18 whose 8 residual adds ran in its own CUDA kernel was rejected, because BatchNorm's
num_batches_tracked.add_ kept `add_` among the ops torch ran."""

import torch

from kernelloop.records import Code
from kernelloop.tools.verify._runtime import OpRecorder
from kernelloop.tools.verify.claims import claimed_counts
from kernelloop.tools.verify.verdicts import Work, claimed_work

BASE = {"device": "cpu", "own_kernels": ["add_kernel"], "library_ops": []}
REFERENCE = {"add_": 28, "convolution": 20, "relu_": 17}


def judged(candidate_counts, reference_counts=REFERENCE):
    return claimed_work(["add_kernel"], sorted(REFERENCE), set(candidate_counts), [], False, BASE,
                        reference_counts=reference_counts, candidate_counts=candidate_counts)


def test_fewer_calls_of_an_op_is_work_taken_over():
    assert judged({"add_": 20, "convolution": 20, "relu_": 17}) is None


def test_every_op_as_often_as_the_reference_leaves_the_work_to_torch():
    verdict = judged({"add_": 28, "convolution": 20, "relu_": 17, "mul": 1})
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch


def test_without_counts_the_names_decide_as_before():
    verdict = judged({"add_": 1, "convolution": 1, "relu_": 1}, reference_counts={})
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch


def test_counts_from_the_childs_process_are_checked():
    assert claimed_counts({"add_": 3, "mul": -1, "x": True, "y": "2", 5: 1}) == {"add_": 3}
    assert claimed_counts(["relu", "mul"]) == {"relu": 1, "mul": 1}
    assert claimed_counts("add_") == {}



def test_as_many_torch_calls_as_the_reference_under_other_names_leaves_the_work_to_torch():
    """issue 35: a copy kernel, then clamp_min where the reference runs relu (or a gate beside softmax)."""
    verdict = claimed_work(["copy_kernel"], ["relu"], {"clamp_min"}, [], False, BASE,
                           reference_counts={"relu": 1}, candidate_counts={"clamp_min": 1})
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch and "clamp_min" in verdict.reason
    assert judged({"convolution": 20, "relu_": 17, "mul": 28}) is not None  # 65 calls, as many as the reference
    assert judged({"convolution": 20, "relu_": 17, "mul": 20}) is None


def test_a_correct_verdict_says_what_bears_out_its_own_kernels_and_strict_claims_refuses_a_claim():
    from kernelloop.tools.verify import verdicts

    verdict = verdicts.correct(3, 0.0, 0.0, [], {}, None, {"device": "cpu", "own_kernels": ["k"], "library_ops": []})
    assert verdict.own_kernel_evidence == "in-process claim" and verdict.warnings[-1] == verdicts.UNVERIFIED_NOTE
    refused = verdicts.claims_unverified(verdict)
    assert refused.code is Code.claims_unverified and not refused.ok and refused.own_kernels == ["k"]


# -- work, not calls: elements, on the shapes each side ran -----------------------------------------
def judged_by_work(reference, candidate, own_used=0):
    work = Work(reference, candidate, own_used)
    counts = {op: 1 for op in reference if op != "copy"}
    return claimed_work(["kernel"], sorted(counts), {op for op in candidate if op != "copy"}, [], False, BASE,
                        reference_counts=counts, candidate_counts={op: 1 for op in candidate if op != "copy"},
                        work=work)


def test_a_last_step_over_a_handful_of_partials_is_the_kernels_work():
    # rows of 300 summed by the reference; torch.sum adds 5 partials a row in the candidate: one call each
    assert judged_by_work({"sum": 45 * 300}, {"sum": 45 * 5}) is None
    # a three-phase scan: torch scans 8 tile totals a row of 8000
    assert judged_by_work({"cumsum": 1024 * 8000}, {"cumsum": 1024 * 8, "sub": 2 * 1024 * 8}) is None


def test_a_full_reduction_left_to_torch_is_torchs_work():
    verdict = judged_by_work({"sum": 45 * 300}, {"sum": 45 * 300})
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch
    assert "sum 13,500 elements" in verdict.reason


def test_more_calls_doing_the_same_work_is_still_torchs():
    # the reduction split into two torch calls: more calls than the reference, the same elements and more
    verdict = judged_by_work({"sum": 45 * 300}, {"sum": 45 * 300 + 45 * 2})
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch


def test_a_copy_taken_over_is_one_its_own_kernels_output_holds():
    reference = {"relu": 4773, "copy": 4773}
    assert judged_by_work(reference, {"relu": 4773}, own_used=4773) is None  # its kernel made the transpose
    # a view where the reference copies, beside a kernel whose used output is one flag: the copy is not taken over
    verdict = judged_by_work(reference, {"relu": 4773, "mul": 4774}, own_used=1)
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch and "copy 4,773 elements" in verdict.reason
    # torch still makes the copy: the kernel's output is beside it
    verdict = judged_by_work(reference, {"relu": 4773, "copy": 4773}, own_used=4773)
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch


def test_the_recorder_follows_own_kernels_outputs_to_their_use():
    x = torch.randn(8, 16)
    used, unused = OpRecorder(), OpRecorder()
    with used:
        out = torch.empty(16, 8)
        used.own_launch([x, out])  # a kernel handed the input and a tensor the forward made
        y = out * 2
    used.consumed([y])
    assert used.own_used == 128 and used.compute_work() == {"mul": 128}
    with unused:
        scratch = torch.empty(16, 8)
        unused.own_launch([x, scratch])  # nothing reads it after, and it is not returned
        z = torch.relu(x).t().contiguous()
    unused.consumed([z])
    assert unused.own_used == 0 and unused.compute_work() == {"relu": 128, "copy": 128}


def test_an_extensions_result_counts_only_where_the_forward_uses_it():
    x = torch.randn(8, 16)
    recorder = OpRecorder()
    with recorder:
        recorder.own_result(x * 2)  # what a load_inline function returned, read by nothing after
        out = torch.relu(x)
    recorder.consumed([out])
    assert recorder.own_used == 0


def test_a_sliver_left_to_a_kernel_is_not_the_op_taken_over():
    # torch.relu on all but a row's last element, the kernel the last: one call each, most of the work torch's
    verdict = judged_by_work({"relu": 45 * 300}, {"relu": 45 * 299})
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch
    # half of it in its own kernel: taken over
    assert judged_by_work({"mm": 2 * 64 * 64}, {"mm": 64 * 64}) is None


def test_fewer_calls_on_fewer_elements_is_work_taken_over():
    # 8 of 28 residual adds its own: 20 calls on 20/28 of the elements
    work = Work({"add_": 28 * 1000, "convolution": 20 * 5000}, {"add_": 20 * 1000, "convolution": 20 * 5000})
    verdict = claimed_work(["add_kernel"], ["add_", "convolution"], {"add_", "convolution"}, [], False, BASE,
                           reference_counts={"add_": 28, "convolution": 20},
                           candidate_counts={"add_": 20, "convolution": 20}, work=work)
    assert verdict is None
