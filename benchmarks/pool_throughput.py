"""Verified candidates per minute through the local pool: 1 GPU, then every GPU of this host (no Ray).

Each setting starts a cold pool (fresh workspace: its own sandbox workers, reference and Triton
caches) and verifies the shipped example candidates `--repeat` times over, with as many callers
as the pool has workers, the way bench and parallel solve runs use it. Reported: wall time,
candidates per minute, scaling over one GPU, and how the work spread over the GPUs.

    python benchmarks/pool_throughput.py [--device cuda|cpu] [--repeat 2] [--only NAME ...] [--out DIR]

On the CPU (Triton interpreter) the pool has one worker: the script runs once, as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelloop.problem import Candidate, Problem
from kernelloop.tools.verify.pool import LocalPool, local_devices

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "kernelloop" / "evals" / "problems"
EXAMPLES = ROOT / "examples" / "candidates"


def pairs(names: list[str] | None, repeat: int) -> list[tuple[Candidate, Problem]]:
    files = [f for f in sorted(EXAMPLES.glob("*.py")) if not names or f.stem in names]
    return [(Candidate.from_file(f), Problem.from_file(PROBLEMS / f.name)) for f in files] * repeat


def measure(devices: list[str], work: list[tuple[Candidate, Problem]]) -> dict:
    with tempfile.TemporaryDirectory(prefix="pool-bench-") as workspace, \
            LocalPool(devices, workspace=workspace) as pool, ThreadPoolExecutor(max_workers=pool.size) as callers:
        started = time.perf_counter()
        verdicts = list(callers.map(lambda pair: pool.verify(*pair), work))
        elapsed_s = time.perf_counter() - started
        stats = pool.stats()
    return {"gpus": len(devices), "devices": devices, "candidates": len(work), "elapsed_s": elapsed_s,
            "per_minute": 60 * len(work) / elapsed_s,
            "statuses": [v.status.value for v in verdicts],
            "served": [s.served for s in stats], "busy_s": [round(s.busy_s, 2) for s in stats]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (every GPU) or cpu")
    parser.add_argument("--repeat", type=int, default=2, help="verify each example this many times")
    parser.add_argument("--only", nargs="*", help="example stems to use (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    every = local_devices(args.device)
    work = pairs(args.only, args.repeat)
    settings = [every[:1]] + ([every] if len(every) > 1 else [])
    rows = []
    for devices in settings:
        row = measure(devices, work)
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = rows[0]["per_minute"]
    print(f"\n{'workers':>7} {'candidates':>10} {'wall s':>8} {'per min':>8} {'scaling':>8}  served per worker")
    for row in rows:
        print(f"{row['gpus']:7d} {row['candidates']:10d} {row['elapsed_s']:8.1f} {row['per_minute']:8.1f} "
              f"{row['per_minute'] / base:7.2f}x  {row['served']}")
    if rows[-1]["statuses"] != rows[0]["statuses"]:
        print("WARNING: verdicts differ between 1 worker and all workers")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"pool_throughput_{args.device}.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
