"""The cold path (issue 16): where one verification's time goes, workers that start at once and
preload by role, and the trusted cache of baselines kept across processes. Behaviour only: no
test here asserts a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status
from kernelloop.sandbox.isolation import probe_bubblewrap
from kernelloop.sandbox.runner import Zygote
from kernelloop.tools.verify import trusted_cache
from kernelloop.tools.verify.verifier import PHASE_NAMES, Verifier, with_cached_baselines

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0
needs_bwrap = pytest.mark.skipif(not probe_bubblewrap().usable, reason="bubblewrap is not usable here")

PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(1024)]

def get_init_inputs():
    return []
'''

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

PRELUDE

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)

class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''


def problem_file(directory: Path, extra: str = "") -> Problem:
    path = directory / "relu.py"
    path.write_text(textwrap.dedent(PROBLEM) + extra)
    return Problem.from_file(path)


def verifier(workspace: Path, **options) -> Verifier:
    return Verifier(device="cpu", workspace=workspace, time_it=False, compile_timeout_s=TIMEOUT_S,
                    run_timeout_s=TIMEOUT_S, **options)


# --------------------------------------------------------------------------- the phase split


def test_the_phases_are_recorded_and_add_up_to_the_total(tmp_path):
    problem = problem_file(tmp_path)
    with verifier(tmp_path / "ws") as v:
        first = v.verify(Candidate(KERNEL.replace("PRELUDE", "")), problem)
        second = v.verify(Candidate(KERNEL.replace("PRELUDE", "")), problem)  # the warm path: same workers
    for verdict in (first, second):
        assert verdict.status is Status.correct, verdict.reason
        phases = {k: v for k, v in verdict.cost_s.items() if k.startswith("phase_")}
        for name in ("precheck", "workers", "reference", "candidate", "compare", "fresh", "finish"):
            assert f"phase_{name}_s" in phases
        assert set(phases) <= {f"phase_{name}_s" for name in PHASE_NAMES}
        assert all(value >= 0 for value in phases.values())
        total = verdict.cost_s["total_s"]
        assert sum(phases.values()) == pytest.approx(total, rel=0.05, abs=0.05)
        # The candidate's first call, step by step, inside its first_call_s (the child's own laps)
        steps = [verdict.cost_s[f"first_{step}_s"] for step in ("inputs", "poison", "forward", "checks", "outputs")]
        assert all(value >= 0 for value in steps)
        assert sum(steps) <= verdict.cost_s["first_call_s"] + 1e-6


def test_the_cli_prints_the_phases_and_records_the_process_around_them(tmp_path):
    candidate = tmp_path / "cand.py"
    candidate.write_text(KERNEL.replace("PRELUDE", ""))
    problem = problem_file(tmp_path)
    done = subprocess.run([sys.executable, "-m", "kernelloop.cli", "verify", str(candidate), "--problem", str(problem.path),
                           "--device", "cpu", "--workspace", str(tmp_path / "ws"), "--json", "--timings", "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    cost = json.loads(done.stdout.strip().splitlines()[-1])["cost_s"]
    for key in ("process_start_s", "process_imports_s", "close_s", "wall_s", "phase_candidate_s", "total_s"):
        assert key in cost
    parts = cost["process_start_s"] + cost["process_imports_s"] + cost["total_s"] + cost["close_s"]
    assert parts <= cost["wall_s"] + 0.05
    assert parts == pytest.approx(cost["wall_s"], rel=0.15, abs=0.5)
    assert "phase" in done.stderr and "candidate" in done.stderr and "wall" in done.stderr
    # As the program it ends without the interpreter's teardown (cli/_program.finish): the exit code
    # and the whole verdict still come out, for a wrong candidate too.
    candidate.write_text(KERNEL.replace("PRELUDE", "").replace("tl.maximum(", "2.0 * tl.maximum("))  # its own kernel wrong
    done = subprocess.run([sys.executable, "-m", "kernelloop.cli", "verify", str(candidate), "--problem", str(problem.path),
                           "--device", "cpu", "--workspace", str(tmp_path / "ws"), "--json", "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 1 and json.loads(done.stdout.strip().splitlines()[-1])["status"] == "incorrect"


# --------------------------------------------------------------------------- workers


def test_workers_preload_by_role_and_later_modules_never_hold_up_the_first_job(tmp_path):
    zygote = Zygote("tests.verify.preload_probe", "cpu", tmp_path / "work", preload=("wave",),
                    preload_later=("xml.dom.minidom",), wait=False)
    try:
        assert zygote.start_s is None  # started, not waited for
        zygote.wait_ready()
        first = zygote.run({"kind": "probe"}, tmp_path / "work" / "j1", 30, 30).result
        second = zygote.run({"kind": "probe"}, tmp_path / "work" / "j2", 30, 30).result
    finally:
        zygote.close()
    assert "wave" in first["loaded"] and "xml.dom.minidom" not in first["loaded"]  # forked before the later imports
    assert {"wave", "xml.dom.minidom"} <= set(second["loaded"])  # forked after them
    # The job module's preload() ran once, in the zygote (not in either job), and each job inherited it
    assert first["preloaded_in"] == second["preloaded_in"] and len(first["preloaded_in"]) == 1
    assert first["preloaded_in"][0] not in (first["pid"], second["pid"])


def test_a_preload_that_fails_stops_the_worker_before_it_is_ready(tmp_path):
    """The job module's preload() runs in a thread beside the imports; what it raises still ends
    the zygote (a GPU worker whose preload touched CUDA must never fork jobs)."""
    from kernelloop.sandbox.runner import SandboxError

    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "preload_fails").write_text("")
    with pytest.raises(SandboxError, match="did not start"):
        Zygote("tests.verify.preload_probe", "cpu", tmp_path / "work")
    assert "preload failed on purpose" in (tmp_path / "work" / "zygote.log").read_text()


def test_preload_off_leaves_every_import_to_the_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLOOP_PRELOAD", "0")
    zygote = Zygote("tests.verify.preload_probe", "cpu", tmp_path / "work", preload=("wave",), preload_later=("tomllib",))
    try:
        results = [zygote.run({"kind": "probe"}, tmp_path / "work" / f"j{i}", 30, 30).result for i in range(2)]
    finally:
        zygote.close()
    assert all(not set(r["loaded"]) & {"wave", "tomllib"} and not r["preloaded_in"] for r in results)


def test_the_candidates_worker_never_preloads_the_compiler(tmp_path):
    v = verifier(tmp_path / "ws")
    assert "torch._inductor.compile_fx" not in v.layout.candidate.preload + v.layout.candidate.preload_later
    # What a dispatch mode's first entry imports, both workers have before their first job.
    assert "torch._dynamo" in v.layout.candidate.preload and "torch._dynamo" in v.layout.trusted.preload
    v.close()


def test_a_candidates_child_starts_with_what_the_op_recorder_imports(tmp_path):
    """Entering a TorchDispatchMode imports torch._dynamo the first time (seconds): the child of
    a candidate's job must find it already imported, not pay it in its first call."""
    probe = "import sys\nprint('dynamo at import:', 'torch._dynamo' in sys.modules)"
    with verifier(tmp_path / "ws", static_checks=False) as v:
        verdict = v.verify(Candidate(KERNEL.replace("PRELUDE", probe)), problem_file(tmp_path))
    assert verdict.status is Status.correct, verdict.reason
    assert "dynamo at import: True" in verdict.stdout_tail


# --------------------------------------------------------------------------- the trusted cache

RECORD = {"timings": {"compile": {"name": "compile", "median_ms": 0.5, "iqr_ms": 0.01, "min_ms": 0.49, "mean_ms": 0.5,
                                  "samples": 50, "over_eager": 0.5}},
          "eager": {"name": "eager", "median_ms": 1.0, "iqr_ms": 0.01, "min_ms": 0.99, "mean_ms": 1.0, "samples": 50},
          "compile_s": {"compile": 3.0}, "rounds": 50}

# In a fresh process: the Verifier's key and record for the problem; with "store", keep RECORD for it.
LOOKUP = r'''
import json, sys
from pathlib import Path
from kernelloop.problem import Problem
from kernelloop.tools.verify.verifier import Verifier
problem = Problem.from_file(sys.argv[1])
v = Verifier(device="cpu", workspace=Path(sys.argv[2]), time_it=False)
specs = [[[1024], "float32"]] * 4
key, asked, record = v.cached_baselines(problem, specs)
if sys.argv[3] == "store" and key:
    v.baseline_cache.store(key, json.loads(sys.argv[4]))
print(json.dumps({"key": key, "record": record, "note": v.layout.cache_note}))
v.close()
'''


def lookup(problem: Problem, workspace: Path, cache: Path, store: bool = False, sandbox: str = "auto") -> dict:
    env = {**os.environ, "KERNELLOOP_TRUSTED_CACHE": str(cache), "KERNELLOOP_SANDBOX": sandbox}
    done = subprocess.run([sys.executable, "-c", LOOKUP, str(problem.path), str(workspace), "store" if store else "load",
                           json.dumps(RECORD)], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_bwrap
def test_a_second_fresh_process_reuses_the_kept_baselines_and_says_so(tmp_path):
    problem = problem_file(tmp_path)
    cache = tmp_path / "trusted-cache"
    first = lookup(problem, tmp_path / "ws1", cache, store=True)
    assert first["key"] and first["record"] is None  # nothing kept yet: this one times and keeps
    second = lookup(problem, tmp_path / "ws2", cache)  # another process, another workspace
    assert second["key"] == first["key"] and second["record"]["timings"]["compile"]["median_ms"] == 0.5
    from kernelloop.records import Measurement
    from kernelloop.tools.verify.speed import judge_speed

    rounds = 60
    judged = judge_speed(Measurement(samples_ms={"candidate": [0.25] * rounds, "candidate_again": [0.25] * rounds,
                                                 "eager": [1.0] * rounds}))
    said = with_cached_baselines(judged, second["record"])
    assert said.speedups["compile"] == pytest.approx(said.speedup * 0.5)  # this run's eager speedup x the kept ratio
    assert said.timings["compile"].median_ms == 0.5
    assert any("compile baseline: cached, measured" in w for w in said.warnings)
    assert said.speedup == pytest.approx(4.0)  # the verdict's own speedup: measured here, never cached


@needs_bwrap
def test_changing_the_problem_source_invalidates_the_kept_baselines(tmp_path):
    cache = tmp_path / "trusted-cache"
    first = lookup(problem_file(tmp_path), tmp_path / "ws1", cache, store=True)
    changed = lookup(problem_file(tmp_path, extra="\n# a comment changes the source hash\n"), tmp_path / "ws2", cache)
    assert changed["key"] != first["key"] and changed["record"] is None


def test_a_record_that_is_not_this_keys_is_not_read(tmp_path):
    cache = trusted_cache.BaselineCache(tmp_path)
    cache.store("a" * 32, dict(RECORD))
    os.replace(cache.dir / f"{'a' * 32}.json", cache.dir / f"{'b' * 32}.json")  # renamed: its key says otherwise
    assert cache.load("b" * 32) is None and cache.load("a" * 32) is None
    (cache.dir / f"{'c' * 32}.json").write_text("{not json")
    assert cache.load("c" * 32) is None


def test_in_plain_mode_the_trusted_cache_is_off_and_says_why(tmp_path):
    result = lookup(problem_file(tmp_path), tmp_path / "ws", tmp_path / "trusted-cache", store=True, sandbox="plain")
    assert result["key"] is None and result["record"] is None and "plain" in result["note"]
    assert not (tmp_path / "trusted-cache" / "baselines").exists()


def test_the_trusted_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELLOOP_TRUSTED_CACHE", "off")
    v = verifier(tmp_path / "ws")
    assert v.baseline_cache is None and "off" in v.layout.cache_note
    assert v.trusted_cache_dir == tmp_path.resolve() / "ws" / "verifier" / "cache-cpu-trusted"
    v.close()


WRITER = '''
import pathlib
ROOT = pathlib.Path(CACHE)
for where in (ROOT / "baselines", ROOT / "compile-cpu", ROOT, ROOT / "pycache"):
    try:
        where.mkdir(parents=True, exist_ok=True)
        (where / "planted.json").write_text("{}")
        print("wrote", where)
    except OSError as exc:
        print("refused", where, type(exc).__name__)
try:  # a forged stamp would stop later runs from filling the dir (precompile.py): refused as well
    (ROOT / "pycache" / "precompiled.json").write_text('{"key": "forged"}')
    print("wrote stamp")
except OSError as exc:
    print("refused stamp", type(exc).__name__)
'''


@pytest.fixture
def kept_bytecode(tmp_path, monkeypatch) -> Path:
    """A trusted cache dir of its own, bubblewrap, and torch without bytecode (as on the GPU nodes'
    image): the trusted bytecode dir is then bound read-only into the candidates' sandbox, the one
    part of the trusted cache a candidate can see. Returns the trusted cache dir."""
    cache = tmp_path / "trusted-cache"
    monkeypatch.setenv("KERNELLOOP_TRUSTED_CACHE", str(cache))
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "bwrap")
    monkeypatch.setattr(trusted_cache, "installed_with_bytecode", lambda package="torch": False)
    return cache


@needs_bwrap
def test_a_candidate_cannot_write_the_trusted_cache(tmp_path, kept_bytecode):
    cache = kept_bytecode
    problem = problem_file(tmp_path)
    writer = KERNEL.replace("PRELUDE", WRITER.replace("CACHE", repr(str(cache))))
    with verifier(tmp_path / "ws", static_checks=False) as v:  # the boundary itself, not the lint
        assert v.baseline_cache is not None
        verdict = v.verify(Candidate(writer), problem)
    assert verdict.isolation == "bubblewrap"
    assert verdict.status is Status.correct, verdict.reason  # its kernel is still right, whatever it wrote
    # What it wrote (if anything) went to its sandbox's own throwaway tmpfs, never the trusted dir.
    assert not list(cache.rglob("planted.json"))
    assert f"refused {cache / 'pycache'} OSError" in verdict.stdout_tail  # read-only where it shows
    assert "refused stamp OSError" in verdict.stdout_tail and not (cache / "pycache" / "precompiled.json").exists()


@needs_bwrap
def test_a_candidate_cannot_plant_bytecode_for_the_trusted_worker(tmp_path, kept_bytecode):
    """tests/fixtures/cheats/plant_trusted_bytecode.py turns bytecode writing back on and writes a .pyc
    for a module the trusted worker imports later, into the dir its sandbox is handed to read."""
    cache = kept_bytecode
    attack = ROOT / "tests" / "fixtures" / "cheats" / "plant_trusted_bytecode.py"
    problem = Problem.from_file(ROOT / "tests" / "fixtures" / "problems" / "relu.py")
    with verifier(tmp_path / "ws", static_checks=False) as v:
        bytecode = v.layout.trusted.bytecode_dir
        verdict = v.verify(Candidate.from_file(attack), problem)
    assert bytecode is not None and verdict.isolation == "bubblewrap"
    assert verdict.status is Status.correct, verdict.reason
    assert "refused" in verdict.stdout_tail and "planted " not in verdict.stdout_tail  # it did try, and failed
    assert not list(cache.rglob("planted.pyc")) and not list(cache.rglob("compile_fx*.pyc"))


@needs_bwrap
def test_a_candidate_can_neither_forge_the_fill_stamp_nor_keep_its_lock(tmp_path, kept_bytecode):
    """tests/fixtures/cheats/hold_precompile_lock.py forges the kept bytecode's stamp and leaves a
    process holding the fill's lock (a real first run leaves the lock file there): the stamp is
    refused, and the lock is free again once the verdict is out."""
    import fcntl

    from kernelloop.tools.verify import precompile

    attack = ROOT / "tests" / "fixtures" / "cheats" / "hold_precompile_lock.py"
    problem = Problem.from_file(ROOT / "tests" / "fixtures" / "problems" / "relu.py")
    with verifier(tmp_path / "ws", static_checks=False) as v:
        bytecode = v.layout.trusted.bytecode_dir
        bytecode.mkdir(parents=True, exist_ok=True)
        (bytecode / precompile.LOCK).touch()
        verdict = v.verify(Candidate.from_file(attack), problem)
        assert verdict.status is Status.correct, verdict.reason
        assert "refused stamp OSError" in verdict.stdout_tail and "holding the lock" in verdict.stdout_tail
        assert not (bytecode / precompile.STAMP).exists()
        with open(bytecode / precompile.LOCK) as lock:  # raises BlockingIOError while anything of the job holds it
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_trusted_cache_is_on_by_default_only_with_bubblewrap(monkeypatch, tmp_path):
    from kernelloop.tools.verify.trusted_cache import trusted_cache_root

    monkeypatch.delenv("KERNELLOOP_TRUSTED_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root, _ = trusted_cache_root("bubblewrap")
    assert root == tmp_path.resolve() / "kernelloop" / "trusted"
    root, note = trusted_cache_root("plain")
    assert root is None and "plain" in note
    monkeypatch.setenv("KERNELLOOP_TRUSTED_CACHE", "on")
    assert trusted_cache_root("bubblewrap")[0] == tmp_path.resolve() / "kernelloop" / "trusted"


# --------------------------------------------------------------------------- bytecode


def test_a_trusted_worker_keeps_bytecode_and_a_candidates_worker_only_reads_it(tmp_path, monkeypatch):
    """Where torch has no .pyc (the H100 node's image), each new worker compiled every module from
    source. A trusted worker keeps what it compiles in its bytecode dir; a candidates' worker reads
    from the same dir, writes nothing there (read-only in its sandbox) and nothing anywhere else."""
    source = tmp_path / "work" / "src"  # inside the worker's dir: visible in its sandbox
    source.mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", f"{source}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    bytecode = tmp_path / "trusted" / "pycache"
    tag = sys.implementation.cache_tag

    def start(module: str, writes: bool | None) -> None:
        (source / f"{module}.py").write_text("VALUE = 1\n")
        cache = bytecode.parent if writes else tmp_path / "cache"  # as in workers.layout: the trusted cache holds it
        Zygote("tests.verify.preload_probe", "cpu", tmp_path / "work", cache_dir=cache, preload=(module,),
               bytecode_dir=None if writes is None else bytecode, bytecode_writes=bool(writes)).close()

    def written(module: str) -> list[str]:
        return sorted(p.name for p in tmp_path.rglob(f"{module}*.pyc"))

    start("probe_not_cached", None)
    assert written("probe_not_cached") == []
    start("probe_cached", True)
    assert [p.name for p in bytecode.rglob("probe_cached*.pyc")] == [f"probe_cached.{tag}.pyc"]
    start("probe_read_only", False)
    assert written("probe_read_only") == []


def test_only_an_install_without_bytecode_gets_a_bytecode_cache(tmp_path, monkeypatch):
    from kernelloop.tools.verify.trusted_cache import installed_with_bytecode

    package = tmp_path / "pkg_without_pyc"
    package.mkdir()
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert not installed_with_bytecode("pkg_without_pyc")
    import py_compile

    py_compile.compile(str(package / "__init__.py"), cfile=str(package / "__pycache__" /
                                                                  f"__init__.{sys.implementation.cache_tag}.pyc"))
    assert installed_with_bytecode("pkg_without_pyc")
    assert installed_with_bytecode("no_such_package_here")


@needs_bwrap
def test_the_bytecode_cache_is_only_where_the_trusted_cache_is(tmp_path, monkeypatch):
    from kernelloop.tools.verify import workers

    monkeypatch.setattr(trusted_cache, "installed_with_bytecode", lambda package="torch": False)
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "auto")
    for setting, expected in (("off", False), (str(tmp_path / "trusted"), True)):
        monkeypatch.setenv("KERNELLOOP_TRUSTED_CACHE", setting)
        made = workers.layout("cpu", tmp_path / "ws", None, True, False)
        assert (made.trusted.bytecode_dir is not None) is expected and made.trusted.bytecode_writes
        assert made.candidate.bytecode_dir == made.trusted.bytecode_dir
        assert not made.candidate.bytecode_writes  # a candidates' worker never writes bytecode
        # so the trusted worker compiles the candidates' worker's preloads into the dir, in the background
        assert (set(made.candidate.preload) <= set(made.trusted.preload + made.trusted.preload_later)) is expected
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain")  # a candidate could write any dir: no trusted cache, no bytecode
    made = workers.layout("cpu", tmp_path / "ws", None, True, False)
    assert made.trusted.bytecode_dir is None and made.candidate.bytecode_dir is None


def test_a_problem_or_candidate_file_is_never_run_from_stale_bytecode(tmp_path, monkeypatch):
    """With bytecode kept (a trusted worker's PYTHONPYCACHEPREFIX), a .pyc is matched by its source's
    mtime in whole seconds and its size: a file edited within the same second at the same size must
    still run as it is now."""
    from kernelloop.problem import import_source

    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pycache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "edited.py"
    path.write_text("VALUE = 1\n")
    stamp = path.stat().st_mtime_ns
    first = import_source(path, "kernelloop_edited_probe")
    import py_compile

    py_compile.compile(str(path))  # even a .pyc of the old text where the prefix would have it
    path.write_text("VALUE = 2\n")  # the same size
    os.utime(path, ns=(stamp, stamp))  # and the same mtime
    assert (first.VALUE, import_source(path, "kernelloop_edited_probe").VALUE) == (1, 2)


@needs_bwrap
def test_the_cli_process_imports_from_the_bytecode_the_trusted_side_keeps(tmp_path):
    """Run as the program, the CLI takes the trusted cache's bytecode dir before typer, pydantic or
    torch load, where torch has no .pyc of its own: a module whose .pyc is only there runs from it
    (compiled here from other text of the same size and mtime, so which one ran shows), and what it
    compiles is written there, PYTHONDONTWRITEBYTECODE or not. Not for --help, not with a prefix the
    user set, not in plain mode, not where another program imports the package."""
    source = tmp_path / "src" / "probe_parent.py"
    source.parent.mkdir()
    source.write_text("ORIGIN = 'source'\n")
    bytecode = tmp_path / "trusted" / "pycache"
    script = textwrap.dedent(f'''
        import importlib.util, os, py_compile, sys
        from pathlib import Path
        from kernelloop.tools.verify import trusted_cache
        trusted_cache.installed_with_bytecode = lambda package="torch": False  # as on the H200 node's image
        source = Path({str(source)!r})
        other = source.with_name("other.py")
        other.write_text("ORIGIN = 'cached'\\n")  # as long as the source's text
        os.utime(other, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns))
        prefix, sys.pycache_prefix = sys.pycache_prefix, {str(bytecode)!r}
        py_compile.compile(str(other), cfile=importlib.util.cache_from_source(str(source)))  # as kept before
        other.unlink()
        sys.pycache_prefix = prefix
        sys.argv[:] = sys.argv[1:]  # as the program would see it: [kernelloop, verify, ...]
        import kernelloop.cli
        sys.path.insert(0, str(source.parent))
        import probe_parent
        print(sys.pycache_prefix, probe_parent.ORIGIN, bool(list(Path({str(bytecode)!r}).rglob("typer/*.pyc"))))
    ''')
    base = {**os.environ, "KERNELLOOP_TRUSTED_CACHE": str(tmp_path / "trusted"), "KERNELLOOP_SANDBOX": "auto",
            "PYTHONDONTWRITEBYTECODE": "1"}
    base.pop("PYTHONPYCACHEPREFIX", None)

    def run(*argv: str, **env: str) -> list[str]:
        done = subprocess.run([sys.executable, "-c", script, *argv], env={**base, **env}, capture_output=True,
                              text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()

    assert run("kernelloop", "verify", "x.py") == [str(bytecode), "cached", "True"]
    assert run("-m", "doctor") == [str(bytecode), "cached", "True"]  # python -m kernelloop.cli
    assert run("kernelloop", "--help")[:2] == ["None", "source"]
    assert run("pytest", "-q")[:2] == ["None", "source"]  # imported by another program
    user = tmp_path / "user-prefix"
    assert run("kernelloop", "verify", PYTHONPYCACHEPREFIX=str(user))[:2] == [str(user), "source"]
    assert run("kernelloop", "verify", KERNELLOOP_SANDBOX="plain")[:2] == ["None", "source"]


def test_the_trusted_cache_is_never_inside_a_candidates_work_dir(tmp_path, monkeypatch):
    """Told by the path alone (the CLI asks before it knows the workspace): WORKSPACE/verifier/cuda0
    and the like are where candidates write."""
    for inside in ("ws/verifier/cuda0/cache", "ws/verifier/cpu", "ws/verifier/cuda/x"):
        monkeypatch.setenv("KERNELLOOP_TRUSTED_CACHE", str(tmp_path / inside))
        assert trusted_cache.trusted_cache_root("bubblewrap")[0] is None
    for fine in ("ws/verifier/cuda0-trusted/x", "ws/verifier-cache", "trusted"):
        monkeypatch.setenv("KERNELLOOP_TRUSTED_CACHE", str(tmp_path / fine))
        assert trusted_cache.trusted_cache_root("bubblewrap")[0] == (tmp_path / fine).resolve()


# --------------------------------------------------------------------------- baselines built ahead


class _Rounds:
    def __init__(self, fns: dict, sets: int):
        self.fns = fns

    def warm(self) -> float:
        return 0.0


def test_the_trusted_job_builds_the_baselines_ahead_once_and_timing_reuses_them(tmp_path, monkeypatch):
    """warm_up with `build` (sent while the candidate runs) builds the baselines, torch.compile's
    first call included, on the sets just made; the timing request then reuses them. A later
    warm_up builds nothing, a skip list is passed on (cached compile times), and without `build`
    only the compiler is imported. The GPU parts (events, the compiled call) are replaced here;
    tests/gpu/test_cold_path_gpu.py runs the real ones."""
    from kernelloop.tools.profile import measure, timing
    from kernelloop.tools.verify.reference_job import ReferenceJob

    builds: list[list[str]] = []

    def callables(problem, device, sets, seed, full, with_compile=True):
        builds.append([] if with_compile else ["compile"])
        return {"eager": lambda i: None}, {"compile": 1.0} if with_compile else {}, None

    monkeypatch.setattr(measure, "baseline_callables", callables)
    monkeypatch.setattr(measure, "roofline_of", lambda eager, sets: {})
    monkeypatch.setattr(timing, "rounds_on", lambda device, fns, n, **hooks: _Rounds(fns, n))
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "test")
    path = problem_file(tmp_path).path

    def made(job: ReferenceJob) -> None:
        job.make({"seeds": [1, 2], "variants": True, "inputs_path": str(tmp_path / "in.sets"),
                  "outputs_path": str(tmp_path / "out.sets")})

    job = ReferenceJob({"device": "cpu", "problem_path": str(path)})
    made(job)
    answer = job.warm_up({"build": True, "skip": []})
    assert builds == [[]] and "build_s" in answer
    assert job.setup_timing({"skip": []})["compile_s"] == {"compile": 1.0} and builds == [[]]
    made(job)  # the next verification of the same problem
    assert "build_s" not in job.warm_up({"build": True, "skip": []}) and builds == [[]]

    skipped = ReferenceJob({"device": "cpu", "problem_path": str(path)})
    made(skipped)
    skipped.warm_up({"build": True, "skip": ["compile"]})
    assert builds == [[], ["compile"]]
    only_imports = ReferenceJob({"device": "cpu", "problem_path": str(path)})
    made(only_imports)
    assert "build_s" not in only_imports.warm_up({"skip": []}) and len(builds) == 2
    only_imports.setup_timing({"skip": []})  # built when timing asks, as before
    assert len(builds) == 3


def test_verify_without_a_device_still_prestarts_the_workers_it_will_use(tmp_path, monkeypatch):
    """`kernelloop verify` with no --device (auto) guesses the device without torch, by NVML, so its
    workers start beside its own imports too; where CUDA_VISIBLE_DEVICES hides every GPU, the CPU's."""
    from kernelloop.cli import verify_cmd
    from kernelloop.tools.profile import gpu
    from kernelloop.tools.verify import workers

    started: list[tuple] = []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(workers, "prestart", lambda device, ws, index, **kw: started.append((device, index)))
    for count, expected in ((0, ("cpu", None)), (2, ("cuda", 0))):
        monkeypatch.setattr(gpu, "_nvml", lambda count=count: (_FakeNvml(count), ""))
        verify_cmd.prestart_workers("auto", tmp_path, True)
        assert started[-1] == expected
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    verify_cmd.prestart_workers("auto", tmp_path, True)
    assert started[-1] == ("cpu", None)


class _FakeNvml:
    NVMLError = RuntimeError

    def __init__(self, count: int):
        self.count = count

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlShutdown(self) -> None:
        pass


def test_only_the_candidates_workers_standby_builds_tritons_driver_ahead(tmp_path):
    """Candidate jobs compile into empty caches of their own, so each standby builds Triton's driver
    helpers ahead for its job (harness.prepare, told by the worker's environment); the trusted
    worker's jobs read them from its kept cache and never wait for that."""
    from kernelloop.sandbox.runner import PER_JOB_CACHE_ENV, scrubbed_env

    assert scrubbed_env("cuda", tmp_path, 0, per_job_cache=True)[PER_JOB_CACHE_ENV] == "1"
    assert PER_JOB_CACHE_ENV not in scrubbed_env("cuda", tmp_path, 0)
    v = verifier(tmp_path / "ws")
    assert v.layout.candidate.per_job_cache and not v.layout.trusted.per_job_cache
    v.close()
