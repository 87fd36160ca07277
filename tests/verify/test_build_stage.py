"""The compile stage (tools/verify/build_stage.py): builds ahead of the device, products served
without a rebuild, refused when altered, failures judged without a device slot, and the two
cheats aimed at it (tests/fixtures/cheats/build_*.py) judged with the static rules off.

The integration tests build real C++ extensions with load_inline (cpp_sources only: g++ and
ninja, no CUDA), tens of seconds each on a 2-core machine; they share one pool, in file order.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status
from kernelloop.tools.verify import build_job, build_stage, workers
from kernelloop.tools.verify.build_store import MANIFEST, BuildStore
from kernelloop.tools.verify.pool import LocalPool, QueueCounts, _Workers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RELU = FIXTURES / "problems" / "relu.py"
SECRET = "sk-test-SECRET-build-5678"
KEY = "ab" * 32


# --------------------------------------------------------------------------- no build needed


def test_a_call_key_names_the_build_not_the_spelling():
    from torch.utils.cpp_extension import load_inline

    by_name = build_job.call_key(load_inline, (), {"name": "m", "cpp_sources": "int f();", "functions": ["f"]})
    by_place = build_job.call_key(load_inline, ("m", "int f();"), {"functions": ["f"], "verbose": True})
    assert by_name == by_place and by_name is not None
    assert build_job.call_key(load_inline, ("m", "int g();"), {"functions": ["f"]}) != by_name
    assert build_job.call_key(load_inline, ("m", "int f();"), {"build_directory": "/tmp/x"}) is None
    assert build_job.call_key(load_inline, ("m", object()), {}) is None


def test_a_run_job_serves_only_calls_that_match_and_builds_when_a_library_will_not_load(tmp_path):
    def load_inline(name, cpp_sources, functions=None, verbose=False):  # stands in for torch's
        return ("built", name)

    key = build_job.call_key(load_inline, ("m", "src"), {})
    assert build_job.serve(load_inline, None, []) is load_inline
    served: list[str] = []
    serving = build_job.serve(load_inline, {"dir": str(tmp_path), "calls": [{"key": key, "module": "m"}]}, served)
    assert serving("other", "src") == ("built", "other")  # no product for this call: built as before
    assert serving("m", "src") == ("built", "m") and served == []  # m.so is not there: built, not a verdict


def _job_dir(tmp_path: Path, module: str = "ext") -> Path:
    built = tmp_path / "job" / "cache" / "torch_extensions" / module
    built.mkdir(parents=True)
    (built / f"{module}.so").write_bytes(b"\x7fELF library bytes")
    return tmp_path / "job"


def _claim(module: str = "ext", where: str | None = None) -> list[dict]:
    return [{"key": KEY, "module": module, "file": where or f"/anywhere/torch_extensions/{module}/{module}.so"}]


def test_the_store_copies_what_a_build_made_and_checks_it_again(tmp_path):
    store = BuildStore(tmp_path / "builds")
    product = store.admit(KEY, _job_dir(tmp_path), _claim(), "chain")
    assert not isinstance(product, str), product
    assert product.job_field() == {"dir": str(tmp_path / "builds" / KEY), "calls": [{"key": KEY, "module": "ext"}]}
    assert (product.path / "ext.so").read_bytes() == b"\x7fELF library bytes"
    assert store.check(product) is None
    (product.path / "ext.so").write_bytes(b"\x7fELF library bytez")  # tampered in place
    assert "does not hash as admitted" in (store.check(product) or "")


def _as_link(library: Path) -> None:
    library.unlink()
    library.symlink_to("/proc/self/environ")


def _as_pipe(library: Path) -> None:
    library.unlink()
    os.mkfifo(library)


def _as_built(library: Path) -> None:
    pass


@pytest.mark.parametrize("make, claim, why", [
    (_as_link, _claim(), "can't be opened"),
    (_as_pipe, _claim(), "not a regular file"),
    (_as_built, _claim("ext", "/x/torch_extensions/ext/../../../../etc/passwd"), "not loaded from where"),
    (_as_built, _claim("../ext"), "no plain key"),
    (_as_built, [{"key": "short", "module": "ext", "file": "/t/ext/ext.so"}], "no plain key"),
    (_as_built, "not a list", "not a list"),
])
def test_the_store_refuses_a_claim_that_does_not_hold(tmp_path, make, claim, why):
    job = _job_dir(tmp_path)
    make(job / "cache" / "torch_extensions" / "ext" / "ext.so")
    store = BuildStore(tmp_path / "builds")
    refused = store.admit(KEY, job, claim, "chain")
    assert isinstance(refused, str) and why in refused
    assert not (tmp_path / "builds" / KEY).exists() and not list((tmp_path / "builds").iterdir())


def test_a_product_swapped_for_another_is_refused(tmp_path):
    store = BuildStore(tmp_path / "builds")
    first = store.admit(KEY, _job_dir(tmp_path / "a"), _claim(), "chain")
    other = "cd" * 32
    second = store.admit(other, _job_dir(tmp_path / "b", "ext"), [{**_claim()[0], "key": other}], "chain")
    assert not isinstance(first, str) and not isinstance(second, str)
    (second.path / "ext.so").write_bytes(b"another library")  # a consistent product of its own ...
    os.replace(second.path / "ext.so", first.path / "ext.so")  # ... moved over the first one's
    assert "does not hash as admitted" in (store.check(first) or "")


def test_queue_counts_say_who_waits_for_a_device():
    gate = threading.Event()
    pool: _Workers[str] = _Workers(["w"], ["cpu"])
    borrowed = threading.Event()

    def hold() -> None:
        with pool.borrow("p"):
            borrowed.set()
            gate.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    borrowed.wait(10)
    waiter = threading.Thread(target=lambda: pool.borrow("p").__enter__())
    waiter.start()
    for _ in range(200):
        if pool.waiting == 1:
            break
        threading.Event().wait(0.01)
    assert (pool.waiting, pool.busy()) == (1, 1)
    gate.set()
    holder.join(10)
    waiter.join(10)
    assert pool.waiting == 0


# --------------------------------------------------------------------------- real builds


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    space = tmp_path_factory.mktemp("build-stage")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELLOOP_API_KEY", SECRET)
        with LocalPool(["cpu"], workspace=space, compile_workers=1, keep_jobs=True, static_checks=False,
                       time_it=False, compile_timeout_s=600, run_timeout_s=120) as opened:
            opened.space = space
            yield opened


def _problem() -> Problem:
    return Problem.from_file(RELU)


def _honest(variant: str) -> Candidate:
    return Candidate(source=(FIXTURES / "build_stage" / "shared_name_relu.py").read_text() + f"# variant {variant}\n")


def _last_run_job(pool) -> Path:
    jobs = sorted((pool.space / "verifier" / "cpu" / "jobs").glob("cand-*"), key=lambda p: p.stat().st_mtime)
    return jobs[-1]


def _built_here(job_dir: Path) -> list[Path]:
    """What ninja left in a job's own extension dirs: it built there."""
    return sorted((job_dir / "cache").glob("torch_extensions/*/.ninja_log"))


def _store_files(pool) -> list[Path]:
    return [p for p in (pool.space / "verifier" / "builds").rglob("*") if p.is_file()]


@pytest.mark.slow
def test_a_build_that_plants_for_later_builds_reaches_none(pool):
    """tests/fixtures/cheats/build_plants_for_later.py, then a candidate with the same extension
    name and another function: built from its own sources, correct."""
    planted = Path("/tmp/torch_extensions/kl_build_shared/kl_build_shared.so")
    planted.unlink(missing_ok=True)
    verdict = pool.verify(Candidate.from_file(FIXTURES / "cheats" / "build_plants_for_later.py"), _problem())
    assert verdict.status is Status.correct, verdict.reason
    assert not planted.exists()
    assert not list((pool.space / "verifier").glob("build0/jobs/planted"))
    twin = pool.verify(_honest("after the plant"), _problem())
    assert twin.status is Status.correct, (twin.reason, twin.stderr_tail)
    assert twin.own_kernels == ["ext:shared_relu"]


@pytest.mark.slow
def test_the_run_job_loads_the_product_and_never_rebuilds(pool):
    candidate = _honest("served")
    verdict = pool.verify(candidate, _problem())
    assert verdict.status is Status.correct, verdict.reason
    assert verdict.cost_s["build_s"] > 0 and verdict.cost_s["build_reused"] == 0
    assert _built_here(_last_run_job(pool)) == []  # no ninja ran in the run job
    # The same source again: the kept product, checked, served again; nothing built anywhere.
    again = pool.verify(candidate, _problem())
    assert again.status is Status.correct and again.cost_s["build_reused"] == 1
    assert _built_here(_last_run_job(pool)) == []


@pytest.mark.slow
def test_a_product_altered_between_build_and_run_is_refused(pool):
    stage = pool._stage
    candidate = _honest("served")  # built by the test before
    built = stage.build(candidate)
    assert built.product is not None and built.reused
    library = next(built.product.path.glob("*.so"))
    library.write_bytes(library.read_bytes() + b"\0")  # as root: the store is the parent's own
    prebuilt, refused = stage.hand_over(built)
    assert prebuilt is None and "does not hash as admitted" in refused
    assert not built.product.path.exists()  # dropped: the next build of this source makes it anew


@pytest.mark.slow
def test_a_build_that_swaps_its_library_for_a_link_stores_nothing(pool):
    """tests/fixtures/cheats/build_product_swapped.py: refused at admission; its run job builds its own."""
    candidate = Candidate.from_file(FIXTURES / "cheats" / "build_product_swapped.py")
    key = pool._stage.key(candidate)
    verdict = pool.verify(candidate, _problem())
    assert verdict.status is Status.correct, verdict.reason
    assert any("not admitted" in warning and "can't be opened" in warning for warning in verdict.warnings)
    assert not (pool.space / "verifier" / "builds" / key).exists()
    assert _built_here(_last_run_job(pool)), "with no product, its run job builds its own"
    assert not any(SECRET.encode() in path.read_bytes() for path in _store_files(pool))
    assert SECRET not in "\n".join((verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail))


@pytest.mark.slow
def test_a_failed_build_is_a_compile_error_without_a_device_slot(pool):
    served = pool.stats()[0].served
    verdict = pool.verify(Candidate.from_file(FIXTURES / "build_stage" / "cpp_error.py"), _problem())
    assert verdict.status is Status.compile_error and verdict.code is Code.compile_failed, verdict.reason
    assert "load_inline could not build" in verdict.reason and "error" in verdict.feedback.lower()
    assert pool.stats()[0].served == served  # no device worker saw it
    assert pool.queues() == QueueCounts()
    assert pool.parallel_callers == 2


def test_the_candidates_worker_reads_the_store_and_build_workers_do_not_see_it(tmp_path):
    made = workers.layout("cpu", tmp_path, None, True, False)
    assert made.candidate.read_only == (workers.builds_dir(tmp_path),)
    stage = build_stage.BuildStage(made.candidate, tmp_path, 2, None)
    assert all(spec.read_only == () and spec.device == "cpu" and spec.gpu_index is None for spec in stage.specs)
    assert all(tmp_path in spec.hide for spec in stage.specs)
    assert (tmp_path / "verifier" / "builds").is_dir() and not (tmp_path / "verifier" / "builds" / MANIFEST).exists()
    stage.close()


def test_no_compile_stage_where_the_sandbox_is_plain(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain")
    with LocalPool(["cpu"], workspace=tmp_path, compile_workers=2) as plain:
        assert plain._stage is None and "plain" in plain.stage_note and plain.parallel_callers == 1
    monkeypatch.delenv("KERNELLOOP_SANDBOX")
    with LocalPool(["cpu"], workspace=tmp_path, compile_workers=0) as off:
        assert off._stage is None and off.queues() == QueueCounts()
