"""What the trusted side keeps across processes, and where: torch.compile's caches for the
trusted job, and the torch.compile baselines' timings (not the reference's outputs).

Where. One dir per user (~/.cache/kernelloop/trusted by default, or KERNELLOOP_TRUSTED_CACHE=DIR; on by
default since a cache hit's path was measured on a GPU, docs/results/h200_cold_verify/), used only
where the candidates' sandbox is bubblewrap: there it is hidden from every candidate job (the home
dir is a tmpfs in their sandbox, and the dir is hidden by name as well), and only the trusted
worker mounts it writable. In plain mode a candidate runs as the same user with the same
filesystem, so it could write any dir the trusted side would later read: the cache is off there
(compile caches stay in the workspace, per workspace, as before) and the verdict says why.
KERNELLOOP_TRUSTED_CACHE=off turns it off everywhere.

What. A baseline record holds the torch.compile baselines' times (and eager's, from the same
rounds of the trusted job, timed after the candidate's process group was killed), keyed by
everything that changes them: the problem's source hash, the shapes and dtypes of its outputs,
the GPU's name, the driver, torch, triton and Python versions, and which baselines were asked.
A verification with a record skips torch.compile; eager is still timed against the candidate in
the same rounds (the verdict's speedup and win come only from that), and the speedup over a
cached baseline is this run's speedup over eager times the recorded baseline/eager ratio,
labelled as cached with when it was measured.

Not the reference's outputs: they are made on fresh secret seeds for every verification, so a
cache of them would either never hit or need seeds used again, and inputs a candidate has seen
before let it serve answers it kept (a plain-mode candidate can keep files anywhere), which is
what the fresh seeds and the fresh-input check exist to stop.

Bytecode. Where torch was installed without .pyc files (uv installs, images that set
PYTHONDONTWRITEBYTECODE, such as the H200 nodes' image), every new process compiled each module it
imports from source: seconds per process. The trusted side keeps that bytecode in ROOT/pycache:
the trusted worker and the CLI's own process write it (importlib's atomic writes), the candidates'
worker reads it through a read-only bind and writes nothing. A planted .pyc would run in the
trusted processes, so it lives only where the trusted cache does (never in plain mode). Its first
use fills it on the spare cores, ahead of the importers (precompile.py).

No torch here: the CLI reads the policy before torch is imported.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import sys
import time
from pathlib import Path

TRUSTED_CACHE_ENV = "KERNELLOOP_TRUSTED_CACHE"
RECORD_VERSION = 2  # 2: baselines timed at the declared precision (hold_declared_precision)
RECORD_LIMIT_BYTES = 1 << 20
CACHED_NAMES = ("compile", "compile_max_autotune")  # the baselines whose making costs a compile


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def trusted_cache_root(mode: str, candidate_root: Path | None = None) -> tuple[Path | None, str]:
    """(the trusted cache dir, or None when it is off; a note saying which and why)."""
    raw = os.environ.get(TRUSTED_CACHE_ENV, "").strip()
    if raw.lower() in ("off", "0", "no", "none", "false"):
        return None, f"trusted cache off ({TRUSTED_CACHE_ENV}={raw})"
    if mode != "bubblewrap":
        return None, ("trusted cache off: the candidates' sandbox is plain, so a candidate could write any dir "
                      "the trusted side would read (install bubblewrap to reuse baselines across processes)")
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kernelloop" / "trusted"
    root = base.resolve() if raw.lower() in ("", "on") else Path(raw).expanduser().resolve()
    if candidate_root is not None and (_within(root, candidate_root.resolve()) or _within(candidate_root.resolve(), root)):
        return None, f"trusted cache off: {root} overlaps the candidates' work dir {candidate_root}"
    # Inside any workspace's candidates' dir (WORKSPACE/verifier/cpu, .../cuda0, .../cuda0-w1): candidates write
    # there. Told by the path alone, for the CLI's early bytecode use, before the workspace is known.
    parts = root.parts
    if any(a == "verifier" and re.fullmatch(r"(cpu|cuda)\d*(-w\d+)?", b) for a, b in zip(parts, parts[1:])):
        return None, f"trusted cache off: {root} is inside a candidates' work dir (WORKSPACE/verifier/DEVICE)"
    return root, f"trusted cache: {root}"


def installed_with_bytecode(package: str = "torch") -> bool:
    """Whether `package` was installed with its bytecode compiled (pip's default). Found without
    importing the package (the CLI asks before its own torch import)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return True  # nothing to cache
    source = Path(spec.origin)
    return (source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc").is_file()


def kept_bytecode_dir(root: Path | None) -> Path | None:
    """ROOT/pycache where the trusted cache is on (`root`) and torch has no bytecode of its own; else None."""
    return root / "pycache" if root is not None and not installed_with_bytecode() else None


def use_kept_bytecode(bytecode_dir: Path | None) -> bool:
    """This trusted process imports from and writes to the kept bytecode dir from now on (importlib
    reads sys.pycache_prefix at each import): 2.3-3 s of a cold verify's parent on an H200 node. It
    writes only there, whatever PYTHONDONTWRITEBYTECODE says: that flag keeps .pyc files out of
    source trees, and the prefix sends every write to kernelloop's own cache instead. A prefix the
    user set (PYTHONPYCACHEPREFIX) is left alone. Returns whether it took the dir."""
    if bytecode_dir is None or sys.pycache_prefix is not None:
        return False
    sys.pycache_prefix = str(bytecode_dir)
    sys.dont_write_bytecode = False
    return True


def use_kept_bytecode_early(fill: bool = False) -> bool:
    """For the CLI, before it imports typer, pydantic or torch: the kept bytecode dir, if the
    trusted cache is on here (no torch needed to tell). With `fill` (a command that will verify),
    the spare cores start compiling into it now, where that was never done (precompile.py)."""
    from kernelloop.sandbox.isolation import choose_mode

    try:
        mode, _ = choose_mode(None)
        root, _ = trusted_cache_root(mode)
    except Exception:  # noqa: BLE001 - a bad setting is reported by the command itself, later
        return False
    bytecode_dir = kept_bytecode_dir(root)
    if fill:
        from kernelloop.tools.verify import precompile

        precompile.start(bytecode_dir)
    return use_kept_bytecode(bytecode_dir)


def versions() -> dict[str, str]:
    import torch
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__, "python": sys.version.split()[0]}


def gpu_conditions(device_index: int) -> dict[str, str]:
    """The GPU's name and the driver, as torch and NVML see them."""
    import torch

    conditions = {"gpu": torch.cuda.get_device_name(device_index), "cuda": str(torch.version.cuda)}
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = pynvml.nvmlSystemGetDriverVersion()
            conditions["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML: the key holds no driver, so it never matches one that had it
        conditions["driver"] = "unknown"
    return conditions


def baseline_key(problem_sha256: str, output_specs: list, conditions: dict, asked: list[str]) -> str:
    """A hash of everything that changes the baselines' times."""
    what = {"version": RECORD_VERSION, "problem": problem_sha256, "outputs": output_specs, "conditions": conditions,
            "asked": sorted(asked)}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:32]


class BaselineCache:
    """Baseline records under ROOT/baselines, one JSON file per key; written and read by the parent only."""

    def __init__(self, root: Path):
        self.dir = Path(root) / "baselines"

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def load(self, key: str) -> dict | None:
        """The record for `key`, or None (missing, unreadable, or not the record of this key)."""
        from kernelloop.sandbox.safe_io import open_bounded

        path = self._path(key)
        try:
            with open_bounded(path, RECORD_LIMIT_BYTES) as handle:
                record = json.loads(handle.read(RECORD_LIMIT_BYTES))
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("key") != key or record.get("version") != RECORD_VERSION:
            return None
        return record

    def store(self, key: str, record: dict) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        record = {**record, "key": key, "version": RECORD_VERSION, "measured_at": record.get("measured_at", time.time())}
        tmp = self.dir / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self._path(key))


def describe(record: dict) -> str:
    """'cached, measured 2026-11-22 10:31:07 UTC'."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(record.get("measured_at", 0))))
    return f"cached, measured {stamp}"
