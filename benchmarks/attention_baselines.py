"""Time the attention problems' baselines alone (eager vs FlexAttention vs torch.compile) on a GPU.

Uses only the verifier (torch, triton, nvidia-ml-py), so it runs on a bare GPU node:
    python benchmarks/attention_baselines.py [variant-stem ...]
    python benchmarks/attention_baselines.py --kernels [variant-stem ...]
        FlexAttention's own kernels per variant (torch.profiler, in this process): which kernels
        take its time, and whether Dynamo recompiled or fell back to the unfused path.
"""

import argparse
from pathlib import Path

from kernelloop.problem import Problem
from kernelloop.tools.verify.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1] / "kernelloop" / "evals" / "problems" / "attention"


def time_baselines(paths: list[Path]) -> None:
    print(f"{'variant':24} {'eager ms':>10} {'compile ms':>11} {'flex ms':>9} {'flex vs eager':>14}", flush=True)
    with Verifier(device="cuda") as verifier:
        for path in paths:
            timed = verifier.time_baselines(Problem.from_file(path))["timings"]
            eager, flex = timed["eager"].median_ms, timed.get("flex_attention")
            compiled = timed.get("compile")
            print(f"{path.stem:24} {eager:10.3f} {compiled.median_ms if compiled else float('nan'):11.3f} "
                  f"{flex.median_ms if flex else float('nan'):9.3f} {eager / flex.median_ms if flex else float('nan'):13.2f}x",
                  flush=True)


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
            rows = kernel_table(lambda: flex(*sets[0]), iters=5)
        frames = dict(torch._dynamo.utils.counters["frames"])
        recompiles = dict(torch._dynamo.utils.counters["recompiles"]) if "recompiles" in torch._dynamo.utils.counters else {}
        print(f"\n{path.stem}: dynamo frames {frames} recompiles {recompiles or 0}", flush=True)
        for row in rows[:6]:
            print(f"  {row.mean_ms:9.4f} ms x{row.calls // 5:<3} {row.percent:5.1f}%  {row.name[:110]}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", help="problem stems (default: all)")
    parser.add_argument("--kernels", action="store_true", help="FlexAttention's kernels per variant instead of timings")
    args = parser.parse_args()
    wanted = set(args.variants)
    paths = [p for p in sorted(ROOT.glob("[0-9]*.py")) if not wanted or p.stem in wanted]
    (flex_kernels if args.kernels else time_baselines)(paths)


if __name__ == "__main__":
    main()
