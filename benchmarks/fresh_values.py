"""What fresh values for every timed call cost, and what they change in the verdicts (GPU): the
benchmark that decides whether fresh timing (opt-in today, Verifier(fresh_timing=True)) becomes the
default. Honest speedups (b) must stay where they are with it off, as the GPU test
tests/gpu/test_timed_checks_gpu.py asks (within 3%), before it does.

One warm Verifier, one process, alternating; (c) runs before (b), so a tight --budget-s leaves out
starters, not memos:
(a) per timed call, on each problem's own inputs (the shipped examples, and one attention starter
    for all: they share their shapes): the refill before an event-timed call (fill), a back-to-back window's sets written
    at its start (fresh_values.Window, per call), keeping a copy of the output and its share of
    the digests, by CUDA events (device) and the host clock, beside the reference's forward;
(b) each shipped example and attention starter verified with fresh timing off (the trial sets in
    turn, no kept outputs, no checks: Verifier.fresh_timing=False, the default) and
    on, alternating (off then on, or on then off, by turns): eager's event median, the speedup, its
    source, the fixed cost (cost_s["fixed_s"]) and the timing phase's seconds;
(c) every memo fixture (tests/fixtures/cheats/memo_*.py) and precompute_from_request_seed.py with
    the static rules on and off, fresh timing on, beside its honest twin judged by the same verifier.

    PYTHONPATH=. python benchmarks/fresh_values.py [--only STEM ...] [--reps N] [--budget-s S] [--out DIR]

Stops starting new verifications past --budget-s (what is left is listed); prints short tables and
writes fresh_values.json (every verdict's numbers) to --out ($OUT or /tmp).
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
from kernelloop.tools.verify.fresh_values import Pool, Window
from kernelloop.tools.verify.kept_outputs import Kept, capacity
from kernelloop.tools.verify.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "kernelloop" / "evals" / "problems"
FIXTURES = ROOT / "tests" / "fixtures"
PAIRS = [(c, PROBLEMS / c.name) for c in sorted((ROOT / "examples" / "candidates").glob("*.py"))] + \
        [(c, PROBLEMS / "attention" / c.name) for c in sorted((ROOT / "examples" / "attention_candidates").glob("*.py"))]
CALLS = 64  # calls per cost measurement


def _events_ms(fn, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(calls):
        fn(i)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def _host_ms(fn, calls: int) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for i in range(calls):
        fn(i)
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed * 1000.0 / calls


def cost_per_call(problem: Problem) -> dict:
    """(a) for one problem, in ms per call."""
    module = problem.module
    torch.manual_seed(42)
    model = module.Model(*module.get_init_inputs()).cuda().eval()
    pool = Pool([to_device(make_inputs(module, seed, "cuda"), "cuda") for seed in (1, 2, 3)])
    buffers = pool.buffers()
    with torch.no_grad():
        outputs = [o for o in flatten_outputs(model(*buffers)) if isinstance(o, torch.Tensor)]
        specs = [[list(o.shape), str(o.dtype).removeprefix("torch.")] for o in outputs]
        calls = min(CALLS, capacity(sum(o.numel() * o.element_size() for o in outputs)))
        kept, window = Kept(specs, calls, "cuda"), Window(pool, calls, buffers)
        request = pool.request(seed=7, calls=calls)
        window.prepare(request)  # allocator warm, as warm_fresh_values does
        row = {"problem": problem.path.stem, "fresh": pool.fresh, "window_sets": window.fit,
               "fill_ms": _events_ms(lambda i: request.fill(buffers, i), calls),
               "fill_host_ms": _host_ms(lambda i: request.fill(buffers, i), calls),
               "keep_ms": _events_ms(lambda i: kept.keep(outputs), calls)}
        kept.reset()
        torch.cuda.synchronize()
        started = time.perf_counter()
        window.prepare(pool.request(seed=8, calls=calls))
        torch.cuda.synchronize()
        row["window_ms"] = (time.perf_counter() - started) * 1000.0 / calls
        kept.count = calls
        started = time.perf_counter()
        kept.digests()
        row["digest_ms"] = (time.perf_counter() - started) * 1000.0 / calls
        row["forward_ms"] = _events_ms(lambda i: model(*buffers), 20)
    return row


def _numbers(verdict, started: float) -> dict:
    eager, cand = verdict.timings.get("eager"), verdict.timings.get("candidate")
    return {"status": verdict.status.value, "code": verdict.code.value, "speedup": verdict.speedup,
            "source": "parent" if verdict.speed_source.startswith("parent") else ("events" if verdict.speed_source else "-"),
            "eager_ms": eager.median_ms if eager else None, "candidate_ms": cand.median_ms if cand else None,
            "host_ms": cand.host_ms_per_call if cand else None, "overhead_ms": cand.overhead_ms_per_call if cand else None,
            "fixed_s": verdict.cost_s.get("fixed_s"), "timing_s": verdict.cost_s.get("timing_s"),
            "wall_s": time.perf_counter() - started, "reason": verdict.reason[:120]}


def verify(verifier: Verifier, candidate: Path, problem: Path, fresh: bool = True, rules: bool = True) -> dict:
    verifier.fresh_timing, verifier.static_checks = fresh, rules
    started = time.perf_counter()
    verdict = verifier.verify(Candidate.from_file(candidate), Problem.from_file(problem))
    return _numbers(verdict, started)


def _f(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _med(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="candidate stems to run (default: all)")
    parser.add_argument("--reps", type=int, default=1, help="off/on pairs per candidate (alternating)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="start no verification past this")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/fresh_values.py needs a CUDA GPU")
    began = time.perf_counter()
    pairs = [(c, p) for c, p in PAIRS if not args.only or c.stem in args.only]
    memos = [m for m in sorted((FIXTURES / "cheats").glob("memo_*.py")) + [FIXTURES / "cheats" / "precompute_from_request_seed.py"]
             if not args.only or m.stem in args.only]
    out: dict = {"device": torch.cuda.get_device_name(), "costs": [], "examples": {}, "memos": {}, "skipped": []}
    print(out["device"], torch.__version__)

    print("\n(a) ms per timed call: block refill (fill), window sets (per call), keep, digest; forward for scale")
    print(f"{'problem':28} {'fill':>7} {'fill host':>9} {'window':>7} {'keep':>7} {'digest':>7} {'forward':>8} {'sets':>5}")
    # the attention starters share their shapes: one of them stands for all in (a)
    costed = [p for p in dict.fromkeys(p if p.parent.name != "attention" else min(q for _, q in pairs if q.parent == p.parent)
                                       for _, p in pairs)]
    for problem in costed:
        r = cost_per_call(Problem.from_file(problem))
        out["costs"].append(r)
        print(f"{r['problem'][:28]:28} {r['fill_ms']:7.4f} {r['fill_host_ms']:9.4f} {r['window_ms']:7.4f} "
              f"{r['keep_ms']:7.4f} {r['digest_ms']:7.4f} {r['forward_ms']:8.4f} {r['window_sets']:5d}", flush=True)
    torch.cuda.empty_cache()

    def in_budget(what: str) -> bool:
        if time.perf_counter() - began < args.budget_s:
            return True
        out["skipped"].append(what)
        return False

    with Verifier(device="cuda", workspace=args.out / "fresh-values-ws") as verifier:
        twins: dict = {}
        for memo in memos:
            header = {k.strip(): v.strip() for k, _, v in (line.lstrip("# ").partition(":")
                      for line in memo.read_text().splitlines() if line.startswith("# "))}
            problem = FIXTURES / "problems" / header["problem"]
            row: dict = {"twin": header.get("honest")}
            if row["twin"] and row["twin"] not in twins and in_budget(f"twin {row['twin']}"):
                twins[row["twin"]] = verify(verifier, FIXTURES / "honest" / row["twin"], problem)
            row["twin_run"] = twins.get(row["twin"])
            for rules in (True, False):
                if in_budget(f"{memo.stem} rules={'on' if rules else 'off'}"):
                    row["on" if rules else "off"] = verify(verifier, memo, problem, rules=rules)
            out["memos"][memo.stem] = row
        for index, (candidate, problem) in enumerate(pairs):
            runs: dict = {"off": [], "on": []}
            for rep in range(args.reps):  # which goes first alternates too: a problem's first verification is colder
                for fresh in ((False, True) if (index + rep) % 2 == 0 else (True, False)):
                    if in_budget(f"{candidate.stem} fresh={'on' if fresh else 'off'}"):
                        runs["on" if fresh else "off"].append(verify(verifier, candidate, problem, fresh=fresh))
            out["examples"][candidate.stem] = runs

    print("\n(b) speedup over eager, fresh timing off vs on (medians over reps); fixed and timing seconds")
    print(f"{'candidate':28} {'eager ms off/on':>16} {'off':>7} {'on':>7} {'on/off':>7} {'src':>6} "
          f"{'fixed s off/on':>15} {'timing s off/on':>16}")
    ratios: list[float] = []
    fixed: dict[str, list[float]] = {"off": [], "on": []}
    for stem, runs in out["examples"].items():
        med = {k: {f: _med([r[f] for r in v]) for f in ("eager_ms", "speedup", "fixed_s", "timing_s")} for k, v in runs.items()}
        off, on = med["off"], med["on"]
        ratio = on["speedup"] / off["speedup"] if on["speedup"] and off["speedup"] else None
        if ratio:
            ratios.append(ratio)
        for k in fixed:
            fixed[k] += [r["fixed_s"] for r in runs[k] if r["fixed_s"] is not None]
        src = runs["on"][-1]["source"] if runs["on"] else "-"
        bad = next((r for r in runs["off"] + runs["on"] if r["status"] != "correct"), None)
        print(f"{stem[:28]:28} {_f(off['eager_ms'], '.4f'):>7}/{_f(on['eager_ms'], '.4f'):<8} {_f(off['speedup']):>7} "
              f"{_f(on['speedup']):>7} {_f(ratio):>7} {src:>6} {_f(off['fixed_s'], '.2f'):>7}/{_f(on['fixed_s'], '.2f'):<7} "
              f"{_f(off['timing_s'], '.2f'):>7}/{_f(on['timing_s'], '.2f'):<8}"
              + (f" {bad['status']}: {bad['reason'][:50]}" if bad else ""))
    if ratios:
        print(f"on/off speedup: median {statistics.median(ratios):.3f}, worst |on/off - 1| "
              f"{max(abs(r - 1) for r in ratios):.3f}; fixed cost median off {_f(_med(fixed['off']), '.3f')} s, "
              f"on {_f(_med(fixed['on']), '.3f')} s")

    print("\n(c) memo fixtures, fresh timing on: rules on, rules off, the honest twin")
    print(f"{'memo':28} {'rules on':>24} {'rules off':>24} {'twin':>7} {'off/twin':>8}")
    for stem, row in out["memos"].items():
        def cell(r: dict | None) -> str:
            return "-" if r is None else f"{r['status'][:9]} {_f(r['speedup'])} {r['source'] if r['speedup'] else ''}"
        twin = (row.get("twin_run") or {}).get("speedup")
        unlinted = (row.get("off") or {}).get("speedup")
        print(f"{stem[:28]:28} {cell(row.get('on')):>24} {cell(row.get('off')):>24} {_f(twin):>7} "
              f"{_f(unlinted / twin if unlinted and twin else None):>8}")
    if out["skipped"]:
        print(f"\nskipped past --budget-s {args.budget_s:g}: {', '.join(out['skipped'])}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fresh_values.json").write_text(json.dumps(out, indent=1, default=str))
    print(f"wrote {args.out / 'fresh_values.json'} in {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
