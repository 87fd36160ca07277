"""How finely CUDA events time a small kernel: the distinct values of many event timings of one call.

Five verifications of 6_MatmulFP16 read its eager median at 0.0101-0.0108 ms (docs/results/
h200_trusted_speed/run9): if events tick in steps of about 0.5 us, a 10 us kernel's median can only
move in 5% steps, and a spread of a few percent is the clock's, not the kernel's. This prints, for a
few sizes of one fp16 GEMM timed as the verifier times a call (L2 flushed, events around it), the
distinct elapsed times seen, the smallest step between them, and the median against the mean.

    PYTHONPATH=. python benchmarks/event_resolution.py [--calls N]
"""

from __future__ import annotations

import argparse
import statistics

import torch


def timings(fn, calls: int) -> list[float]:
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    out = []
    for _ in range(calls):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/event_resolution.py needs a CUDA GPU")
    print(torch.cuda.get_device_name(), torch.__version__)
    print(f"{'gemm':>16} {'median ms':>10} {'mean ms':>10} {'distinct':>8} {'step us':>8}  first values (ms)")
    for n in (256, 512, 1024, 2048):
        a = torch.randn(n, n, device="cuda", dtype=torch.float16)
        b = torch.randn(n, n, device="cuda", dtype=torch.float16)
        values = timings(lambda a=a, b=b: a @ b, args.calls)
        distinct = sorted(set(values))
        steps = [y - x for x, y in zip(distinct, distinct[1:]) if y > x]
        print(f"{f'{n}x{n}x{n}':>16} {statistics.median(values):10.5f} {statistics.fmean(values):10.5f} "
              f"{len(distinct):8d} {min(steps) * 1000 if steps else 0:8.3f}  {[round(v, 5) for v in distinct[:8]]}")


if __name__ == "__main__":
    main()
