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

No torch here: the CLI reads the policy before torch is imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

TRUSTED_CACHE_ENV = "KERNELLOOP_TRUSTED_CACHE"
RECORD_VERSION = 1
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
    return root, f"trusted cache: {root}"


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
