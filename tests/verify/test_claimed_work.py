"""'Leaves the work to torch' counts ops, not only their names: on the KernelBench leaderboard a
ResNet18 whose 8 residual adds ran in its own CUDA kernel was rejected, because BatchNorm's
num_batches_tracked.add_ kept `add_` among the ops torch ran."""

from kernelloop.records import Code
from kernelloop.tools.verify.claims import claimed_counts
from kernelloop.tools.verify.verdicts import claimed_work

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
