"""The Ray pool on a local Ray instance started here (2 CPUs, 2 declared GPUs on this CPU machine):
`kernelloop bench --ray` gives the same results as the local pool, and a GPU pool places one
actor per GPU and runs the static checks as CPU tasks."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
import ray  # the optional extra `ray`: install it to run these tests (pip install 'kernelloop[ray]')
from typer.testing import CliRunner

from kernelloop.cli._app import app
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status, Verdict
from kernelloop.tools.verify.pool import RayPool

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = CliRunner()


@pytest.fixture(scope="module")
def local_ray():
    # address="local": a new instance, never a cluster some earlier `ray start` left behind
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture
def suite(tmp_path):
    problems, candidates = tmp_path / "suite", tmp_path / "cands"
    problems.mkdir()
    candidates.mkdir()
    for name in ("relu", "scale_add"):
        shutil.copy(FIXTURES / "problems" / f"{name}.py", problems / f"{name}.py")
        shutil.copy(FIXTURES / "honest" / "relu_triton.py", candidates / f"{name}.py")  # wrong for scale_add
    return problems, candidates


def bench(suite, out: Path, workspace: Path, *extra: str) -> tuple[dict, list[tuple[str, str, str]]]:
    problems, candidates = suite
    result = runner.invoke(app, ["bench", str(problems), "--candidates", str(candidates), "--out", str(out),
                                 "--workspace", str(workspace), "--device", "cpu", "--no-progress", "--json", *extra])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return json.loads(result.output.strip().splitlines()[-1]), sorted(
        (r["problem"], r["status"], r["reason"]) for r in records)


def test_bench_on_ray_matches_the_local_pool(local_ray, suite, tmp_path):
    local_summary, local_rows = bench(suite, tmp_path / "local", tmp_path / "ws-local")
    ray_summary, ray_rows = bench(suite, tmp_path / "ray", tmp_path / "ws-ray", "--ray", "auto")
    assert ray_rows == local_rows
    assert [(row[0], row[1] == "correct") for row in local_rows] == [("relu", True), ("scale_add", False)]
    for key in ("correctness_rate", "solved", "problems"):
        assert ray_summary[key] == local_summary[key]
    assert local_ray.is_initialized()  # the pool used the running instance and left it running
    assert list((tmp_path / "ws-ray" / "ray").iterdir()), "the Ray actor worked under the workspace"


def test_one_actor_per_gpu_and_checks_as_cpu_tasks(local_ray, tmp_path):
    relu, kernel = Problem.from_file(FIXTURES / "problems" / "relu.py"), Candidate.from_file(
        FIXTURES / "honest" / "relu_triton.py")
    verdicts: list[Verdict] = []
    # Actors placed on the 2 declared GPUs; this machine has none, so they verify on its CPU.
    pool = RayPool("auto", "cuda", workspace=tmp_path, verify_on="cpu")
    try:
        assert pool.size == 2 and pool._check_task is not None
        threads = [threading.Thread(target=lambda: verdicts.append(pool.verify(kernel, relu))) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        broken = pool.verify(Candidate(source="class ModelNew(:\n"), relu)
        stats = pool.stats()
    finally:
        pool.close()
    assert [v.status for v in verdicts] == [Status.correct, Status.correct]
    assert broken.status is Status.compile_error  # judged by the CPU task: no actor served it
    assert [s.served for s in stats] == [1, 1]
    assert len({p.name for p in (tmp_path / "ray").iterdir()}) == 2  # two actors, two working dirs
