"""The adversarial corpus on CUDA with timing on: side streams, timer patches and caching that
only pays off in a timing loop must be caught where they would pay off.

Same fixtures and headers as tests/verify/test_adversarial.py (see its docstring); here every
fixture runs, including `needs_timing: yes` ones, through one timed Verifier on the GPU. A cheat
with an honest twin (`honest:`, the memo fixtures) that is judged correct must read no faster
than that twin timed by the same verifier.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status


def _load_corpus_helpers():
    """The unit test module, loaded by path: tests/gpu is not a package, so `tests.verify` is not
    importable when this file runs on its own."""
    path = Path(__file__).resolve().parents[1] / "verify" / "test_adversarial.py"
    spec = importlib.util.spec_from_file_location("adversarial_corpus", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus_helpers()
FIXTURES, PROBLEMS, SECRET = corpus.FIXTURES, corpus.PROBLEMS, corpus.SECRET

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

# Real compiles take seconds; timing adds eager and torch.compile baselines per candidate.
GPU_COMPILE_TIMEOUT_S = 60.0
GPU_RUN_TIMEOUT_S = 180.0
TEST_PARENT_PID = os.getppid()


@pytest.fixture(scope="module")
def timed_verifier(tmp_path_factory) -> Iterator:
    from kernelloop.tools.verify.verifier import Verifier

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELLOOP_API_KEY", SECRET)
        with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("adversarial-gpu"), time_it=True,
                      compile_timeout_s=GPU_COMPILE_TIMEOUT_S, run_timeout_s=GPU_RUN_TIMEOUT_S) as shared:
            yield shared


@pytest.fixture(scope="module")
def honest_speeds() -> dict:
    """Each honest twin's speedup, measured once by the linted timed verifier."""
    return {}


@pytest.fixture(scope="module")
def unlinted_honest_speeds() -> dict:
    return {}


@pytest.mark.parametrize("path", corpus.corpus_params(timed=True))
def test_fixture_gets_its_verdict_when_timed(timed_verifier, honest_speeds, path):
    verdict = corpus.check_fixture(timed_verifier, path)
    corpus.assert_no_faster_than_honest(timed_verifier, path, verdict, honest_speeds)


def test_timed_verifier_survives_the_corpus(timed_verifier):
    assert os.getppid() == TEST_PARENT_PID, "the test process lost its parent"
    verdict = timed_verifier.verify(Candidate.from_file(FIXTURES / "honest" / "relu_triton.py"),
                                    Problem.from_file(PROBLEMS / "relu.py"))
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.speedup is not None, "a correct candidate on CUDA with time_it=True got no speedup"


@pytest.fixture(scope="module")
def unlinted_timed_verifier(tmp_path_factory) -> Iterator:
    """Timed, with the static rules off: only the trust boundary stands between a forged timer and a speedup."""
    from kernelloop.tools.verify.verifier import Verifier

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELLOOP_API_KEY", SECRET)
        with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("boundary-gpu"), time_it=True,
                      static_checks=False, compile_timeout_s=GPU_COMPILE_TIMEOUT_S,
                      run_timeout_s=GPU_RUN_TIMEOUT_S) as shared:
            yield shared


@pytest.mark.parametrize("path", corpus.boundary_params())
def test_the_trust_boundary_holds_when_timed(unlinted_timed_verifier, unlinted_honest_speeds, path):
    verdict = corpus.check_fixture(unlinted_timed_verifier, path, unlinted=True)
    corpus.assert_no_faster_than_honest(unlinted_timed_verifier, path, verdict, unlinted_honest_speeds)
    if corpus.parse_header(path).not_fast:
        assert verdict.speedup is not None and verdict.speedup < 1.0, (
            f"{path.name}: a forged timer got a speedup of {verdict.speedup} ({verdict.speed_source}); "
            f"{verdict.warnings}")
