"""The verifier pool: dispatch (one job per worker at a time, reference affinity), the static
pre-check agrees with the Verifier, a real CPU pool shared by threads, clear errors, light imports."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status, Verdict
from kernelloop.tools.verify import pool as pools
from kernelloop.tools.verify.pool import LocalPool, PoolError, VerifierPool, _Workers, make_pool, precheck

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELU = FIXTURES / "problems" / "relu.py"
RELU_KERNEL = FIXTURES / "honest" / "relu_triton.py"
FORBIDDEN = ("import os\nimport torch.nn as nn\n\n"
             "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")


class RecordingWorker:
    """Verifies by sleeping; records how many callers it serves at once."""

    def __init__(self, name: str, log: list[str], lock: threading.Lock):
        self.name, self.log, self.lock = name, log, lock
        self.active = self.most_active = 0

    def verify(self, candidate: Candidate, problem: Problem, time_left_s=None) -> Verdict:
        with self.lock:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.log.append(f"{self.name}:{problem.name}")
        time.sleep(0.05)
        with self.lock:
            self.active -= 1
        return Verdict(status=Status.correct, reason=self.name)


class FakePool(VerifierPool):
    device = "cpu"

    def __init__(self, workers: list[RecordingWorker]):
        self._workers = _Workers(workers, [f"fake:{i}" for i in range(len(workers))])

    def _precheck(self, candidate):
        return precheck(candidate, self.device)

    def _verify_on(self, worker, candidate, problem, prebuilt, time_left_s):
        return worker.verify(candidate, problem)

    def _time_baselines_on(self, worker, problem):
        raise AssertionError("not used")

    def close(self) -> None:
        self._workers.close()


def problem(tmp_path: Path, name: str) -> Problem:
    path = tmp_path / f"{name}.py"
    path.write_text(RELU.read_text() + f"\n# {name}\n")  # different source, different sha256
    return Problem.from_file(path)


def test_each_worker_serves_one_caller_at_a_time_and_all_are_used(tmp_path):
    lock, log = threading.Lock(), []
    workers = [RecordingWorker(f"w{i}", log, lock) for i in range(3)]
    fake = FakePool(workers)
    problems = [problem(tmp_path, f"p{i}") for i in range(4)]
    candidate = Candidate.from_file(RELU_KERNEL)
    threads = [threading.Thread(target=fake.verify, args=(candidate, problems[i % 4])) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(log) == 12
    assert all(worker.most_active == 1 for worker in workers)
    assert [s.served for s in fake.stats()] == [sum(e.startswith(f"w{i}:") for e in log) for i in range(3)]
    assert all(s.served > 0 for s in fake.stats())


def test_an_idle_worker_that_has_the_problem_is_preferred(tmp_path):
    lock, log = threading.Lock(), []
    fake = FakePool([RecordingWorker(f"w{i}", log, lock) for i in range(2)])
    a, b = problem(tmp_path, "a"), problem(tmp_path, "b")
    candidate = Candidate.from_file(RELU_KERNEL)
    fake.verify(candidate, a)  # w0: nobody has a, w0 has been idle longest
    fake.verify(candidate, b)  # w1: nobody has b, w1 has been idle longest
    fake.verify(candidate, b)  # w1 again, though w0 has been idle longer: w1 holds b's reference
    fake.verify(candidate, a)  # w0, which holds a's
    assert log == ["w0:a", "w1:b", "w1:b", "w0:a"]


def test_a_closed_pool_refuses_work(tmp_path):
    fake = FakePool([RecordingWorker("w0", [], threading.Lock())])
    fake.close()
    with pytest.raises(PoolError, match="closed"):
        fake.verify(Candidate.from_file(RELU_KERNEL), problem(tmp_path, "a"))


@pytest.mark.parametrize("source", ["def broken(:\n", "x = 1\n", FORBIDDEN])
def test_precheck_gives_the_verifiers_own_verdict(source):
    from kernelloop.tools.verify.verifier import Verifier

    candidate = Candidate(source=source)
    with Verifier(device="cpu") as verifier:  # these return before any sandbox starts
        expected = verifier.verify(candidate, Problem.from_file(RELU))
    early = precheck(candidate, "cpu")
    assert early is not None and early.status in (Status.compile_error, Status.rejected)
    assert early.model_dump() == expected.model_dump()
    assert precheck(Candidate.from_file(RELU_KERNEL), "cpu") is None


def test_a_real_cpu_pool_shared_by_two_threads(tmp_path):
    relu, kernel = Problem.from_file(RELU), Candidate.from_file(RELU_KERNEL)
    verdicts: list[Verdict] = []
    with make_pool("cpu", workspace=tmp_path) as pool:
        assert isinstance(pool, LocalPool) and pool.slots == ["cpu"] and pool.device == "cpu"
        threads = [threading.Thread(target=lambda: verdicts.append(pool.verify(kernel, relu))) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rule_broken = pool.verify(Candidate(source=FORBIDDEN), relu)
        with pytest.raises(PoolError, match="CUDA GPU"):
            pool.time_baselines(relu)
        stats = pool.stats()
    assert [v.status for v in verdicts] == [Status.correct, Status.correct]
    assert rule_broken.status is Status.rejected
    assert stats[0].served == 2  # the rejection never reached the worker


def test_device_errors_are_one_line(monkeypatch):
    monkeypatch.setattr(pools.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(pools.torch.cuda, "device_count", lambda: 0)
    assert pools.local_devices("auto") == ["cpu"]
    for device, message in (("cuda", "no CUDA GPU"), ("cuda:1", "sees 0 CUDA GPU"), ("tpu", "unknown device")):
        with pytest.raises(PoolError, match=message) as caught:
            make_pool(device)
        assert "\n" not in str(caught.value)
    with pytest.raises(PoolError, match="distinct devices"):
        LocalPool(["cpu", "cpu"])


def test_ray_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(PoolError, match=r"pip install 'kernelloop\[ray\]'"):
        make_pool("auto", ray="auto")


def test_the_pool_imports_without_agent_side_packages_or_ray():
    blocked = ("pydantic", "langgraph", "langchain_core", "typer", "rich", "jinja2", "ray", "kernelloop.agents",
               "kernelloop.graph")
    script = textwrap.dedent(f"""
        import builtins, sys
        real = builtins.__import__
        def guard(name, *args, **kwargs):
            if name.split('.')[0] in {blocked!r} or name.startswith({blocked!r}):
                raise ImportError('blocked ' + name)
            return real(name, *args, **kwargs)
        builtins.__import__ = guard
        import kernelloop.tools.verify.pool
        print('ok', 'ray' in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok False", done.stderr[-2000:]


def test_a_pool_asked_to_start_now_starts_every_worker_before_the_first_verify_and_uses_them(tmp_path):
    relu, kernel = Problem.from_file(RELU), Candidate.from_file(RELU_KERNEL)
    with LocalPool(["cpu"], workspace=tmp_path / "lazy") as lazy:
        assert lazy._workers.workers[0]._zygote is None  # on the CPU the default waits for the first verify
    with LocalPool(["cpu"], workspace=tmp_path / "now", start_now=True) as pool:
        verifier = pool._workers.workers[0]
        started = (verifier._zygote, verifier._trusted_zygote)
        assert all(zygote is not None and zygote.alive() for zygote in started)
        verdict = pool.verify(kernel, relu)
        assert (verifier._zygote, verifier._trusted_zygote) == started  # the same processes served it
    assert verdict.status is Status.correct
    assert all(zygote.proc.poll() is not None for zygote in started)  # and the pool stopped them


def test_a_worker_that_cannot_start_when_the_pool_opens_is_reported_by_its_first_verify(tmp_path, monkeypatch):
    from kernelloop.sandbox.isolation import IsolationError
    from kernelloop.tools.verify import workers

    def refuse(spec, wait=True):
        raise IsolationError("KERNELLOOP_SANDBOX=bwrap, but bubblewrap is not installed")

    monkeypatch.setattr(workers, "take", refuse)
    with LocalPool(["cpu"], workspace=tmp_path, start_now=True) as pool:  # opening does not fail
        with pytest.raises(IsolationError, match="bubblewrap is not installed"):
            pool.verify(Candidate.from_file(RELU_KERNEL), Problem.from_file(RELU))
