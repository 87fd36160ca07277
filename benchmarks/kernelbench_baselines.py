"""Time every KernelBench problem's baselines (eager, torch.compile) on this GPU, one verifier,
with only torch, triton and nvidia-ml-py: whether every reference can be made, and what it costs.

  python benchmarks/kernelbench_baselines.py KERNELBENCH_LEVEL_DIR --out FILE.jsonl [--budget-s 540]
  python benchmarks/kernelbench_baselines.py --report DIR     # DIR/README.md from DIR/*.jsonl

One JSON line per problem (status ok or error with its one-line reason, wall seconds, eager and
compile medians, the output size); problems already in FILE are skipped, so a run cut by the
budget goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

from kernelloop.problem import Problem, ProblemError
from kernelloop.tools.verify.verifier import Verifier


def number(path: Path) -> int:
    match = re.match(r"(\d+)_", path.name)
    return int(match.group(1)) if match else 10**9


def done_problems(out: Path) -> set[str]:
    """The problems a raw file already has a line for: a rerun goes on after them."""
    if not out.is_file():
        return set()
    return {json.loads(line)["problem"] for line in out.read_text().splitlines() if line.strip()}


def report(folder: Path) -> str:
    """A summary of every raw file in `folder`, one section each: counts, wall time, the slowest."""
    lines = ["# KernelBench baselines on the H100", "",
             "Written by `benchmarks/kernelbench_baselines.py --report` from the raw files beside it "
             "(one JSON line per problem: eager and torch.compile medians in ms, output bytes, wall seconds "
             "of the verifier's trusted baselines job, one input set each).", ""]
    for raw in sorted(folder.glob("*.jsonl")):
        rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
        ok = [r for r in rows if r["status"] == "ok"]
        lines += [f"## {raw.stem}", "",
                  f"- {len(ok)} of {len(rows)} problems' baselines made; wall time {sum(r['wall_s'] for r in rows):.0f} s "
                  f"(median {sorted(r['wall_s'] for r in rows)[len(rows) // 2]:.1f} s a problem)"]
        lines += [f"- failed: {r['problem']}: {r['reason']}" for r in rows if r["status"] != "ok"]
        largest = sorted(ok, key=lambda r: -(r.get("output_bytes") or 0))[:5]
        lines += ["", "| largest outputs | output GB | eager ms | compile ms | wall s |", "|---|---|---|---|---|"]
        lines += [f"| {r['problem']} | {(r.get('output_bytes') or 0) / 1e9:.2f} | {r['eager_ms']:.3f} | "
                  f"{r['compile_ms'] if r['compile_ms'] is None else format(r['compile_ms'], '.3f')} | {r['wall_s']:.1f} |"
                  for r in largest]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("level_dir", type=Path, nargs="?")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="write DIR/README.md from the raw files in DIR")
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/kb-baselines"))
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    if args.level_dir is None or args.out is None:
        parser.error("a level dir and --out are needed, or --report DIR")
    done = done_problems(args.out)
    started = time.perf_counter()
    problems = sorted(args.level_dir.glob("*.py"), key=number)
    with Verifier(device="cuda", workspace=args.workspace, trials=1) as verifier, args.out.open("a") as out:
        for path in problems:
            if path.stem in done:
                continue
            if time.perf_counter() - started > args.budget_s:
                print(f"budget spent: {len(problems) - len(done)} problems left", flush=True)
                break
            t0 = time.perf_counter()
            row = {"problem": path.stem}
            try:
                measured = verifier.time_baselines(Problem.from_file(path))
                row.update(status="ok", eager_ms=measured["timings"]["eager"].median_ms,
                           compile_ms=measured["timings"].get("compile") and measured["timings"]["compile"].median_ms,
                           output_bytes=measured["roofline"].get("output_bytes"))
            except (ProblemError, ValueError, RuntimeError) as exc:
                row.update(status="error", reason=str(exc).splitlines()[0][:300])
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            done.add(path.stem)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)
    print(f"{len(done)} of {len(problems)} problems in {args.out}; {time.perf_counter() - started:.0f} s this call")


if __name__ == "__main__":
    main()
