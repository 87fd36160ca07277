"""Time the attention problems' baselines alone (eager, torch.compile, FlexAttention, SDPA) on a GPU.

Uses only the verifier (torch, triton, nvidia-ml-py), so it runs on a bare GPU node:
    python benchmarks/attention_baselines.py [variant-stem ...] [--out FILE.jsonl] [--budget-s 540]
        the same trusted job per problem as `kernelloop bench attention --baselines-only`, one
        verifier for all; with --out, one JSON line per problem (medians, and where its wall time
        went: each baseline's compile and first call), then {"call": ...} with the call's wall time
    python benchmarks/attention_baselines.py --report DIR
        DIR/README.md from the raw .jsonl files in DIR (nothing in it typed by hand)
    python benchmarks/attention_baselines.py --kernels [variant-stem ...]
        FlexAttention's own kernels per variant (torch.profiler, in this process): which kernels
        take its time, and whether Dynamo recompiled or fell back to the unfused path.
Problems already in FILE are skipped, so a run cut by the budget goes on where it stopped.
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

from kernelloop.problem import Problem, ProblemError
from kernelloop.tools.verify.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1] / "kernelloop" / "evals" / "problems" / "attention"
ORDER = ["eager", "compile", "flex_attention", "sdpa_flash", "sdpa_cudnn"]


def time_baselines(paths: list[Path], out_path: Path | None, budget_s: float, workspace: Path | None) -> None:
    started = time.perf_counter()
    done = set()
    if out_path is not None and out_path.is_file():
        done = {json.loads(line).get("problem") for line in out_path.read_text().splitlines() if line.strip()}
    out = out_path.open("a") if out_path is not None else None
    print(f"{'variant':26} {'eager ms':>9} {'compile ms':>10} {'flex ms':>8} {'sdpa ms':>8} {'best':>14} "
          f"{'wall s':>7} {'compile s (eager, flex)':>24}", flush=True)
    ran = 0
    device_name = None
    try:
        with Verifier(device="cuda", workspace=workspace) as verifier:
            for path in paths:
                if path.stem in done:
                    continue
                if time.perf_counter() - started > budget_s:
                    print(f"budget spent: {len(paths) - len(done) - ran} problems left", flush=True)
                    break
                t0 = time.perf_counter()
                row = {"problem": path.stem}
                try:
                    measured = verifier.time_baselines(Problem.from_file(path))
                    timings = measured["timings"]
                    device_name = measured["device_name"]
                    row.update(status="ok", ms={n: t.median_ms for n, t in timings.items()},
                               iqr_ms={n: t.iqr_ms for n, t in timings.items()},
                               samples=max(t.samples for t in timings.values()),
                               compile_s={n: round(s, 2) for n, s in measured["compile_s"].items()},
                               best=min(timings, key=lambda n: timings[n].median_ms))
                except (ProblemError, ValueError, RuntimeError) as exc:
                    row.update(status="error", reason=str(exc).splitlines()[0][:300])
                row["wall_s"] = round(time.perf_counter() - t0, 2)
                ran += 1
                _print_row(row)
                if out is not None:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
        call = {"call": {"wall_s": round(time.perf_counter() - started, 1), "problems": ran, "gpu": device_name}}
        print(json.dumps(call), flush=True)
        if out is not None:
            out.write(json.dumps(call) + "\n")
    finally:
        if out is not None:
            out.close()


def _print_row(row: dict) -> None:
    if row["status"] != "ok":
        print(f"{row['problem']:26} error: {row['reason']}", flush=True)
        return
    ms, compile_s = row["ms"], row["compile_s"]
    sdpa = min((ms[n] for n in ("sdpa_flash", "sdpa_cudnn") if n in ms), default=float("nan"))
    print(f"{row['problem']:26} {ms['eager']:9.3f} {ms.get('compile', float('nan')):10.3f} "
          f"{ms.get('flex_attention', float('nan')):8.3f} {sdpa:8.3f} {row['best']:>14} {row['wall_s']:7.1f} "
          f"{compile_s.get('compile', float('nan')):11.1f} {compile_s.get('flex_attention', float('nan')):11.1f}",
          flush=True)


def report(folder: Path) -> str:
    """README.md text: every variant's baselines, the best available, and where each call's time went."""
    lines = ["# Attention baselines on the GPU", "",
             "Written by `benchmarks/attention_baselines.py --report` from the raw files beside it (one JSON line "
             "per problem from the verifier's trusted baselines job, the same job `kernelloop bench attention "
             "--baselines-only` runs; a last line per call with its wall time). Medians in ms; best available is "
             "the fastest baseline timed for the variant; compile s is each baseline's compile and first call, "
             "outside the timed rounds.", ""]
    for raw in sorted(folder.glob("*.jsonl")):
        rows = [json.loads(line) for line in raw.read_text().splitlines() if line.strip()]
        problems = [r for r in rows if "problem" in r]
        calls = [r["call"] for r in rows if "call" in r]
        lines += [f"## {raw.stem}", ""]
        if calls:
            lines += [f"- device call: {c['problems']} problems in {c['wall_s']:.0f} s of wall time on {c.get('gpu')}"
                      for c in calls]
        lines += [f"- problems' own wall time: {sum(r['wall_s'] for r in problems):.0f} s", ""]
        lines += ["| problem | " + " | ".join(f"{n} ms" for n in ORDER) + " | best available | wall s | "
                  "compile s: compile | compile s: flex_attention |", "|---" * (len(ORDER) + 5) + "|"]
        for r in problems:
            if r["status"] != "ok":
                lines.append(f"| {r['problem']} | error: {r['reason']} |" + " |" * (len(ORDER) + 3))
                continue
            ms, compile_s = r["ms"], r["compile_s"]
            cells = [f"{ms[n]:.4f}" if n in ms else "-" for n in ORDER]
            lines.append(f"| {r['problem']} | " + " | ".join(cells) + f" | {r['best']} | {r['wall_s']:.1f} | "
                         f"{compile_s.get('compile', float('nan')):.1f} | "
                         f"{compile_s.get('flex_attention', float('nan')):.1f} |")
        lines.append("")
    return "\n".join(lines)


def flex_kernels(paths: list[Path]) -> None:
    """Each variant's FlexAttention, built and called as the verifier's timing does (one instance,
    rotated input sets), then profiled: its top kernels and Dynamo's frame counters."""
    import torch
    import torch._dynamo

    from kernelloop.tools.profile.profiler import kernel_table

    for path in paths:
        torch._dynamo.reset()  # each variant from a clean compiler, as in its own verifier child
        torch._dynamo.utils.counters.clear()
        problem = Problem.from_file(path).module
        flex = problem.get_baselines()["flex_attention"]().cuda()
        sets = [[t.cuda() for t in problem.get_inputs()] for _ in range(3)]
        with torch.no_grad():
            for inputs in sets * 2:
                flex(*inputs)
            rows = kernel_table(lambda flex=flex, inputs=sets[0]: flex(*inputs), iters=5)
        counters = torch._dynamo.utils.counters
        frames = dict(counters["frames"])
        recompiles = dict(counters["recompiles"]) if "recompiles" in counters else {}
        print(f"\n{path.stem}: dynamo frames {frames} recompiles {recompiles or 0}", flush=True)
        for row in rows[:6]:
            print(f"  {row.mean_ms:9.4f} ms x{row.calls // 5:<3} {row.percent:5.1f}%  {row.name[:110]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="problem stems (default: all)")
    parser.add_argument("--kernels", action="store_true", help="FlexAttention's kernels per variant instead of timings")
    parser.add_argument("--out", type=Path, help="append one JSON line per problem here")
    parser.add_argument("--report", type=Path, help="write DIR/README.md from the raw files in DIR")
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--workspace", type=Path, help="default: a new empty one, so every compile cache starts "
                        "cold, as on a fresh machine (the cost a first `bench` pays)")
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    wanted = set(args.variants)
    paths = sorted((p for p in ROOT.glob("[0-9]*.py") if not wanted or p.stem in wanted),
                   key=lambda p: int(p.stem.split("_")[0]))
    if args.kernels:
        flex_kernels(paths)
    else:
        workspace = args.workspace or Path(tempfile.mkdtemp(prefix="attention-baselines-"))
        time_baselines(paths, args.out, args.budget_s, workspace)


if __name__ == "__main__":
    main()
