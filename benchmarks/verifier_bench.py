"""Verifier throughput, fixed cost, repeatability and agreement with a plain timer.

CPU (issue 2): the verifier's fixed cost per candidate when a batch is verified with one warm
Verifier (everything but the candidate's own first call/JIT, trials and timing; the reference
runs once per problem and is reported apart).
GPU (issue 3): verified candidates per minute on the shipped examples, the spread of the same
kernel's speedup over repeated verifications, and our speedup next to a KernelBench-style one
(events, mean of 100 calls, no L2 flush, same inputs).

    python benchmarks/verifier_bench.py [--device cpu|cuda] [--repeat 5] [--out DIR] [--only STEM ...]
        [--no-standby]   (each child forked when its job comes: what the prepared standby saves)
        [--no-preload]   (each child imports the compiler and the launch hooks: what preloading saves)
        [--cpu-compare]  (the parent compares outputs on the CPU: what comparing on the GPU saves)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.sandbox.runner import PRELOAD_ENV
from kernelloop.tools.verify.verifier import Verifier, resolve_device

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "kernelloop" / "evals" / "problems"
# (candidates, problems): the shipped examples (all under 40 us on an H100) and the attention
# examples (milliseconds), for the spread of kernels over 50 us.
SUITES = [(ROOT / "examples" / "candidates", PROBLEMS),
          (ROOT / "examples" / "attention_candidates", PROBLEMS / "attention")]


def pairs(names: list[str] | None) -> list[tuple[Candidate, Problem]]:
    found = [(c, problems / c.name) for candidates, problems in SUITES for c in sorted(candidates.glob("*.py"))]
    chosen = [(c, p) for c, p in found if not names or c.stem in names or f"{p.parent.name}/{c.stem}" in names]
    return [(Candidate.from_file(c), Problem.from_file(p)) for c, p in chosen]


def plain_speedup(problem: Problem, candidate: Candidate) -> float:
    """KernelBench-style: eager and candidate each timed alone, mean of 100 event-timed calls, no flush."""
    import torch

    from kernelloop.problem import import_source
    from kernelloop.tools.profile.timing import time_plain_ms

    module = import_source(candidate.path, "bench_candidate")
    torch.manual_seed(42)
    reference = problem.module.Model(*problem.module.get_init_inputs()).cuda()
    torch.manual_seed(42)
    new = module.ModelNew(*problem.module.get_init_inputs()).cuda()
    torch.manual_seed(1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.module.get_inputs()]
    with torch.no_grad():
        return time_plain_ms(lambda: reference(*inputs)) / time_plain_ms(lambda: new(*inputs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--repeat", type=int, default=5, help="verifications of each kernel for the spread (GPU)")
    parser.add_argument("--only", nargs="*", help="example stems to use (default: all)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--no-standby", action="store_true", help="fork each job's child when the job comes")
    parser.add_argument("--no-preload", action="store_true", help="each child imports the compiler and hooks itself")
    parser.add_argument("--cpu-compare", action="store_true", help="the parent compares outputs on the CPU")
    args = parser.parse_args()
    if args.no_preload:
        os.environ[PRELOAD_ENV] = "0"  # read by the sandbox worker (kernelloop/tools/verify/harness.py)
    device = resolve_device(args.device)
    work = pairs(args.only)
    rows, started = [], time.perf_counter()
    with Verifier(device=device, standby=not args.no_standby, gpu_compare=not args.cpu_compare) as verifier:
        zygote_s = verifier.zygote.start_s
        for candidate, problem in work:
            first = verifier.verify(candidate, problem)
            verdicts = [first] + [verifier.verify(candidate, problem) for _ in range(args.repeat - 1 if device == "cuda" else 1)]
            speedups = [v.speedup for v in verdicts if v.speedup]
            last = verdicts[-1]
            row = {"problem": problem.name, "status": first.status.value, "reference_s": first.cost_s["reference_s"],
                   "fixed_s": [round(v.cost_s["fixed_s"], 4) for v in verdicts],
                   "total_s": [round(v.cost_s["total_s"], 3) for v in verdicts],
                   "first_call_s": [round(v.cost_s.get("first_call_s", 0.0), 3) for v in verdicts],
                   "trials_s": first.cost_s.get("trials_s"),
                   "timing_s": [round(v.cost_s.get("timing_s", 0.0), 3) for v in verdicts], "speedups": speedups,
                   # where the warm fixed cost goes (last verification): child setup (imports, CUDA
                   # context, model), saving outputs, the parent's load + compare, the child's exit
                   "overhead_s": {k: round(v, 4) for k, v in last.cost_s.items()
                                  if k.startswith(("setup", "prepare"))
                                  or k in ("save_s", "gate_s", "compare_s", "exit_s", "first_forward_s")},
                   # where timing's wall time goes (last verification): baseline compiles, rounds, profile
                   # (the verdict's phase laps; Verdict.profile, a Profile record, holds neither these nor compile times)
                   "timing_phases_s": {name: round(last.cost_s[f"phase_{name}_s"], 3) for name in ("baselines", "timing", "profile")
                                       if f"phase_{name}_s" in last.cost_s},
                   # per verification, to tell a noisy machine from a noisy kernel: medians, SM clocks
                   # before and after timing, throttle reasons
                   "median_ms": [{k: round(t.median_ms, 4) for k, t in v.timings.items()} for v in verdicts],
                   "noise_floor": [v.noise_floor for v in verdicts],
                   "gpu": [None if v.gpu is None else {"sm_clock_mhz": v.gpu.sm_clock_mhz, "power_w": v.gpu.power_w,
                                                       "throttle": v.gpu.throttle_reasons} for v in verdicts]}
            if len(speedups) > 1:
                row["speedup_cv"] = statistics.pstdev(speedups) / statistics.mean(speedups)
                row["candidate_ms"] = first.timings["candidate"].median_ms
                row["plain_speedup"] = plain_speedup(problem, candidate)
            rows.append(row)
            print(json.dumps(row), flush=True)
        compared_on = verifier.compare_on
    elapsed_s = time.perf_counter() - started
    verified = sum(len(r["fixed_s"]) for r in rows)
    fixed = [f for r in rows for f in r["fixed_s"][1:]] or [f for r in rows for f in r["fixed_s"]]
    print(f"\ndevice {device}; warm worker start {zygote_s:.2f} s (once); {verified} verifications in {elapsed_s:.1f} s "
          f"= {60 * verified / elapsed_s:.1f} per minute; "
          f"outputs compared on {compared_on} (torch threads here: {torch.get_num_threads()})")
    print(f"fixed cost per candidate (warm, reference cached): median {statistics.median(fixed):.3f} s, max {max(fixed):.3f} s")
    header = (f"{'problem':28} {'status':9} {'ref s':>6} {'fixed s':>8} {'setup':>6} {'context':>7} {'save':>6} "
              f"{'gate':>6} {'compare':>8} {'exit':>6} {'1st call s':>10} {'trials s':>9} {'timing s':>9}")
    if device == "cuda":
        header += f" {'cand ms':>9} {'speedup':>8} {'CV %':>6} {'plain':>7}"
    print(header)
    for r in rows:
        o = r["overhead_s"]
        line = (f"{r['problem']:28} {r['status']:9} {r['reference_s']:6.2f} {statistics.median(r['fixed_s']):8.3f} "
                f"{o.get('setup_s', 0):6.3f} {o.get('setup_context_s', 0):7.3f} {o.get('save_s', 0):6.3f} "
                f"{o.get('gate_s', 0):6.3f} {o.get('compare_s', 0):8.3f} {o.get('exit_s', 0):6.3f} "
                f"{statistics.median(r['first_call_s'][1:] or r['first_call_s']):10.2f} {(r['trials_s'] or 0):9.2f} "
                f"{statistics.median(r['timing_s']):9.2f}")
        if "speedup_cv" in r:
            line += (f" {r['candidate_ms']:9.4f} {statistics.median(r['speedups']):8.3f} "
                     f"{100 * r['speedup_cv']:6.2f} {r['plain_speedup']:7.3f}")
        print(line)
    if device == "cuda":
        print("\ntiming phases (s, last verification): " + "; ".join(
            f"{r['problem']}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["timing_phases_s"].items()) for r in rows))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        name = f"verifier_bench_{device}{'_no_standby' if args.no_standby else ''}{'_no_preload' if args.no_preload else ''}"
        name += f"{'_cpu_compare' if args.cpu_compare else ''}.json"
        (args.out / name).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
