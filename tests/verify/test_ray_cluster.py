"""`kernelloop bench --ray ADDRESS` on a real two-node Ray cluster started on this host.

Each node is its own raylet with 1 CPU, 1 declared GPU and a custom resource naming it. The bench
connects by address, places one GPU actor per declared GPU (so one on each node), runs the static
checks as CPU tasks, and must give the local pool's verdicts. This machine has no GPU: the actors
sit on the declared GPUs and verify on the CPU (Triton's interpreter), as in test_ray_pool.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")  # the optional extra `ray` (pip install 'kernelloop[ray]'); skipped only without it

from ray.cluster_utils import Cluster  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from kernelloop.cli import bench_cmd  # noqa: E402
from kernelloop.cli._app import app  # noqa: E402
from kernelloop.problem import Candidate, Problem  # noqa: E402
from kernelloop.sandbox.isolation import IsolationError, probe_bubblewrap  # noqa: E402
from kernelloop.tools.verify.pool import RayPool  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
runner = CliRunner()
NODE_ARGS = dict(num_cpus=1, num_gpus=1, object_store_memory=100 * 1024**2)  # 2 cores, 24 GiB: keep nodes small


@pytest.fixture(scope="module")
def cluster():
    """A head node and one more node, each with a GPU; torn down however the test ends."""
    two = Cluster(initialize_head=True, connect=False,
                  head_node_args=dict(NODE_ARGS, resources={"node_head": 1}, include_dashboard=False))
    try:
        worker = two.add_node(**NODE_ARGS, resources={"node_worker": 1})
        two.wait_for_nodes()
        yield two, {two.head_node.node_id: "node_head", worker.node_id: "node_worker"}
    finally:
        if ray.is_initialized():  # a bench that failed before closing its pool
            ray.shutdown()
        two.shutdown()


@pytest.fixture
def suite(tmp_path):
    problems, candidates = tmp_path / "suite", tmp_path / "cands"
    problems.mkdir()
    candidates.mkdir()
    kernels = {"relu": "relu_triton", "abs_nonneg": "abs_nonneg_triton", "scale_add": "relu_triton"}  # wrong for scale_add
    for name, kernel in kernels.items():
        shutil.copy(FIXTURES / "problems" / f"{name}.py", problems / f"{name}.py")
        shutil.copy(FIXTURES / "honest" / f"{kernel}.py", candidates / f"{name}.py")
    shutil.copy(FIXTURES / "problems" / "gelu_scaled.py", problems / "gelu_scaled.py")
    (candidates / "gelu_scaled.py").write_text("class ModelNew(:\n")  # judged by a CPU task, never by an actor
    return problems, candidates


def bench(suite, out: Path, workspace: Path, *extra: str) -> tuple[dict, list[tuple[str, str, str]]]:
    problems, candidates = suite
    result = runner.invoke(app, ["bench", str(problems), "--candidates", str(candidates), "--out", str(out),
                                 "--workspace", str(workspace), "--device", "cpu", "--no-progress", "--json", *extra])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return json.loads(result.output.strip().splitlines()[-1]), sorted(
        (r["problem"], r["status"], r["reason"]) for r in records)


def test_bench_on_a_two_node_cluster_matches_the_local_pool(cluster, suite, tmp_path, monkeypatch):
    two, node_names = cluster
    pools: list[RayPool] = []

    def gpu_actors_verifying_on_the_cpu(device, address, workspace, *options):
        # bench's own _open_pool with --device cpu would make one CPU actor; this CPU machine's
        # declared GPUs need verify_on="cpu". The address is the one bench was given.
        pools.append(RayPool(address, "cuda", workspace=workspace, verify_on="cpu"))
        return pools[-1]

    local_summary, local_rows = bench(suite, tmp_path / "local", tmp_path / "ws-local")
    monkeypatch.setattr(bench_cmd, "_open_pool", gpu_actors_verifying_on_the_cpu)
    ray_summary, ray_rows = bench(suite, tmp_path / "ray", tmp_path / "ws-ray", "--ray", two.address)

    assert ray_rows == local_rows
    assert [(row[0], row[1]) for row in local_rows] == [
        ("abs_nonneg", "correct"), ("gelu_scaled", "compile_error"), ("relu", "correct"), ("scale_add", "runtime_error")]
    for key in ("correctness_rate", "solved", "problems"):
        assert ray_summary[key] == local_summary[key]

    [pool] = pools
    stats = pool.stats()
    assert [s.slot for s in stats] == ["cpu", "cpu"]  # two GPU actors, verifying on this machine's CPU
    assert sorted(node_names[s.node] for s in stats) == ["node_head", "node_worker"]  # one on each node
    assert sum(s.served for s in stats) == 3 and all(s.served for s in stats)  # the broken one reached no actor
    assert not ray.is_initialized()  # bench connected by address and disconnected when done
    assert len(list((tmp_path / "ws-ray" / "ray").iterdir())) == 2  # each actor worked under the shared workspace


def test_the_drivers_sandbox_setting_reaches_the_actors_on_every_node(cluster, tmp_path, monkeypatch):
    two, node_names = cluster
    jobs = [(Candidate.from_file(FIXTURES / "honest" / f"{name}_triton.py"), Problem.from_file(FIXTURES / "problems" / f"{name}.py"))
            for name in ("relu", "abs_nonneg")]  # two problems: round robin puts one on each actor
    # Set in the driver only, and the opposite of what the nodes would choose by themselves: their
    # raylets, like `ray start` on another machine, never saw it.
    bubblewrap = probe_bubblewrap().usable
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain" if bubblewrap else "bwrap")
    pool = RayPool(two.address, "cuda", workspace=tmp_path, verify_on="cpu")
    try:
        for candidate, problem in jobs:
            if bubblewrap:
                assert pool.verify(candidate, problem).isolation == "plain"
            else:  # as a local Verifier does: bubblewrap asked for and missing is an error, never plain processes
                with pytest.raises(IsolationError, match="KERNELLOOP_SANDBOX=bwrap"):
                    pool.verify(candidate, problem)
        stats = pool.stats()
    finally:
        pool.close()
    assert sorted(node_names[s.node] for s in stats) == ["node_head", "node_worker"]
    assert [s.served for s in stats] == [1, 1]
