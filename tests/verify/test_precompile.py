"""The kept bytecode dir filled ahead of the importers (kernelloop/tools/verify/precompile.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelloop.tools.verify import precompile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def package(tmp_path) -> Path:
    """A small package without bytecode, and a prefix dir to compile it into."""
    source = tmp_path / "src" / "probe_pkg"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("from probe_pkg import inner\nVALUE = inner.VALUE + 1\n")
    (source / "inner.py").write_text("VALUE = 41\n")
    (source / "py2_only.py").write_text("print 'not python 3'\n")  # some packages ship such files
    return source


@pytest.fixture
def prefix(tmp_path, monkeypatch) -> Path:
    where = tmp_path / "pycache"
    where.mkdir()
    monkeypatch.setattr(sys, "pycache_prefix", str(where))
    return where


def imports_with_prefix(source: Path, prefix: Path, value: int = 42) -> list[str]:
    """Import the package in a fresh process that writes its bytecode to `prefix`; the package's
    .pyc files that process wrote (any it compiled itself)."""
    mirror = Path(str(prefix) + str(source))  # where a prefix keeps this dir's bytecode

    def found() -> dict:
        return {p: p.stat().st_mtime_ns for p in mirror.rglob("*.pyc")}

    before = found()
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix), "PYTHONPATH": str(source.parent)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-c", "import probe_pkg; print(probe_pkg.VALUE)"], env=env,
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(value)  # the source as it is now
    return sorted(p.name for p, stamp in found().items() if before.get(p) != stamp)


def test_what_it_compiles_an_importer_reads_and_does_not_compile_again(package, prefix):
    files = sorted(package.glob("*.py"))
    stamp = precompile.fill(prefix, workers=2, files=files)
    assert stamp["files"] == 3 and stamp["compiled"] == 2  # the Python 2 file is skipped, not fatal
    assert stamp["key"] == precompile.stamp_key() and precompile.done(prefix)
    assert imports_with_prefix(package, prefix) == []  # every module it needed was there, valid
    # The control: with nothing compiled ahead, the same import writes both modules itself.
    for pyc in prefix.rglob("*.pyc"):
        pyc.unlink()
    assert imports_with_prefix(package, prefix) == sorted(
        f"{name}.{sys.implementation.cache_tag}.pyc" for name in ("__init__", "inner"))


def test_a_changed_source_is_compiled_again_and_a_fresh_one_is_left(package, prefix):
    inner = package / "inner.py"
    assert precompile.compile_file(inner)
    compiled = Path(importlib.util.cache_from_source(str(inner)))
    first = compiled.stat().st_mtime_ns
    assert precompile.compile_file(inner) and compiled.stat().st_mtime_ns == first  # fresh: not rewritten
    inner.write_text("VALUE = 43\n")  # the same size, a later mtime
    os.utime(inner, (inner.stat().st_atime + 5, inner.stat().st_mtime + 5))
    assert precompile.compile_file(inner) and compiled.stat().st_mtime_ns != first
    # only the package's __init__ (never compiled here) is compiled by the importer
    assert imports_with_prefix(package, prefix, value=44) == [f"__init__.{sys.implementation.cache_tag}.pyc"]
    assert precompile._fresh(inner, str(compiled))


def test_it_compiles_in_the_order_the_importers_need(monkeypatch):
    files = list(precompile.source_files())
    names = [str(f) for f in files]
    assert len(names) == len(set(names))  # each once
    assert not [f for f in files if {"tests", "test"} & set(f.parts[:-1]) and "site-packages" in f.parts]

    def first(fragment: str) -> int:
        return next(i for i, name in enumerate(names) if fragment in name)

    torch_init = str(Path(importlib.util.find_spec("torch").origin))
    # the CLI's own imports, then kernelloop, the standard library and torch, shallow modules first
    assert first(f"{os.sep}typer{os.sep}") < first(f"kernelloop{os.sep}cli") < first(f"{os.sep}json{os.sep}__init__.py")
    assert first(f"{os.sep}json{os.sep}__init__.py") < names.index(torch_init) < first(f"torch{os.sep}_inductor{os.sep}")
    assert names.index(torch_init) < first(f"{os.sep}sympy{os.sep}") < first(f"{os.sep}langgraph{os.sep}")


def test_it_starts_once_only_where_it_helps(tmp_path, monkeypatch):
    monkeypatch.setattr(precompile, "_started", False)
    started = []
    monkeypatch.setattr("subprocess.Popen", lambda command, **kw: started.append((command, kw)) or "process")
    monkeypatch.setattr(precompile, "cores", lambda: 16)
    assert precompile.start(None) is None  # no bytecode kept here
    monkeypatch.setenv(precompile.ENV, "0")
    assert precompile.start(tmp_path / "a") is None
    monkeypatch.delenv(precompile.ENV)
    assert precompile.start(tmp_path / "a", min_cores=17) is None  # too few cores to spare
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / precompile.STAMP).write_text(json.dumps({"key": precompile.stamp_key()}))
    assert precompile.start(tmp_path / "done") is None  # this environment's stamp is there
    assert precompile.start(tmp_path / "a") == "process" and precompile.start(tmp_path / "b") is None  # once
    (command, options), = started
    assert command[1:] == ["-m", "kernelloop.tools.verify.precompile", str(tmp_path / "a")]
    assert options["env"]["PYTHONPYCACHEPREFIX"] == str(tmp_path / "a") and "PYTHONDONTWRITEBYTECODE" not in options["env"]
    assert options["start_new_session"]


def test_another_environments_stamp_is_not_done(tmp_path):
    (tmp_path / precompile.STAMP).write_text(json.dumps({"key": "3.11.0|/elsewhere/torch/__init__.py|1|2"}))
    assert not precompile.done(tmp_path)
    (tmp_path / precompile.STAMP).write_text("{not json")
    assert not precompile.done(tmp_path)


def test_the_program_compiles_nothing_while_another_holds_the_lock_or_the_stamp_is_there(tmp_path):
    import fcntl

    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "kernelloop.tools.verify.precompile", str(tmp_path)]
    with open(tmp_path / precompile.LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(command, env=env, check=True, timeout=60)
    (tmp_path / precompile.STAMP).write_text(json.dumps({"key": precompile.stamp_key()}))
    subprocess.run(command, env=env, check=True, timeout=60)
    assert [p.name for p in tmp_path.rglob("*.pyc") if "precompile" not in p.name] == []  # compiled nothing


def test_the_program_fills_the_dir_and_stamps_it(package, prefix, monkeypatch):
    monkeypatch.setattr(precompile, "source_files", lambda: iter(sorted(package.glob("*.py"))))
    monkeypatch.setattr(precompile, "cores", lambda: 5)  # two workers beside three importers
    assert precompile.main([str(prefix)]) == 0
    stamp = json.loads((prefix / precompile.STAMP).read_text())
    assert stamp["workers"] == 2 and stamp["compiled"] == 2 and precompile.done(prefix)
    assert imports_with_prefix(package, prefix) == []


def test_the_cli_fills_only_for_a_command_that_verifies(tmp_path):
    """Where torch has no bytecode of its own and bubblewrap runs (the GPU nodes), `kernelloop verify`
    starts the precompile at once; `runs` does not. Told here by the kernelloop process's own log of
    what it started, so the test needs neither that install nor the cores."""
    probe = tmp_path / "probe.py"
    probe.write_text(f"""
import sys
sys.argv = ["kernelloop", *sys.argv[1:]]
from kernelloop.tools.verify import precompile, trusted_cache
trusted_cache.kept_bytecode_dir = lambda root: {str(tmp_path / 'kept')!r}
precompile.start = lambda where, **kw: print("precompile", where)
trusted_cache.use_kept_bytecode = lambda where: False
import kernelloop.cli
""")
    ran = {command: subprocess.run([sys.executable, str(probe), command, "--help" if command == "help" else "x"],
                                   capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
           for command in ("verify", "runs", "help")}
    assert f"precompile {tmp_path / 'kept'}" in ran["verify"].stdout
    assert "precompile" not in ran["runs"].stdout and "precompile" not in ran["help"].stdout
