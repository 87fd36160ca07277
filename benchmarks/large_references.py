"""Make the reference of every KernelBench problem whose output takes the verifier's large-output
path (over 1 GiB a set: one trial set, streamed tensor files), the way a verification makes it,
with only torch, triton and nvidia-ml-py: whether each fits this GPU, and what it costs.

  python benchmarks/large_references.py LEVEL_DIR --out FILE.jsonl [--budget-s 540]
  python benchmarks/large_references.py --report DIR     # DIR/README.md from DIR/*.jsonl

For each problem: the trusted job starts (sizes from a run on the meta device), makes the trial
sets and the reference's outputs on them, the parent reads the outputs back, and then the same
for the fresh set that a verification runs after timing. One JSON line per problem that is large
(or whose size the meta device can't tell); a run cut by the budget goes on where it stopped.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kernelloop.problem import Problem, ProblemError
from kernelloop.tools.verify.budget import LARGE_OUTPUT_BYTES
from kernelloop.tools.verify.verifier import Verifier, secret_seeds

try:  # run as a script (python benchmarks/...), or imported from the repository root
    from kernelbench_baselines import done_problems, number
except ImportError:
    from benchmarks.kernelbench_baselines import done_problems, number


def _made_bytes(sets: list[list]) -> int:
    return sum(t.numel() * t.element_size() for values in sets for t in values if hasattr(t, "numel"))


def make_reference(verifier: Verifier, problem: Problem, large_bytes: int = LARGE_OUTPUT_BYTES) -> dict:
    """One problem's row: status "small" when its output is known to be under the large-output line."""
    started = time.perf_counter()
    server = verifier.server(problem)
    start_s = time.perf_counter() - started
    if server.output_bytes is not None and server.output_bytes <= large_bytes:
        return {"status": "small", "output_bytes": server.output_bytes}
    row = {"status": "ok", "output_bytes": server.output_bytes, "input_bytes": server.input_bytes, "start_s": round(start_s, 2)}
    trials = verifier.trial_count(server)
    for step, seeds, variants in (("trials", secret_seeds(trials), True), ("fresh", secret_seeds(1), False)):
        t0 = time.perf_counter()
        made = server.make(seeds, variants=variants)
        row[f"{step}_sets"] = len(made.outputs)
        row[f"{step}_s"] = round(time.perf_counter() - t0, 2)
        row["made_output_bytes"] = _made_bytes(made.outputs[:1])
        made.inputs_path.unlink(missing_ok=True)  # tens of GB a problem: the disk is not endless
        del made
    if row["made_output_bytes"] <= large_bytes:  # the meta device couldn't tell; a real set did
        row["status"] = "small"
    return row


def report(folder: Path) -> str:
    lines = ["# KernelBench references on the large-output path (H100)", "",
             "Written by `benchmarks/large_references.py --report` from the raw files beside it. Each row is one "
             "problem whose output is over 1 GiB a set, so the verifier gives it one trial set and the fresh set: "
             "the seconds to start its trusted job, make the trial set (inputs made on the GPU, the reference run, "
             "inputs and outputs streamed to files, the outputs read back by the parent) and the fresh set.", ""]
    for raw in sorted(folder.glob("*.jsonl")):
        every = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
        # "small" by the meta device's sizes, or by a set made where the meta device couldn't tell
        rows = [r for r in every if r["status"] == "error"
                or (r["status"] == "ok" and (r.get("made_output_bytes") or 0) > LARGE_OUTPUT_BYTES)]
        ok = [r for r in rows if r["status"] == "ok"]
        lines += [f"## {raw.stem}", "", f"- {len(every)} problems looked at, {len(rows)} on the large-output path; "
                  f"{len(ok)} of those references made; wall time "
                  f"{sum(r['wall_s'] for r in every):.0f} s", "",
                  "| problem | output GB | inputs GB | trial sets | start s | trial set s | fresh set s | wall s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            if r["status"] != "ok":
                lines.append(f"| {r['problem']} | error: {r['reason']} | | | | | | {r['wall_s']:.1f} |")
                continue
            lines.append(f"| {r['problem']} | {(r.get('made_output_bytes') or 0) / 1e9:.2f} | "
                         f"{(r.get('input_bytes') or 0) / 1e9:.2f} | {r['trials_sets']} | {r['start_s']:.1f} | "
                         f"{r['trials_s']:.1f} | {r['fresh_s']:.1f} | {r['wall_s']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("level_dir", type=Path, nargs="?")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--report", type=Path, help="write DIR/README.md from the raw files in DIR")
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/kb-references"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--large-bytes", type=int, default=LARGE_OUTPUT_BYTES,
                        help="the large-output line (a smaller one tries the script on small problems)")
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    if args.level_dir is None or args.out is None:
        parser.error("a level dir and --out are needed, or --report DIR")
    done = done_problems(args.out)
    started = time.perf_counter()
    problems = sorted(args.level_dir.glob("*.py"), key=number)
    with Verifier(device=args.device, workspace=args.workspace) as verifier, args.out.open("a") as out:
        for path in problems:
            if path.stem in done:
                continue
            if time.perf_counter() - started > args.budget_s:
                print(f"budget spent: {len(problems) - len(done)} problems left", flush=True)
                break
            t0 = time.perf_counter()
            try:
                row = {"problem": path.stem, **make_reference(verifier, Problem.from_file(path), args.large_bytes)}
            except (ProblemError, ValueError, RuntimeError) as exc:
                row = {"problem": path.stem, "status": "error", "reason": str(exc).splitlines()[0][:300]}
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            done.add(path.stem)
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(json.dumps(row), flush=True)
    print(f"{time.perf_counter() - started:.0f} s this call")


if __name__ == "__main__":
    main()
