"""Fill the kept bytecode dir at once, on the spare cores, the first time it is used.

Where torch came without .pyc files (the GPU nodes' image), a verification's first run had three
processes compile the same ~2,500 modules from source, each one at a time: the CLI (3.9 s of
imports instead of 1.6) and the two sandbox workers (7.5-9.7 s to be ready instead of 3;
docs/results/h200_cold_verify_2/). Here one background process, started as the first run begins,
compiles the installed code with every core the importers leave free, into the dir they all read
(trusted_cache.py, "Bytecode"), in the order they need it: what the CLI imports first, then the
standard library and torch's own requirements, then the rest of kernelloop's. Whatever it has
written when an importer gets to a module is read, not compiled again; what it has not, the
importer compiles as before, so it can only save time, never change what runs: a .pyc is the
same bytes whoever writes it (py_compile and importlib share the writer), and each is checked
against its source's mtime and size when it is read.

It runs once per environment: a stamp in the dir (Python's version, torch's location and
install time) says it is done. It needs at least MIN_CORES cores (below that the importers
have none to spare); KERNELLOOP_PRECOMPILE=0 turns it off.

Trusted side only: it reads installed code and writes the trusted cache, which no candidate can
write (its worker binds the dir read-only), and it never imports what it compiles.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rest is imported where used: the CLI calls start() before it imports anything
    import subprocess
    from collections.abc import Iterator
    from importlib.metadata import Distribution

ENV = "KERNELLOOP_PRECOMPILE"
STAMP = "precompiled.json"
LOCK = ".precompile.lock"
MIN_CORES = 6  # the CLI and two workers import at once; the rest compile for them
IMPORTERS = 3
# What the CLI imports before torch (these alone), then what torch imports (with all they
# require), then the rest of kernelloop's requirements (for `solve`: LangGraph and the model client).
FIRST = ("typer", "click", "rich", "pydantic", "pydantic-core", "pydantic-settings", "annotated-types",
         "typing-extensions", "typing-inspection")
THEN = ("torch", "triton", "numpy", "nvidia-ml-py")
LAST = ("kernelloop",)
SKIPPED_DIRS = {"test", "tests", "__pycache__", "site-packages", "dist-packages", "idlelib", "tkinter",
                "turtledemo", "lib2to3", "ensurepip", "pydoc_data"}

_started = False


def stamp_key() -> str | None:
    """What the stamp must say for this environment: Python's version and torch's __init__.py (its
    path, mtime and size, which any reinstall changes). None without torch."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    found = os.stat(spec.origin)
    return f"{sys.version}|{spec.origin}|{found.st_mtime_ns}|{found.st_size}"


def done(bytecode_dir: Path) -> bool:
    """Whether the dir holds this environment's stamp."""
    try:
        stamp = json.loads((bytecode_dir / STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("key") == stamp_key()


def cores() -> int:
    return len(os.sched_getaffinity(0))


def start(bytecode_dir: Path | None, min_cores: int = MIN_CORES) -> subprocess.Popen | None:
    """Start filling `bytecode_dir` in the background, once per process and only where it is not
    done yet and enough cores are free. Never waits for it; None where it did not start."""
    global _started
    if (bytecode_dir is None or _started or os.environ.get(ENV, "1") == "0"
            or cores() < min_cores or done(bytecode_dir)):
        return None
    import subprocess

    _started = True
    bytecode_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(bytecode_dir)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # its own imports' bytecode goes to the dir as well
    try:
        # Its own session: a Ctrl-C meant for the command does not cut it short (it ends in seconds).
        return subprocess.Popen([sys.executable, "-m", __name__, str(bytecode_dir)], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None


def _distributions(names: tuple[str, ...]) -> list[Distribution]:
    """The installed distributions `names` need, themselves first, then what they require (extras
    left out), breadth first: the order in which an import of them meets their code."""
    import importlib.metadata
    import re

    found: dict[str, Distribution] = {}
    queue = list(names)
    while queue:
        name = re.sub(r"[-_.]+", "-", queue.pop(0)).lower()
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[name] = dist
        for requirement in dist.requires or []:
            head = re.match(r"[A-Za-z0-9._-]+", requirement)
            if head and "extra ==" not in requirement.replace('"', "").replace("'", ""):
                queue.append(head.group(0))
    return list(found.values())


def _wanted(path: Path) -> bool:
    return path.suffix == ".py" and not SKIPPED_DIRS & set(path.parts[:-1])


def _walk(root: Path) -> list[Path]:
    files = []
    for here, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        files += [Path(here, name) for name in sorted(names) if name.endswith(".py")]
    return files


def _files_of(dist: Distribution) -> list[Path]:
    """Its source files, shallow first: a package's __init__ imports its own top level before
    what lies deeper (the record lists them by name)."""
    files = sorted((Path(str(f)) for f in dist.files or [] if _wanted(Path(str(f)))), key=lambda f: (len(f.parts), f))
    return [Path(str(dist.locate_file(f))) for f in files]


def _package_dir(name: str) -> list[Path]:
    """A package found on the path but not installed as a distribution (kernelloop from a source
    tree, on PYTHONPATH)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return []
    return [f for location in spec.submodule_search_locations for f in _walk(Path(location))]


def source_files() -> Iterator[Path]:
    """Every source file to compile, each once, in the order the importers need them; yielded as
    found, so compiling the first starts while the rest are still being listed (reading every
    distribution's record takes a while)."""
    import importlib.metadata
    import sysconfig

    def tiers() -> Iterator[list[Path]]:
        for name in FIRST:
            with contextlib.suppress(importlib.metadata.PackageNotFoundError):
                yield _files_of(importlib.metadata.distribution(name))
        yield _package_dir("kernelloop")
        yield _walk(Path(sysconfig.get_paths()["stdlib"]))
        for group in (THEN, LAST):
            for dist in _distributions(group):
                yield _files_of(dist)

    seen: set[Path] = set()
    for files in tiers():
        for source in files:
            if source not in seen:
                seen.add(source)
                yield source


def _fresh(source: Path, compiled: str) -> bool:
    """Whether `compiled` already holds `source`'s bytecode (the header importlib checks: this
    Python's magic number, timestamp mode, the source's mtime in seconds and its size)."""
    try:
        with open(compiled, "rb") as handle:
            header = handle.read(16)
        found = source.stat()
    except OSError:
        return False
    return (header[:4] == importlib.util.MAGIC_NUMBER and header[4:8] == b"\0\0\0\0"
            and int.from_bytes(header[8:12], "little") == int(found.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == found.st_size & 0xFFFFFFFF)


def compile_file(source: Path) -> bool:
    """Compile one file into sys.pycache_prefix, where the importers will look; False where it
    could not (a file of another Python's syntax, say: an importer would fail on it as well)."""
    import py_compile

    compiled = importlib.util.cache_from_source(str(source))
    if _fresh(source, compiled):
        return True
    try:
        py_compile.compile(str(source), cfile=compiled, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    except (py_compile.PyCompileError, OSError, ValueError, SyntaxError):
        return False
    return True


def fill(bytecode_dir: Path, workers: int, files: list[Path] | None = None) -> dict:
    """Compile `files` (by default all, in order) into `bytecode_dir` with `workers` processes,
    then write the stamp. Returns what the stamp says."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    started = time.perf_counter()
    if sys.pycache_prefix != str(bytecode_dir):
        raise RuntimeError(f"run with PYTHONPYCACHEPREFIX={bytecode_dir} (it is {sys.pycache_prefix})")
    listed = 0

    def counted() -> Iterator[Path]:
        nonlocal listed
        for source in source_files() if files is None else files:
            listed += 1
            yield source

    # Forked workers share this process's prefix. Chunks go out in order as they are listed: the
    # first files compile while later ones are still being found.
    with ProcessPoolExecutor(max(1, workers), mp_context=get_context("fork")) as pool:
        compiled = sum(pool.map(compile_file, counted(), chunksize=16))
    stamp = {"key": stamp_key(), "files": listed, "compiled": compiled, "workers": workers,
             "seconds": round(time.perf_counter() - started, 2), "finished_at": time.time()}
    temporary = bytecode_dir / f".{STAMP}.{os.getpid()}"
    temporary.write_text(json.dumps(stamp))
    os.replace(temporary, bytecode_dir / STAMP)
    return stamp


def main(argv: list[str]) -> int:
    import fcntl

    bytecode_dir = Path(argv[0])
    with open(bytecode_dir / LOCK, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process fills it now
            return 0
        if done(bytecode_dir):
            return 0
        with contextlib.suppress(OSError):
            os.nice(5)  # the importers come first: they are the critical path, this only runs ahead of them
        fill(bytecode_dir, cores() - IMPORTERS)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
