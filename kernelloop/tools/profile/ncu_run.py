"""Run Nsight Compute on a candidate's own kernels and parse what it measured.

Never raises for ncu's own failures (missing binary, no counter permission, unknown metric,
timeout): they come back as notes in the NcuReport, so `profile --ncu` degrades to the
torch.profiler summary instead of crashing.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from kernelloop.sandbox.runner import scrubbed_env
from kernelloop.sandbox.safe_io import UnsafeFileError, open_bounded, read_tail
from kernelloop.tools.profile.ncu import NcuReport, find_ncu, ncu_available, ncu_command, read_ncu_output

NCU_TIMEOUT_S = 300.0
# Launches profiled per kernel name: ncu replays each ~35 times, so a candidate that launches from a
# Python loop (thousands a forward) would take many minutes without a cap.
LAUNCHES_PER_KERNEL = 3
# Read back bounded: the candidate prints through ncu and runs in the scratch dir, where it can
# print a flood or swap ncu's CSV for a pipe or a link (safe_io.py).
OUTPUT_TAIL_BYTES = 1 << 20
CSV_BYTES = 64 << 20


def run_ncu(candidate: Path, problem: Path, own_kernel_names: list[str], *, iters: int = 2,
            timeout_s: float = NCU_TIMEOUT_S) -> NcuReport:
    """Profile the candidate's own kernels (by name) over `iters` forwards after a warm-up one."""
    usable, note = ncu_available()
    if not usable:
        return NcuReport(notes=[note])
    names = [name.split(":", 1)[-1] for name in own_kernel_names]
    regex = "|".join(names) if names else None
    with tempfile.TemporaryDirectory(prefix="kernelloop-ncu-") as scratch:
        out_csv = Path(scratch) / "ncu.csv"
        argv = ncu_command([sys.executable, "-m", "kernelloop.tools.verify.profile_driver", str(candidate.resolve()),
                            str(problem.resolve()), "--iters", str(iters + 1)],
                           out_csv, regex, launch_skip=max(1, len(names)),
                           launch_count=LAUNCHES_PER_KERNEL * max(1, len(names)), ncu=find_ncu() or "ncu")
        env = scrubbed_env("cuda", Path(scratch) / "cache")
        out_path, err_path = Path(scratch) / "ncu.stdout", Path(scratch) / "ncu.stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:  # files, not pipes read into memory
            try:
                done = subprocess.run(argv, cwd=scratch, env=env, stdout=out, stderr=err, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return NcuReport(notes=[f"ncu timed out after {timeout_s:g}s"])
        stdout, stderr = read_tail(out_path, OUTPUT_TAIL_BYTES), read_tail(err_path, OUTPUT_TAIL_BYTES)
        report = read_ncu_output(_csv(out_csv) + "\n" + stdout + "\n" + stderr)
        if done.returncode != 0 and not report.notes:
            report.notes.append(f"ncu exited with {done.returncode}: {(stderr or stdout).strip()[-300:]}")
        return report


def _csv(path: Path) -> str:
    """ncu's CSV, read the careful way ('' when there is none, or none that is safe to read)."""
    try:
        with open_bounded(path, CSV_BYTES) as handle:
            return handle.read(CSV_BYTES).decode("utf-8", "replace")
    except (FileNotFoundError, UnsafeFileError):
        return ""
