"""The verifier on a real GPU: shipped examples are correct and timed; cheats are caught,
including by the dynamic cross-checks alone (static checks off)."""

from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status
from kernelloop.tools.verify.verifier import Verifier

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = ROOT / "kernelloop" / "evals" / "problems"
EXAMPLES = sorted((ROOT / "examples" / "candidates").glob("*.py"))

RELU_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(1 << 24)]

def get_init_inputs():
    return []
'''
KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)

def launch(x, y):
    relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), BLOCK=4096)

class ModelNew(nn.Module):
    def forward(self, x):
        BODY
'''
HONEST = "y = torch.empty_like(x)\n        launch(x, y)\n        return y"
SIDE_STREAM = ("y = torch.empty_like(x)\n        s = torch.cuda.Stream()\n        s.wait_stream(torch.cuda.current_stream())\n"
               "        with torch.cuda.stream(s):\n            launch(x, y)\n            for _ in range(20):\n"
               "                launch(x, y)\n        return y")
CACHED = ("if not hasattr(self, 'cache'):\n            self.cache = torch.empty_like(x)\n"
          "            launch(x, self.cache)\n        return self.cache")
DECOY = "y = torch.empty(1, device=x.device)\n        launch(y, y)\n        return torch.relu(x)"


def kernel(body: str) -> Candidate:
    return Candidate(KERNEL.replace("BODY", body))


@pytest.fixture(scope="module")
def relu_problem(tmp_path_factory) -> Problem:
    path = tmp_path_factory.mktemp("p") / "relu.py"
    path.write_text(RELU_PROBLEM)
    return Problem.from_file(path)


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("ws")) as v:
        yield v


@pytest.mark.parametrize("candidate_path", EXAMPLES, ids=lambda p: p.stem)
def test_shipped_example_is_correct_and_timed(verifier, candidate_path):
    verdict = verifier.verify(Candidate.from_file(candidate_path), Problem.from_file(PROBLEMS / candidate_path.name))
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.speedup is not None and verdict.speedup > 0
    assert {"candidate", "eager", "compile"} <= set(verdict.timings)


def test_honest_kernel_is_timed_and_not_flagged(verifier, relu_problem):
    verdict = verifier.verify(kernel(HONEST), relu_problem)
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.noise_floor is not None and verdict.profile is not None and verdict.profile.own_share > 0.5


def test_cached_result_fails_on_fresh_inputs(verifier, relu_problem):
    verdict = verifier.verify(kernel(CACHED), relu_problem)
    assert verdict.status is Status.incorrect, verdict.reason
    assert "fresh inputs" in verdict.reason or "mismatch" in verdict.reason


def test_torch_fallback_with_a_decoy_kernel_is_rejected(verifier, relu_problem):
    verdict = verifier.verify(kernel(DECOY), relu_problem)
    assert verdict.status is Status.rejected and "leaves the work to torch" in verdict.reason


def test_side_stream_is_caught_statically(verifier, relu_problem):
    verdict = verifier.verify(kernel(SIDE_STREAM), relu_problem)
    assert verdict.status is Status.rejected and "stream or thread" in verdict.reason


def test_side_stream_is_caught_by_timing_alone(relu_problem, tmp_path):
    with Verifier(device="cuda", workspace=tmp_path, static_checks=False) as unguarded:
        verdict = unguarded.verify(kernel(SIDE_STREAM), relu_problem)
    assert verdict.status is Status.rejected and "stream or thread" in verdict.reason, verdict.reason


WRONG = "y = torch.empty_like(x)\n        launch(x, y)\n        return y * 1.01"


def test_the_parent_compares_on_the_gpu_with_the_cpu_verdicts(verifier, relu_problem, tmp_path):
    """The trusted compare runs on the worker's GPU; it judges as
    the CPU compare does (same verdicts, errors equal to float32 rounding)."""
    with Verifier(device="cuda", workspace=tmp_path, gpu_compare=False, time_it=False) as on_cpu:
        cpu_honest, cpu_wrong = on_cpu.verify(kernel(HONEST), relu_problem), on_cpu.verify(kernel(WRONG), relu_problem)
        assert on_cpu.compare_on.type == "cpu"
    honest, wrong = verifier.verify(kernel(HONEST), relu_problem), verifier.verify(kernel(WRONG), relu_problem)
    assert verifier.compare_on.type == "cuda"
    assert honest.status is cpu_honest.status is Status.correct
    assert wrong.status is cpu_wrong.status is Status.incorrect and wrong.reason.startswith("mismatch")
    # Each verification draws its own secret inputs, so the errors agree as the kernel's 1% scale does.
    assert wrong.rel_err == pytest.approx(0.01, rel=1e-2) and cpu_wrong.rel_err == pytest.approx(0.01, rel=1e-2)


def test_a_problems_first_verification_builds_the_baselines_beside_the_candidate(relu_problem, tmp_path, monkeypatch):
    """The torch.compile baseline is built in the trusted job while the candidate's trials run
    (baselines_build_s, overlapped), and timing uses it; the next verification of the problem
    builds nothing; a wrong candidate's verification still ends (its compile is not waited for)."""
    monkeypatch.setenv("KERNELLOOP_TRUSTED_CACHE", "off")  # no kept compile times: the compile must happen
    with Verifier(device="cuda", workspace=tmp_path) as v:
        first, second = v.verify(kernel(HONEST), relu_problem), v.verify(kernel(HONEST), relu_problem)
    assert first.status is Status.correct and second.status is Status.correct, (first.reason, second.reason)
    assert first.cost_s.get("baselines_build_s", 0) > 0 and "baselines_build_s" not in second.cost_s
    assert {"eager", "compile"} <= set(first.timings) and {"eager", "compile"} <= set(second.timings)
    with Verifier(device="cuda", workspace=tmp_path / "wrong") as v:
        assert v.verify(kernel(WRONG), relu_problem).status is Status.incorrect


def test_a_job_that_rewrites_its_triton_driver_touches_no_later_job(relu_problem, tmp_path):
    """Each job's Triton driver helpers come from its own standby process (harness.prepare), in a
    deleted private file; tests/fixtures/cheats/rewrite_triton_driver.py zeroes the file behind its
    mapping where it can (it may crash itself), and the next job of the same worker is untouched. A
    first version built them once in the worker: this test's attack then crashed every later job."""
    attack = Candidate.from_file(ROOT / "tests" / "fixtures" / "cheats" / "rewrite_triton_driver.py")
    with Verifier(device="cuda", workspace=tmp_path, static_checks=False) as v:  # the boundary itself
        attacked = v.verify(attack, relu_problem)
        after = [v.verify(kernel(HONEST), relu_problem) for _ in range(2)]
    assert attacked.status in (Status.correct, Status.runtime_error), attacked.reason
    assert all(verdict.status is Status.correct for verdict in after), [verdict.reason for verdict in after]
    assert all(verdict.cost_s.get("prepare_driver_s", 0) > 0 and verdict.cost_s.get("preload_triton_key_s", 0) > 0
               for verdict in after)
    # the digest kernel of timed outputs compiled by each job's standby too, not while a timed job waits
    assert all(verdict.cost_s.get("prepare_digest_s", 0) > 0 for verdict in after)


def test_the_baselines_alone_are_timed_in_the_trusted_worker(verifier, relu_problem):
    """bench --baselines-only: the "baselines" job runs in the trusted workers' module (trusted_child.py)."""
    timed = verifier.time_baselines(relu_problem)
    assert {"eager", "compile"} <= set(timed["timings"]) and timed["timings"]["eager"].median_ms > 0
