"""Problems with BACKWARD = True: the backward pass is judged too. Both sides run forward, then
backward with the same upstream gradient (drawn in the trusted job from the verification's secret
seed, handed to the child with the inputs); the child saves the gradients of the floating inputs
and of the parameters (matched by name), the parent compares them with the reference's, which never
leave it. A candidate with a wrong or missing gradient is incorrect, its reason naming the gradient.
The timed calls still run the forward alone, under no_grad."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from kernelloop.errors import ProblemError
from kernelloop.problem import Candidate, Problem
from kernelloop.problem_meta import checked_gradient_names, source_backward
from kernelloop.records import Code, Status
from kernelloop.tools.verify._runtime import OpRecorder
from kernelloop.tools.verify.compare import compare_gradients
from kernelloop.tools.verify.harness import Backward, run_one
from kernelloop.tools.verify.op_records import SetOps
from kernelloop.tools.verify.verification import backward_op_claims, backward_op_rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = FIXTURES / "problems"
SILU = PROBLEMS / "silu_backward.py"
AFFINE = PROBLEMS / "affine_backward.py"
HONEST_SILU = FIXTURES / "honest" / "silu_backward_triton.py"
HONEST_AFFINE = FIXTURES / "honest" / "affine_backward_triton.py"
WRONG_GRADIENT = FIXTURES / "cheats" / "silu_wrong_gradient.py"
FORWARD_ONLY = FIXTURES / "cheats" / "silu_no_gradient_forward_only.py"
RENAMED = FIXTURES / "cheats" / "affine_backward_renamed_parameters.py"
TORCH_BACKWARD = FIXTURES / "cheats" / "review38_backward_left_to_autograd.py"


# --------------------------------------------------------------------------- the problem format
def test_backward_must_be_a_bool():
    source = SILU.read_text().replace("BACKWARD = True", "BACKWARD = 'yes'")
    with pytest.raises(ProblemError, match="BACKWARD must be True or False"):
        Problem.from_source(source)


def test_backward_is_read_off_a_problem_that_is_only_parsed():
    assert source_backward(SILU.read_text())
    assert not source_backward((PROBLEMS / "relu.py").read_text())
    assert not source_backward(SILU.read_text().replace("BACKWARD = True", "BACKWARD = False"))


def test_the_trusted_jobs_gradient_names_are_checked_again():
    assert checked_gradient_names(["input 0", "affine.weight"], "p") == ["input 0", "affine.weight"]
    for bad in (["input 0", "input 0"], ["x\ny"], "input 0", [1]):
        with pytest.raises(ProblemError, match="malformed gradient names"):
            checked_gradient_names(bad, "p")


# --------------------------------------------------------------------------- the parent's comparison
def test_a_missing_gradient_passes_only_where_the_reference_has_zeros():
    ref = [torch.ones(3), torch.zeros(2)]
    ok = compare_gradients([torch.ones(3), None], ref, ["input 0", "w"])
    assert ok.ok
    none = compare_gradients([None, None], ref, ["input 0", "w"])
    assert not none.ok and none.code is Code.no_gradient and "gradient of input 0" in none.reason
    wrong = compare_gradients([torch.ones(3), torch.ones(2)], ref, ["input 0", "w"])
    assert not wrong.ok and wrong.code is Code.wrong_gradient and "gradient of w" in wrong.reason and wrong.output == 1
    missing = compare_gradients([torch.ones(3), None], ref, ["input 0", "w"], missing={"w"})
    assert missing.code is Code.no_gradient and "gradient of w: ModelNew has no parameter of that name" in missing.reason
    nan = compare_gradients([torch.tensor([1.0, math.nan, 1.0]), None], ref, ["input 0", "w"])
    assert nan.code is Code.wrong_gradient and nan.reason.startswith("backward: nan: gradient of input 0")


# --------------------------------------------------------------------------- the child's checked backward
class _Twice(torch.autograd.Function):
    """x * 2 whose backward misbehaves as told."""

    mode = ""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if _Twice.mode == "writes_input":
            x.mul_(0)
        if _Twice.mode == "alias":  # hands the input's own memory back as its gradient
            x.grad = x.detach()
            return None
        if _Twice.mode == "precision":
            torch.set_float32_matmul_precision("high")
        return grad * 2


class _TwiceModel(nn.Module):
    def forward(self, x):
        return _Twice.apply(x)


@pytest.mark.parametrize(("mode", "code", "words"), [
    ("writes_input", Code.writes_to_inputs, "input 0 changed during backward"),
    ("alias", Code.aliases_input, "the gradient of input 0 shares memory with an input"),
    ("precision", Code.changes_precision, "its backward switched"),
])
def test_the_checks_of_a_checked_call_hold_for_its_backward(mode, code, words):
    _Twice.mode = mode
    try:
        with torch.no_grad():  # as the child's session runs
            _, _, found = run_one(_TwiceModel(), [torch.randn(4, 5)], "cpu", [[[4, 5], "float32"]],
                                  backward=Backward([torch.randn(4, 5)], ["input 0"]))
    finally:
        _Twice.mode = ""
        torch.set_float32_matmul_precision("highest")
    assert found is not None and found[0] is code and words in found[1], found


def test_a_checked_backward_leaves_nothing_requiring_grad():
    model, upstream = _TwiceModel(), torch.randn(4, 5)
    backward = Backward([upstream], ["input 0"])
    with torch.no_grad():
        host, inputs, found = run_one(model, [torch.randn(4, 5)], "cpu", [[[4, 5], "float32"]], backward=backward)
    assert found is None and torch.equal(backward.grads[0], upstream * 2)
    assert not inputs[0].requires_grad and inputs[0].grad is None and not host[0].requires_grad


def test_the_backward_records_its_own_ops_apart_from_the_forward():
    # _Twice: x * 2 forward, grad * 2 backward: one mul each, on a recorder each
    recorder, backward = OpRecorder(), Backward([torch.randn(4, 5)], ["input 0"])
    with torch.no_grad():
        _, _, found = run_one(_TwiceModel(), [torch.randn(4, 5)], "cpu", [[[4, 5], "float32"]],
                              recorder=recorder, backward=backward)
    assert found is None
    assert recorder.compute_ops() == {"mul": 1}, recorder.compute_ops()  # the backward's mul is not the forward's
    assert backward.record["ops"] == {"mul": 1} and backward.record["op_work"] == {"mul": 20}, backward.record


_REFERENCE_SILU = SetOps({"silu_backward": 1}, {"silu_backward": 9546})


def test_the_backward_is_judged_by_the_forwards_rule_and_says_so():
    base = {"device": "cpu", "own_kernels": ["triton:k"], "library_ops": []}
    own = SetOps({}, {}, own_used=4773)  # an own kernel wrote the gradient; no torch op ran
    assert backward_op_rules(["triton:k"], [(_REFERENCE_SILU, own)], base) is None
    torch_did = SetOps({"mul": 3, "sigmoid": 1, "sigmoid_backward": 1, "add": 1},
                       {"mul": 28638, "sigmoid": 4773, "sigmoid_backward": 9546, "add": 9546})
    verdict = backward_op_rules(["triton:k"], [(_REFERENCE_SILU, own), (_REFERENCE_SILU, torch_did)], base)
    assert verdict is not None and verdict.status is Status.rejected and verdict.code is Code.leaves_work_to_torch
    assert verdict.reason.startswith("its backward leaves the work to torch: ") and "52,503 elements" in verdict.reason
    assert verdict.feedback.startswith("its backward leaves the work to torch: ")
    # the reference's own backward op, run as often on as many elements: torch's work too
    same = backward_op_rules(["triton:k"], [(_REFERENCE_SILU, _REFERENCE_SILU)], base)
    assert same is not None and same.code is Code.leaves_work_to_torch


def test_a_child_that_sends_no_backward_record_claims_none():
    class _Made:  # the fields backward_op_claims reads
        outputs = [[], []]
        backward_ops = [_REFERENCE_SILU, _REFERENCE_SILU]

    assert backward_op_claims({}, _Made()) == [(_REFERENCE_SILU, SetOps())] * 2  # type: ignore[arg-type]
    _Made.backward_ops = []  # the trusted job recorded none: nothing to judge
    assert backward_op_claims({"backward_ops": {}}, _Made()) == []  # type: ignore[arg-type]


# --------------------------------------------------------------------------- verified on the CPU
@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("backward"), time_it=False,
                  compile_timeout_s=60.0, run_timeout_s=120.0) as shared:
        yield shared


def test_an_honest_forward_and_backward_is_correct(verifier):
    verdict = verifier.verify(Candidate.from_file(HONEST_SILU), Problem.from_file(SILU))
    assert verdict.status is Status.correct, verdict.reason
    assert any(name.startswith("triton:silu_backward_kernel") for name in verdict.own_kernels), verdict.own_kernels


def test_a_backward_left_to_torch_is_rejected_and_named(verifier):
    verdict = verifier.verify(Candidate.from_file(TORCH_BACKWARD), Problem.from_file(SILU))
    assert verdict.status is Status.rejected and verdict.code is Code.leaves_work_to_torch, verdict.reason
    assert verdict.reason.startswith("its backward leaves the work to torch: "), verdict.reason
    # the same forward with its own backward kernel (the honest fixture's) is correct: the forward passes the rules
    honest = verifier.verify(Candidate.from_file(HONEST_SILU), Problem.from_file(SILU))
    assert honest.status is Status.correct and "backward" not in honest.reason, honest.reason


def test_a_wrong_gradient_is_incorrect_and_named(verifier):
    verdict = verifier.verify(Candidate.from_file(WRONG_GRADIENT), Problem.from_file(SILU))
    assert verdict.status is Status.incorrect and verdict.code is Code.wrong_gradient, verdict.reason
    assert "gradient of input 0" in verdict.reason and "(trial 1)" in verdict.reason
    assert verdict.localisation is not None and verdict.localisation.gradient == "input 0"
    assert "gradient of input 0 (shape (37, 129))" in verdict.feedback  # what the coder and the critic read


def test_a_forward_that_breaks_autograd_has_no_gradient(verifier):
    verdict = verifier.verify(Candidate.from_file(FORWARD_ONLY), Problem.from_file(SILU))
    assert verdict.status is Status.incorrect and verdict.code is Code.no_gradient, verdict.reason
    assert "gradient of input 0" in verdict.reason


def test_parameter_gradients_are_judged_by_name(verifier):
    honest = verifier.verify(Candidate.from_file(HONEST_AFFINE), Problem.from_file(AFFINE))
    assert honest.status is Status.correct, honest.reason
    renamed = verifier.verify(Candidate.from_file(RENAMED), Problem.from_file(AFFINE))
    assert renamed.status is Status.incorrect and renamed.code is Code.no_gradient, renamed.reason
    assert "gradient of affine.weight: ModelNew has no parameter of that name" in renamed.reason


def test_a_wrong_parameter_gradient_names_the_parameter(verifier):
    source = HONEST_AFFINE.read_text().replace("db += g\n", "db += 2 * g\n")
    verdict = verifier.verify(Candidate.from_source(source), Problem.from_file(AFFINE))
    assert verdict.status is Status.incorrect and verdict.code is Code.wrong_gradient, verdict.reason
    assert "gradient of affine.bias" in verdict.reason
    assert verdict.localisation is not None and verdict.localisation.gradient == "affine.bias"


def test_a_problem_from_outside_has_its_backward_judged_too(verifier):
    verdict = verifier.verify(Candidate.from_file(WRONG_GRADIENT), Problem.from_file(SILU, trusted=False))
    assert verdict.status is Status.incorrect and "gradient of input 0" in verdict.reason


def test_a_problem_without_backward_judges_the_forward_alone(verifier):
    # the forward-only kernel, on the same function without BACKWARD: correct
    source = SILU.read_text().replace("BACKWARD = True", "")
    verdict = verifier.verify(Candidate.from_file(FORWARD_ONLY), Problem.from_source(source))
    assert verdict.status is Status.correct, verdict.reason


LISTS_ITS_JOB_DIR = HONEST_SILU.read_text().replace(
    "        return SiLU.apply(x)",
    "        import os\n        print('JOB DIR:', sorted(os.listdir(os.path.dirname(__file__))))\n        return SiLU.apply(x)")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The timing phase's conversation on the CPU (host clocks, fresh values), no static rules."""
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("backward-rehearsal"), fresh_timing=True,
                  rehearse_timing=True, static_checks=False, compile_timeout_s=60.0, run_timeout_s=180.0) as shared:
        yield shared


def test_a_backward_problem_still_verifies_and_times_its_forward(rehearsal):
    verdict = rehearsal.verify(Candidate.from_source(LISTS_ITS_JOB_DIR), Problem.from_file(SILU))
    assert verdict.status is Status.correct, verdict.reason
    assert any("timing protocol ran on host clocks" in w for w in verdict.warnings)
    # the child is handed inputs and upstream gradients, never the reference's outputs or gradients
    listed = [line for line in verdict.stdout_tail.splitlines() if line.startswith("JOB DIR:")]
    assert listed and all("upstream.sets" in line and "inputs.sets" in line for line in listed)
    assert not any(word in line for line in listed for word in ("outputs", "grads-", "reference"))
    assert os.path.basename(str(SILU)) not in "".join(listed)


SILU_WORKLOADS = SILU.read_text() + '''

def get_inputs_wide():
    return [torch.randn(5, 3000)]


def get_workloads():
    return {"narrow": get_inputs, "wide": get_inputs_wide}
'''
# right on the narrow workload's 129 columns, wrong past its first 2048 elements of a row's block: a
# backward whose grid covers one block of 2048 elements per row (only the wide workload has more)
ONE_BLOCK_BACKWARD = HONEST_SILU.read_text().replace(
    "silu_backward_kernel[(triton.cdiv(n, 1024),)](x, grad, dx, n, BLOCK=1024)",
    "dx.zero_()\n        silu_backward_kernel[(min(triton.cdiv(n, 1024), 5),)](x, grad, dx, n, BLOCK=1024)")


def test_a_gradient_wrong_on_one_workload_names_it(verifier):
    verdict = verifier.verify(Candidate.from_source(ONE_BLOCK_BACKWARD), Problem.from_source(SILU_WORKLOADS))
    assert verdict.status is Status.incorrect and verdict.code is Code.wrong_gradient, verdict.reason
    assert verdict.reason.startswith("wrong on workload 'wide': backward: ") and "gradient of input 0" in verdict.reason
    assert verdict.workloads["narrow"].status is Status.correct
    assert verdict.workloads["wide"].status is Status.incorrect and "gradient of input 0" in verdict.workloads["wide"].reason
