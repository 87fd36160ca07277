"""Verified candidates per minute through the local pool: 1 GPU, then every GPU of this host (no Ray).

Each setting opens a cold pool (fresh workspace: its own sandbox workers, references and compile
caches) and verifies the shipped example candidates with as many callers as the pool has workers,
the way bench and parallel solve runs use it. Two numbers per setting, with the scaling of each
over one GPU:

- cold: from opening the pool to the last verdict of one pass over the candidates. Each worker's
  start (interpreter, torch, CUDA context) is paid once, at the same time on every GPU, so it does
  not shrink with more GPUs: over a short pass it caps the scaling.
- warm: the next `--repeat` passes over the same candidates, on the now-started pool: the rate a
  long solve or bench run sees. Workers still switch problems (a new reference job each time), as
  they do in those runs.

The median of each verdict phase (`cost_s`) per setting shows whether a verification costs more when
the GPUs work at once (shared CPU, disk, the parent process). `--report DIR` writes DIR/README.md from
DIR/pool_throughput_*.json; never edit it by hand.

    python benchmarks/pool_throughput.py [--device cuda|cpu] [--repeat 2] [--only NAME ...] [--out DIR]
    python benchmarks/pool_throughput.py --report DIR

On the CPU (Triton interpreter) the pool has one worker: the script runs once, as a smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kernelloop.problem import Candidate, Problem
from kernelloop.tools.verify.pool import LocalPool, WorkerStats, local_devices

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "kernelloop" / "evals" / "problems"
EXAMPLES = ROOT / "examples" / "candidates"
PHASES = ["workers", "reference", "candidate", "compare", "baselines", "timing", "fresh", "finish", "total"]


def pairs(names: list[str] | None) -> list[tuple[Candidate, Problem]]:
    files = [f for f in sorted(EXAMPLES.glob("*.py")) if not names or f.stem in names]
    return [(Candidate.from_file(f), Problem.from_file(PROBLEMS / f.name)) for f in files]


def _phase_medians(verdicts: list) -> dict[str, float]:
    medians = {}
    for name in PHASES:
        key = "total_s" if name == "total" else f"phase_{name}_s"
        values = [v.cost_s[key] for v in verdicts if key in v.cost_s]
        if values:
            medians[name] = round(statistics.median(values), 3)
    return medians


def _costs(verdicts: list) -> list[dict[str, float]]:
    """Each verdict's cost_s, rounded: the raw file keeps where every verification's time went."""
    return [{name: round(value, 3) for name, value in verdict.cost_s.items() if isinstance(value, (int, float))}
            for verdict in verdicts]


def measure(devices: list[str], work: list[tuple[Candidate, Problem]], repeat: int) -> dict:
    """One cold pass from the pool's opening, then `repeat` warm passes; the pool's stats for each."""
    with tempfile.TemporaryDirectory(prefix="pool-bench-") as workspace:
        opened = time.perf_counter()
        with LocalPool(devices, workspace=workspace) as pool, ThreadPoolExecutor(max_workers=pool.size) as callers:
            cold = list(callers.map(lambda pair: pool.verify(*pair), work))
            cold_s = time.perf_counter() - opened
            after_cold = pool.stats()
            began = time.perf_counter()
            warm = list(callers.map(lambda pair: pool.verify(*pair), work * repeat))
            warm_s = time.perf_counter() - began
            after_warm = pool.stats()
    return {"gpus": len(devices), "devices": devices, "problems": [p.name for _, p in work],
            "cold": _pass(cold, cold_s, [WorkerStats(s.slot) for s in after_cold], after_cold),
            "warm": _pass(warm, warm_s, after_cold, after_warm)}


def _pass(verdicts: list, elapsed_s: float, before: list[WorkerStats], after: list[WorkerStats]) -> dict:
    """One pass's rate, verdicts, each worker's share of it (stats after minus before) and costs."""
    return {"candidates": len(verdicts), "elapsed_s": round(elapsed_s, 2), "per_minute": 60 * len(verdicts) / elapsed_s,
            "statuses": [v.status.value for v in verdicts], "served": [a.served - b.served for a, b in zip(after, before)],
            "busy_s": [round(a.busy_s - b.busy_s, 2) for a, b in zip(after, before)],
            "phase_median_s": _phase_medians(verdicts), "cost_s": _costs(verdicts)}


def table(rows: list[dict]) -> list[str]:
    """Markdown rows: per setting and pass, the rate and its scaling over the first row's (one GPU)."""
    lines = ["| GPUs | pass | candidates | wall s | per min | scaling over 1 GPU | served per GPU | busy s per GPU |",
             "|---|---|---|---|---|---|---|---|"]
    for name in ("cold", "warm"):
        base = rows[0][name]["per_minute"]
        for row in rows:
            part = row[name]
            lines.append(f"| {row['gpus']} | {name} | {part['candidates']} | {part['elapsed_s']:.1f} | "
                         f"{part['per_minute']:.1f} | {part['per_minute'] / base:.2f}x | {part['served']} | {part['busy_s']} |")
    return lines


def phase_table(rows: list[dict]) -> list[str]:
    lines = ["| GPUs | pass | " + " | ".join(PHASES) + " |", "|---|---|" + "---|" * len(PHASES)]
    for name in ("cold", "warm"):
        for row in rows:
            medians = row[name]["phase_median_s"]
            lines.append(f"| {row['gpus']} | {name} | " + " | ".join(f"{medians[p]:.2f}" if p in medians else ""
                                                                   for p in PHASES) + " |")
    return lines


def report(directory: Path) -> str:
    """DIR/README.md's text, from DIR/pool_throughput_*.json."""
    lines = ["# Pool throughput: verified candidates per minute, 1 GPU against all", "",
             "Written by `benchmarks/pool_throughput.py --report` from the raw files beside it; nothing here is typed by "
             "hand. Cold: from opening the pool to the last verdict of one pass over the candidates (each worker's start "
             "included, paid once on every GPU at the same time, so it does not shrink with more GPUs). Warm: the passes "
             "after it on the same pool, the rate a long solve or bench run sees. Phases: the median of each verdict's "
             "`cost_s`, in seconds.", ""]
    builds = directory / "builds.json"  # what each raw file ran, where the file names need words
    if builds.is_file():
        lines += ["Builds (from builds.json):", ""] + [f"- `{name}`: {what}" for name, what in
                                                       json.loads(builds.read_text()).items()] + [""]
    for path in sorted(directory.glob("pool_throughput_*.json")):
        data = json.loads(path.read_text())
        rows, machine = data["rows"], data.get("machine", {})
        lines += [f"## {path.name}", "", f"{machine.get('gpus', '?')} x {machine.get('gpu', '?')}, {machine.get('cpus', '?')} CPUs, "
                  f"torch {machine.get('torch', '?')}, triton {machine.get('triton', '?')}, sandbox {machine.get('isolation', '?')}; "
                  f"{data.get('date', '')} UTC. Problems: {', '.join(rows[0]['problems'])}; warm passes: {data.get('repeat')}.",
                  "", *table(rows), "", *phase_table(rows), ""]
        lines += _cached_note(rows)
        statuses = {status for row in rows for part in ("cold", "warm") for status in row[part]["statuses"]}
        lines += [f"Verdicts: {', '.join(sorted(statuses))}"
                  + ("; they differ between settings (see the raw file)." if _differ(rows) else ", the same in every setting."), ""]
    return "\n".join(lines)


def _cached_note(rows: list[dict]) -> list[str]:
    """How many verdicts of each pass took their torch.compile baselines from the trusted cache (a
    cold pass after another setting's reuses what that one built: it skips the compile)."""
    counts = [(row["gpus"], part, sum("baselines_cached_at" in c for c in row[part].get("cost_s", [])),
               len(row[part].get("cost_s", []))) for part in ("cold", "warm") for row in rows]
    if not any(cached for _, _, cached, _ in counts):
        return []
    return ["torch.compile baselines read from the trusted cache, not built: " + "; ".join(
        f"{gpus} GPU(s) {part} {cached} of {total}" for gpus, part, cached, total in counts) + ".", ""]


def _differ(rows: list[dict]) -> bool:
    return any(r[p]["statuses"] != rows[0][p]["statuses"] for r in rows for p in ("cold", "warm"))


def machine_facts() -> dict:
    import torch
    import triton

    from kernelloop.sandbox.isolation import choose_mode

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {"gpu": gpu, "gpus": torch.cuda.device_count(), "cpus": os.cpu_count(), "torch": torch.__version__,
            "triton": triton.__version__, "isolation": choose_mode(None)[0]}


def write(out: Path, device: str, rows: list[dict], repeat: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = {"rows": rows, "repeat": repeat, "machine": machine_facts(), "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    (out / f"pool_throughput_{device}.json").write_text(json.dumps(data, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (every GPU) or cpu")
    parser.add_argument("--repeat", type=int, default=2, help="warm passes over the candidates after the cold one")
    parser.add_argument("--only", nargs="*", help="example stems to use (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report", type=Path, help="write DIR/README.md from DIR/pool_throughput_*.json and stop")
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    every = local_devices(args.device)
    work = pairs(args.only)
    settings = [every[:1]] + ([every] if len(every) > 1 else [])
    rows: list[dict] = []
    for devices in settings:
        row = measure(devices, work, args.repeat)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:  # after each setting: a call cut short keeps what it measured
            write(args.out, args.device, rows, args.repeat)
    print("\n".join(["", *table(rows), "", *phase_table(rows)]))
    if _differ(rows):
        print("WARNING: verdicts differ between 1 worker and all workers")


if __name__ == "__main__":
    main()
