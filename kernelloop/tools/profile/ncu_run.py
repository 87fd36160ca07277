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
from kernelloop.tools.profile.ncu import NcuReport, find_ncu, ncu_available, ncu_command, read_ncu_output

NCU_TIMEOUT_S = 300.0
# Launches profiled per kernel name: ncu replays each ~35 times, so a candidate that launches from a
# Python loop (thousands a forward) would take many minutes without a cap.
LAUNCHES_PER_KERNEL = 3


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
        argv = ncu_command([sys.executable, "-m", "kernelloop.tools.profile.profile_driver", str(candidate.resolve()),
                            str(problem.resolve()), "--iters", str(iters + 1)],
                           out_csv, regex, launch_skip=max(1, len(names)),
                           launch_count=LAUNCHES_PER_KERNEL * max(1, len(names)), ncu=find_ncu() or "ncu")
        env = scrubbed_env("cuda", Path(scratch) / "cache")
        try:
            done = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return NcuReport(notes=[f"ncu timed out after {timeout_s:g}s"])
        text = out_csv.read_text() if out_csv.exists() else ""
        report = read_ncu_output(text + "\n" + done.stdout + "\n" + done.stderr)
        if done.returncode != 0 and not report.notes:
            report.notes.append(f"ncu exited with {done.returncode}: {(done.stderr or done.stdout).strip()[-300:]}")
        return report
