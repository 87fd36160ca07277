"""What fresh values for every timed call cost, and what they change in the verdicts (GPU).

(a) The cost per timed call, in this process, on each shipped example problem's own inputs
    (kernelloop/evals/problems): writing fresh values into the input buffers (the refill), keeping
    a copy of the output and its share of the request's digests, by CUDA events (device) and the
    host clock (enqueue), next to the reference's own forward. None of it is inside a timed call:
    in the timed rounds it runs before the flush or after the stop event; back to back, the
    trusted job times the same work alone and the parent takes it off the candidate's time.
(b) Each shipped example (examples/candidates) verified twice by one warm Verifier: "before",
    timed as the verifier did before fresh values (the trial sets in turn, no kept outputs, no
    checks: Verifier(fresh_timing=False), which nothing else uses), and "after"; the speedups
    over eager side by side. With --memos, the memo fixtures and their honest twins
    (tests/fixtures/cheats/memo_*.py, static rules off) the same way: before, a memo that hits
    reads faster than its twin; after, no faster.

    python benchmarks/fresh_values.py [--only STEM ...] [--memos] [--out DIR]

About 5-7 minutes on an H100 for all 13 examples (torch.compile of each problem's baseline is most
of it); --only for a subset. Prints a table and writes fresh_values.json to --out ($OUT or /tmp).
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
from kernelloop.tools.verify._runtime import make_inputs, to_device
from kernelloop.tools.verify.compare import flatten_outputs
from kernelloop.tools.verify.fresh_values import Pool
from kernelloop.tools.verify.kept_outputs import Kept, capacity
from kernelloop.tools.verify.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "kernelloop" / "evals" / "problems"
CANDIDATES = ROOT / "examples" / "candidates"
FIXTURES = ROOT / "tests" / "fixtures"
CALLS = 100  # calls per cost measurement


def _events_ms(fn, calls: int) -> float:
    """Device time per call of `fn(i)` over `calls` calls, by events around the whole run."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(calls):
        fn(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _host_ms(fn, calls: int) -> float:
    """Host time per call to enqueue `fn(i)` (no synchronize inside)."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed * 1000.0 / calls


def cost_of_fresh_values(problem: Problem) -> dict:
    """(a) for one problem: refill, keep and digest per call against the reference's forward."""
    module = problem.module
    torch.manual_seed(42)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    sets = [to_device(make_inputs(module, seed, "cuda"), "cuda") for seed in (1, 2, 3)]
    pool = Pool(sets)
    buffers = pool.buffers()
    with torch.no_grad():
        outputs = [o for o in flatten_outputs(model(*buffers)) if isinstance(o, torch.Tensor)]
        specs = [[list(o.shape), str(o.dtype).removeprefix("torch.")] for o in outputs]
        output_bytes = sum(o.numel() * o.element_size() for o in outputs)
        calls = min(CALLS, capacity(output_bytes))
        kept = Kept(specs, calls, "cuda")
        request = pool.request(seed=7, calls=calls)
        refill_ms = _events_ms(lambda i: request.fill(buffers, i), calls)
        refill_host_ms = _host_ms(lambda i: request.fill(buffers, i), calls)
        keep_ms = _events_ms(lambda i: kept.keep(outputs), calls)
        kept.reset()
        keep_host_ms = _host_ms(lambda i: kept.keep(outputs), calls)
        started = time.perf_counter()
        kept.digests()
        digest_ms = (time.perf_counter() - started) * 1000.0 / calls
        forward_ms = _events_ms(lambda i: model(*buffers), 20)
        forward_host_ms = _host_ms(lambda i: model(*buffers), 20)
    overhead_ms = refill_ms + keep_ms + digest_ms
    return {"problem": problem.path.stem, "input_mb": sum(t.numel() * t.element_size() for t in buffers
                                                          if isinstance(t, torch.Tensor)) / 1e6,
            "output_mb": output_bytes / 1e6, "fresh": pool.fresh, "refill_ms": refill_ms, "refill_host_ms": refill_host_ms,
            "keep_ms": keep_ms, "keep_host_ms": keep_host_ms, "digest_ms_per_call": digest_ms,
            "forward_ms": forward_ms, "forward_host_ms": forward_host_ms,
            "overhead_over_forward": overhead_ms / forward_ms if forward_ms else None}


def verify_twice(verifier: Verifier, candidate: Path, problem: Path) -> dict:
    """(b) one candidate verified before (no fresh values) and after, by the same warm verifier."""
    row: dict = {"candidate": candidate.stem}
    for label, fresh in (("before", False), ("after", True)):
        verifier.fresh_timing = fresh
        started = time.perf_counter()
        verdict = verifier.verify(Candidate.from_file(candidate), Problem.from_file(problem))
        stats = verdict.timings.get("candidate")
        row[label] = {"status": verdict.status.value, "code": verdict.code.value, "speedup": verdict.speedup,
                      "noise_floor": verdict.noise_floor, "speed_source": verdict.speed_source,
                      "event_ms": stats.median_ms if stats else None,
                      "host_ms": stats.host_ms_per_call if stats else None,
                      "overhead_ms": stats.overhead_ms_per_call if stats else None,
                      "timing_s": verdict.cost_s.get("timing_s"), "wall_s": time.perf_counter() - started,
                      "reason": verdict.reason[:160]}
    verifier.fresh_timing = True
    return row


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def print_costs(rows: list[dict]) -> None:
    print("\n(a) fresh values per timed call (this process, CUDA events; host = enqueue time)")
    print(f"{'problem':28} {'in MB':>7} {'out MB':>7} {'refill ms':>10} {'keep ms':>8} {'digest ms':>10} "
          f"{'forward ms':>11} {'overhead/fwd':>12} {'refill host':>12}")
    for r in rows:
        print(f"{r['problem']:28} {r['input_mb']:7.2f} {r['output_mb']:7.2f} {r['refill_ms']:10.4f} {r['keep_ms']:8.4f} "
              f"{r['digest_ms_per_call']:10.4f} {r['forward_ms']:11.4f} {_fmt(r['overhead_over_forward'], '.2f'):>12} "
              f"{r['refill_host_ms']:12.4f}")


def print_verdicts(title: str, rows: list[dict]) -> None:
    print(f"\n{title}")
    print(f"{'candidate':34} {'before':>8} {'after':>8} {'after/before':>12} {'overhead ms':>11} "
          f"{'source (after)':>16} {'timing s b/a':>13}  verdict (after)")
    for r in rows:
        b, a = r["before"], r["after"]
        ratio = a["speedup"] / b["speedup"] if a["speedup"] and b["speedup"] else None
        source = "events" if a["speed_source"].startswith("events") else ("parent" if a["speed_source"] else "-")
        timing = f"{_fmt(b['timing_s'], '.1f')}/{_fmt(a['timing_s'], '.1f')}"
        verdict = a["status"] if a["status"] == "correct" else f"{a['status']}: {a['reason'][:60]}"
        print(f"{r['candidate']:34} {_fmt(b['speedup']):>8} {_fmt(a['speedup']):>8} {_fmt(ratio):>12} "
              f"{_fmt(a['overhead_ms'], '.4f'):>11} {source:>16} {timing:>13}  {verdict}")
    ratios = [r["after"]["speedup"] / r["before"]["speedup"] for r in rows
              if r["after"]["speedup"] and r["before"]["speedup"]]
    if ratios:
        print(f"after/before: median {statistics.median(ratios):.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="example stems to run (default: all)")
    parser.add_argument("--memos", action="store_true", help="also the memo fixtures and their honest twins")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/fresh_values.py needs a CUDA GPU")
    examples = [c for c in sorted(CANDIDATES.glob("*.py")) if not args.only or c.stem in args.only]
    print(torch.cuda.get_device_name(), torch.__version__)
    results: dict = {"device": torch.cuda.get_device_name(), "costs": [], "examples": [], "memos": []}
    for candidate in examples:
        results["costs"].append(cost_of_fresh_values(Problem.from_file(PROBLEMS / candidate.name)))
    print_costs(results["costs"])
    with Verifier(device="cuda", workspace=args.out / "fresh-values-ws") as verifier:
        for candidate in examples:
            results["examples"].append(verify_twice(verifier, candidate, PROBLEMS / candidate.name))
            print(f"  {candidate.stem}: {results['examples'][-1]['before']['speedup']} -> "
                  f"{results['examples'][-1]['after']['speedup']}", flush=True)
    print_verdicts("(b) shipped examples: speedup over eager, before and after fresh values", results["examples"])
    if args.memos:
        memo_files = sorted((FIXTURES / "cheats").glob("memo_*.py"))
        twins = sorted({FIXTURES / "honest" / line.split(":", 1)[1].strip() for path in memo_files
                        for line in path.read_text().splitlines() if line.startswith("# honest:")})
        with Verifier(device="cuda", workspace=args.out / "fresh-values-memos", static_checks=False) as verifier:
            for path in twins + memo_files:
                header = {k.strip(): v.strip() for k, _, v in (line.lstrip("# ").partition(":")
                          for line in path.read_text().splitlines() if line.startswith("# problem:"))}
                results["memos"].append(verify_twice(verifier, path, FIXTURES / "problems" / header["problem"]))
        print_verdicts("memo fixtures and their honest twins (static rules off)", results["memos"])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fresh_values.json").write_text(json.dumps(results, indent=1, default=str))
    print(f"\nwrote {args.out / 'fresh_values.json'}")


if __name__ == "__main__":
    main()
