"""Work, not calls, on a GPU: the textbook three-phase scan on the shipped 13_CumsumRows (torch scans 8
tile totals a row of 8000) and a row sum whose partials torch.sum finishes are correct and timed; torch's
full row sum beside a kernel that copies its result is still leaving the work to torch."""

from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status
from kernelloop.tools.verify.verifier import Verifier

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("ws")) as v:
        yield v


@pytest.mark.parametrize(("candidate", "problem"), [
    ("honest/cumsum_three_phase_triton.py", ROOT / "kernelloop/evals/problems/13_CumsumRows.py"),
    ("honest/cumsum_three_phase_triton.py", FIXTURES / "problems/cumsum.py"),
    ("honest/rowsum_partials_triton.py", FIXTURES / "problems/rowsum.py"),
])
def test_a_kernel_that_leaves_torch_a_last_step_is_correct(verifier, candidate, problem):
    verdict = verifier.verify(Candidate.from_file(FIXTURES / candidate), Problem.from_file(problem))
    print(f"{candidate} on {problem.name}: {verdict.status.value} speedup={verdict.speedup} {verdict.reason}")
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.speedup is not None


def test_a_full_reduction_beside_a_copy_kernel_leaves_the_work_to_torch(verifier):
    verdict = verifier.verify(Candidate.from_file(FIXTURES / "cheats/rowsum_torch_beside_copy_kernel.py"),
                              Problem.from_file(FIXTURES / "problems/rowsum.py"))
    assert verdict.status is Status.rejected and verdict.code is Code.leaves_work_to_torch, verdict.reason
