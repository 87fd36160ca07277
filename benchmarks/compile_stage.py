"""Candidates a minute through the pool, with the compile stage and without (issue 28).

Each mode verifies COUNT fresh load_inline candidates (a ReLU, each source distinct, so nothing
is reused from an earlier build) on one device, from as many threads as the pool keeps busy
(`parallel_callers`, as solve's verifier node does), and reports the wall time from the first
call to the last verdict and the rate in candidates per minute:

  off   no compile stage: every candidate builds inside its device job, one at a time (before issue 28)
  one   a compile stage of one build slot
  all   a compile stage of one slot per core
  gpu   the device stage alone: the `all` candidates again, their products kept (nothing builds)

On a GPU the candidates are CUDA (nvcc), on the CPU C++ only (g++), so the stage is measured
where no GPU is. Workers (device, reference, build) are started and a warm-up verification run
before the clock starts. Raw per-candidate records go to OUT/raw.json; the summary to
OUT/summary.json and a few lines on stdout.

    PYTHONPATH=. python benchmarks/compile_stage.py --device cuda --count 8 --modes all,gpu,one,off --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelloop.problem import Candidate, Problem  # noqa: E402
from kernelloop.tools.verify.pool import LocalPool, VerifierPool  # noqa: E402

PROBLEM = ROOT / "tests" / "fixtures" / "problems" / "relu.py"
WARM_UP = ROOT / "tests" / "fixtures" / "honest" / "relu_triton.py"

CUDA = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
__global__ void relu_kernel_{tag}(const float* x, float* out, int64_t n) {{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] > 0.f ? x[i] : 0.f;
}}
torch::Tensor relu_{tag}(torch::Tensor x) {{
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    relu_kernel_{tag}<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}}
"""
module = load_inline(name="relu_{tag}", cpp_sources="torch::Tensor relu_{tag}(torch::Tensor x);",
                     cuda_sources=cuda_source, functions=["relu_{tag}"])


class ModelNew(nn.Module):
    def forward(self, x):
        return module.relu_{tag}(x)
'''

CPP = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
torch::Tensor relu_{tag}(torch::Tensor x) {{
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}}
"""
module = load_inline(name="relu_{tag}", cpp_sources=source, functions=["relu_{tag}"])


class ModelNew(nn.Module):
    def forward(self, x):
        return module.relu_{tag}(x)
'''


def candidates(device: str, count: int, salt: str) -> list[Candidate]:
    template = CUDA if device == "cuda" else CPP
    return [Candidate(source=template.format(tag=f"{salt}_{i}")) for i in range(count)]


def slots_of(mode: str) -> int:
    return {"off": 0, "one": 1}.get(mode, len(os.sched_getaffinity(0)))


def run_mode(pool: VerifierPool, problem: Problem, batch: list[Candidate]) -> dict:
    width = min(len(batch), pool.parallel_callers)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=width) as callers:
        verdicts = list(callers.map(lambda c: pool.verify(c, problem), batch))
    wall_s = time.perf_counter() - started
    count = len(batch)
    records = [{"status": v.status.value, "reason": v.reason[:200], "warnings": v.warnings,
                **{k: round(v.cost_s[k], 3) for k in ("build_s", "build_wait_s", "build_reused", "total_s", "child_s")
                   if k in v.cost_s}} for v in verdicts]
    return {"load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2),
            "callers": width, "count": count, "wall_s": round(wall_s, 2), "per_minute": round(60 * count / wall_s, 2),
            "correct": sum(r["status"] == "correct" for r in records), "records": records}


def report(summary: dict) -> str:
    """The report, from summary.json alone."""
    lines = [f"# Compile stage: candidates a minute on {summary['device']} ({summary['cores']} cores)", "",
             "Written by benchmarks/compile_stage.py from summary.json (raw.json: every verdict).", "",
             "The host's 1-minute load average before and after each mode says how much else ran beside it.", "",
             "| mode | build slots | callers | candidates | correct | wall s | per minute | load before, after |",
             "|---|---|---|---|---|---|---|---|"]
    for mode, row in summary["modes"].items():
        lines.append(f"| {mode} | {row['slots']} | {row['callers']} | {row['count']} | "
                     f"{row['correct']} | {row['wall_s']} | {row['per_minute']} | "
                     f"{row.get('load_1min_before', '?')}, {row.get('load_1min_after', '?')} |")
    return "\n".join(lines) + "\n"


def write(out: Path, device: str, results: dict[str, dict]) -> None:
    summary = {"device": device, "cores": len(os.sched_getaffinity(0)),
               "modes": {m: {k: v for k, v in r.items() if k != "records"} for m, r in results.items()}}
    (out / "raw.json").write_text(json.dumps(results, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    (out / "report.md").write_text(report(summary))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--serial-count", type=int, default=None,
                        help="candidates in the modes that build one at a time (off, one); default --count")
    parser.add_argument("--modes", default="all,gpu,one,off")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not set(modes) <= {"off", "one", "all", "gpu"} or ("gpu" in modes and "all" not in modes[: modes.index("gpu")]):
        parser.error("--modes: off, one, all, gpu (gpu after all: it reuses all's products)")
    out = args.out or Path(tempfile.mkdtemp(prefix="compile-stage-"))
    out.mkdir(parents=True, exist_ok=True)
    problem = Problem.from_file(PROBLEM)
    device = "cuda:0" if args.device == "cuda" else "cpu"
    results: dict[str, dict] = {}
    kept: dict[str, tuple[Path, list[Candidate]]] = {}
    for mode in modes:
        count = args.serial_count if mode in ("off", "one") and args.serial_count else args.count
        space, batch = kept["all"] if mode == "gpu" else (Path(tempfile.mkdtemp(prefix=f"ws-{mode}-")),
                                                          candidates(args.device, count, secrets.token_hex(4)))
        with LocalPool([device], workspace=space, compile_workers=slots_of("all" if mode == "gpu" else mode),
                       start_now=True) as pool:
            if pool._stage is not None:
                pool._stage.start(wait=True)
            warm = pool.verify(Candidate.from_file(WARM_UP), problem)  # workers, reference, first job
            results[mode] = {"slots": pool._stage.slots if pool._stage else 0, "warm_up": warm.status.value,
                             **run_mode(pool, problem, batch)}
        kept.setdefault(mode, (space, batch))
        row = results[mode]
        print(f"{mode:>4}: {row['slots']:>2} build slots, {row['callers']} callers, {len(batch)} candidates in "
              f"{row['wall_s']:.1f} s = {row['per_minute']:.2f}/min ({row['correct']} correct)", flush=True)
        write(out, args.device, results)  # after each mode: a run cut short keeps what it measured
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
