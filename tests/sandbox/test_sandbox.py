"""Hostile candidates become verdicts, within their timeouts, and the parent carries on.

Each case runs a real candidate in the real sandbox (Triton interpreter on the CPU).
"""

import textwrap
import time

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import STATUS_OF, Code, Status
from kernelloop.tools.verify.tensor_files import load_sets
from kernelloop.tools.verify.verifier import Verifier

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(2048)]

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
    tl.store(y_ptr + offs + SHIFT, tl.maximum(tl.load(x_ptr + offs + SHIFT, mask=mask), 0.0), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        BODY
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''
RUN_TIMEOUT_S = 8.0


def candidate(body: str = "pass", shift: str = "0") -> Candidate:
    return Candidate(KERNEL.replace("BODY", body).replace("SHIFT", shift))


@pytest.fixture(scope="module")
def problem(tmp_path_factory) -> Problem:
    path = tmp_path_factory.mktemp("problem") / "relu.py"
    path.write_text(textwrap.dedent(PROBLEM))
    return Problem.from_file(path)


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("ws"), time_it=False,
                  compile_timeout_s=RUN_TIMEOUT_S, run_timeout_s=RUN_TIMEOUT_S) as v:
        yield v


def judged(verifier, problem, cand):
    started = time.monotonic()
    verdict = verifier.verify(cand, problem)
    return verdict, time.monotonic() - started


def test_honest_kernel_is_correct(verifier, problem):
    verdict, _ = judged(verifier, problem, candidate())
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.own_kernels == ["triton:relu_kernel"]


def test_infinite_loop_times_out_and_group_is_killed(verifier, problem):
    verdict, elapsed = judged(verifier, problem, candidate("while True:\n            x = x + 0"))
    assert verdict.status is Status.timeout and "timed out" in verdict.reason
    assert elapsed < 2 * RUN_TIMEOUT_S + 10


def test_segfault_is_a_runtime_error(verifier, problem):
    verdict, _ = judged(verifier, problem, candidate(shift="(1 << 40)"))
    assert verdict.status is Status.runtime_error and "crashed (SIGSEGV)" in verdict.reason


def test_hundred_megabytes_of_output_are_cut(verifier, problem):
    verdict, _ = judged(verifier, problem, candidate("print('x' * 1_000_000 * 25)"))
    assert verdict.status is Status.correct, verdict.reason
    assert len(verdict.stdout_tail) < 10_000 and "bytes cut" in verdict.stdout_tail


def test_allocating_past_memory_is_out_of_memory(verifier, problem):
    verdict, _ = judged(verifier, problem, candidate("big = torch.empty(1 << 40)"))
    assert verdict.status is Status.runtime_error and "out of memory" in verdict.reason


def test_system_exit_is_reported(verifier, problem):
    verdict, _ = judged(verifier, problem, candidate("raise SystemExit(3)"))
    assert verdict.status is Status.runtime_error and "exited" in verdict.reason


def test_secrets_are_scrubbed_from_the_child(verifier, problem, monkeypatch, tmp_path):
    # A fresh verifier: the zygote's environment is fixed when it starts.
    monkeypatch.setenv("KERNELLOOP_API_KEY", "sk-test-SECRET-1234")
    with Verifier(device="cpu", workspace=tmp_path, time_it=False) as fresh:
        env_dump = "print(sorted(k for k in __import__('os').environ))"  # static check rejects this...
        assert fresh.verify(candidate(env_dump), problem).status is Status.rejected
        # ...so read the real environment of the zygote every child is forked from.
        with open(f"/proc/{fresh.zygote.proc.pid}/environ", "rb") as handle:
            assert b"sk-test-SECRET-1234" not in handle.read()


def test_outputs_the_candidate_corrupts_are_rejected_not_a_crash(problem, tmp_path):
    """With the static rules off, a candidate replaces the harness's writer, so its outputs file is
    garbage; the parent says so instead of raising."""
    swap = ("__import__('sys').modules['kernelloop.tools.verify.harness'].save_sets = "
            "lambda path, sets, extra=None: open(path, 'wb').write(b'not a tensor file')")
    with Verifier(device="cpu", workspace=tmp_path, time_it=False, static_checks=False) as unguarded:
        verdict = unguarded.verify(candidate(swap), problem)
        assert verdict.status is Status.rejected and verdict.reason.startswith("unreadable outputs"), verdict.reason
        assert unguarded.verify(candidate(), problem).status is Status.correct


def test_parent_survives_and_still_verifies(verifier, problem):
    assert verifier.zygote.alive()
    assert verifier.verify(candidate(), problem).status is Status.correct


def test_bf16_dot_on_the_interpreter_carries_a_caveat(tmp_path):
    problem_path = tmp_path / "bf16_mm.py"
    problem_path.write_text(
        "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, a, b):\n"
        "        return a @ b\n\ndef get_inputs():\n    return [torch.randn(16, 16).bfloat16(), torch.randn(16, 16).bfloat16()]\n\n"
        "def get_init_inputs():\n    return []\n")
    source = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    rows = tl.arange(0, N)[:, None]
    cols = tl.arange(0, N)[None, :]
    acc = tl.dot(tl.load(a_ptr + rows * N + cols), tl.load(b_ptr + rows * N + cols))
    tl.store(c_ptr + rows * N + cols, acc.to(tl.bfloat16))

class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty_like(a)
        mm_kernel[(1,)](a, b, c, N=16)
        return c
'''
    with Verifier(device="cpu", workspace=tmp_path / "ws", time_it=False) as verifier:
        verdict = verifier.verify(Candidate(source), Problem.from_file(problem_path))
    assert any("bf16 tl.dot" in w for w in verdict.warnings), verdict.warnings


def test_a_candidate_gets_fresh_secret_inputs_and_never_the_reference_outputs(problem, tmp_path):
    """Every verification draws its own inputs; the candidate's job dir holds inputs only, and the
    reference's outputs file is gone (read into the parent) before any candidate code runs."""
    with Verifier(device="cpu", workspace=tmp_path, time_it=False, keep_jobs=True) as verifier:
        assert verifier.verify(candidate(), problem).status is Status.correct
        assert verifier.verify(candidate(), problem).status is Status.correct
        jobs = sorted((verifier.root / "jobs").glob("cand-*"), key=lambda d: d.stat().st_mtime)
        given = []
        for job in jobs:
            with (job / "inputs.sets").open("rb") as handle:
                given.append(load_sets(handle, 1 << 30))
        assert all(set(extra) == {"init_inputs"} for _, extra in given)
        assert not torch.equal(given[0][0][0][0], given[1][0][0][0]), "two verifications, same inputs"
        assert not list(verifier.trusted_root.rglob("outputs-*")), "reference outputs left on disk"
        assert verifier.trusted_root not in verifier.root.parents and verifier.root not in verifier.trusted_root.parents


def test_an_out_of_memory_whose_report_failed_is_still_out_of_memory():
    """Recorded on the H100: the caching allocator's out-of-memory report raised this instead."""
    from kernelloop.tools.verify.harness import classify_exception

    recorded = RuntimeError('NVML_SUCCESS == DriverAPI::get()->nvmlInit_v2_() INTERNAL ASSERT FAILED at '
                            '"/pytorch/c10/cuda/CUDACachingAllocator.cpp":1135, please report a bug to PyTorch.')
    code, reason = classify_exception(recorded)
    assert code is Code.out_of_memory and STATUS_OF[code] is Status.runtime_error and reason.startswith("out of memory")
    assert classify_exception(ValueError("bad shape")) == (Code.raised, "raised ValueError: bad shape")


def test_claims_from_the_candidates_process_are_validated_not_believed():
    from kernelloop.tools.verify.verifier import claimed_names, claimed_seconds

    assert claimed_seconds({"save_s": 0.5, "list": [1], "huge": 10**400, "nan": float("nan"), "neg": -1.0,
                            "flag": True, "inf": float("inf")}) == {"save_s": 0.5}
    assert claimed_seconds([1]) == {} and claimed_seconds(None) == {}
    assert claimed_names({"triton:relu": 3, 5: 1}) == ["triton:relu"]
    assert claimed_names(["relu", 7, None]) == ["relu"] and claimed_names(7) == []


def test_an_earlier_jobs_late_lines_do_not_break_the_next_job(verifier, problem):
    """A job killed past KILL_WAIT_S has its exit reported after its session stopped reading; the next
    job's start read that line as its fork reply (KeyError: 'pid', seen on an H200 in
    test_the_baselines_alone_are_timed_in_the_trusted_worker). Lines before the fork reply are dropped."""
    assert judged(verifier, problem, candidate())[0].status is Status.correct
    verifier.zygote._buffer += b'{"exit": -9}\n{"msg": "{\\"result\\": {\\"status\\": \\"correct\\"}}"}\n'
    honest, _ = judged(verifier, problem, candidate())
    assert honest.status is Status.correct, honest.reason
    verifier.zygote._buffer += b'{"exit": 0}\n'
    doubled = Candidate(KERNEL.replace("BODY", "pass").replace("SHIFT", "0").replace("tl.maximum(", "2.0 * tl.maximum("))
    wrong, _ = judged(verifier, problem, doubled)  # its own kernel wrong
    assert wrong.status is Status.incorrect, wrong.reason


def test_a_verification_is_cut_at_its_callers_budget(verifier, problem):
    """A run's budget reaches the job: a forward that never returns is killed when the time left is spent,
    not at the run limit (issue 29: a run overran its budget waiting on one verification)."""
    hang, took = judged_within(verifier, problem, candidate("while True:\n            x = x + 0"), time_left_s=3.0)
    assert hang.status is Status.timeout and "cut at the run's budget (3s were left" in hang.reason, hang.reason
    assert took < RUN_TIMEOUT_S  # its own limit would have let it run 8 s
    spent, took = judged_within(verifier, problem, candidate(), time_left_s=0.0)
    assert spent.status is Status.timeout and "before its job started" in spent.reason and took < 1.0
    fine, _ = judged_within(verifier, problem, candidate(), time_left_s=120.0)
    assert fine.status is Status.correct, fine.reason


def judged_within(verifier, problem, cand, time_left_s):
    started = time.monotonic()
    verdict = verifier.verify(cand, problem, time_left_s=time_left_s)
    return verdict, time.monotonic() - started
