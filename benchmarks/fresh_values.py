"""Speed you can trust by default (GPU): what fresh timing and the clock rule give honest kernels and
memos, and what they cost.

One warm Verifier, one process; (c) runs before (b), so a tight --budget-s leaves out examples,
not memos:
(a) (--costs) per timed call, on each problem's own inputs (the shipped examples, and one attention
    starter for all: they share their shapes): the refill before an event-timed call (fill), a
    back-to-back window's sets written at its start (fresh_values.Window, per call), keeping a copy
    of the output and its share of the digests, beside the reference's forward;
(b) each shipped example and attention starter verified --reps times with default settings (fresh
    timing) and --off times with fresh timing off (spread among them): the speedup, the events' own
    speedup, which clock decided each side, the spread over the verifications, and the cost (the
    fixed cost, cost_s["fixed_s"], and the timing phase's seconds) on and off;
(c) every memo fixture (tests/fixtures/cheats/memo_*.py) and precompute_from_request_seed.py with
    the static rules on and off, default settings, beside its honest twin judged by the same verifier.

    PYTHONPATH=. python benchmarks/fresh_values.py [--only STEM ...] [--reps N] [--off M] [--budget-s S] [--out DIR]
    python benchmarks/fresh_values.py --report DIR    # DIR/README.md from DIR/fresh_values.json

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
    factor = lambda t: (t.counted_ms or t.median_ms) / t.median_ms  # noqa: E731 - the clock rule's part of a speedup
    return {"status": verdict.status.value, "code": verdict.code.value, "speedup": verdict.speedup,
            # the events' own speedup: the verdict's (paired rounds) without either side's clock factor
            "event_speedup": verdict.speedup * factor(cand) / factor(eager) if verdict.speedup and eager and cand else None,
            "candidate_clock": cand.clock if cand else None, "eager_clock": eager.clock if eager else None,
            "speed_source": verdict.speed_source,
            "eager_ms": eager.median_ms if eager else None, "candidate_ms": cand.median_ms if cand else None,
            "host_ms": cand.host_ms_per_call if cand else None, "eager_host_ms": eager.host_ms_per_call if eager else None,
            "overhead_ms": cand.overhead_ms_per_call if cand else None,
            "fixed_s": verdict.cost_s.get("fixed_s"), "timing_s": verdict.cost_s.get("timing_s"),
            "wall_s": time.perf_counter() - started,
            # a verdict other than correct keeps its whole reason and where it was wrong (an honest kernel's is a bug)
            "reason": verdict.reason if verdict.status.value != "correct" else verdict.reason[:120],
            "feedback": verdict.feedback[-3000:] if verdict.status.value != "correct" else "",
            "phases_s": {k: round(v, 3) for k, v in verdict.cost_s.items() if k.startswith("phase_")},
            # inside the timing phases: where the rounds' and the windows' wall time went (timing_driver.TIMING_PARTS)
            "timing_parts_s": {k: round(v, 3) for k, v in verdict.cost_s.items()
                               if (k.startswith("timing_") and k != "timing_s") or k.startswith("child_timing_setup")},
            # replayed windows' steps per side (fill, run, keep, excess: ms), to calibrate the clock's allowance
            "window_steps_ms": {name: t.window_steps_ms for name, t in verdict.timings.items() if t.window_steps_ms},
            # each side's events beyond the median: an outlier verification (run 13's 4_RMSNorm, 8x) shows here
            # whether its rounds moved together (min up too) or a part of them (min unchanged, iqr wide)
            "events_ms": {name: {"min": t.min_ms, "median": t.median_ms, "iqr": t.iqr_ms, "mean": t.mean_ms,
                                 "samples": t.samples} for name, t in verdict.timings.items()}}


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
    parser.add_argument("--reps", type=int, default=5, help="verifications of each candidate with default settings")
    parser.add_argument("--off", type=int, default=1, help="verifications of each with fresh timing off (its cost)")
    parser.add_argument("--costs", action="store_true", help="(a): each problem's per-call costs of fresh values")
    parser.add_argument("--no-memos", dest="memos", action="store_false", help="leave out (c)")
    parser.add_argument("--report", type=Path, help="write DIR/README.md from DIR/fresh_values.json, then stop")
    parser.add_argument("--budget-s", type=float, default=480.0, help="start no verification past this")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    args = parser.parse_args()
    if args.report:
        write_report(args.report)
        return
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/fresh_values.py needs a CUDA GPU")
    began = time.perf_counter()
    pairs = [(c, p) for c, p in PAIRS if not args.only or c.stem in args.only]
    memos = [m for m in sorted((FIXTURES / "cheats").glob("memo_*.py")) + [FIXTURES / "cheats" / "precompute_from_request_seed.py"]
             if args.memos and (not args.only or m.stem in args.only)]
    out: dict = {"device": torch.cuda.get_device_name(), "costs": [], "examples": {}, "memos": {}, "skipped": []}
    print(out["device"], torch.__version__)

    print("\n(a) ms per timed call: block refill (fill), window sets (per call), keep, digest; forward for scale")
    print(f"{'problem':28} {'fill':>7} {'fill host':>9} {'window':>7} {'keep':>7} {'digest':>7} {'forward':>8} {'sets':>5}")
    # the attention starters share their shapes: one of them stands for all in (a)
    costed = [p for p in dict.fromkeys(p if p.parent.name != "attention" else min(q for _, q in pairs if q.parent == p.parent)
                                       for _, p in pairs)]
    for problem in costed if args.costs else []:
        r = cost_per_call(Problem.from_file(problem))
        out["costs"].append(r)
        print(f"{r['problem'][:28]:28} {r['fill_ms']:7.4f} {r['fill_host_ms']:9.4f} {r['window_ms']:7.4f} "
              f"{r['keep_ms']:7.4f} {r['digest_ms']:7.4f} {r['forward_ms']:8.4f} {r['window_sets']:5d}", flush=True)
    torch.cuda.empty_cache()

    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every verification: a call cut short keeps what it measured
        (args.out / "fresh_values.json").write_text(json.dumps(out, indent=1, default=str))

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
            out["memos"][memo.stem] = row
            for rules in (True, False):
                if in_budget(f"{memo.stem} rules={'on' if rules else 'off'}"):
                    row["on" if rules else "off"] = _said(memo.stem, verify(verifier, memo, problem, rules=rules))
                    save()
        for index, (candidate, problem) in enumerate(pairs):
            runs: dict = {"off": [], "on": []}
            # the off runs spread among the on runs, first or not by turns: a problem's first verification is colder
            order = [True] * args.reps
            for k in range(args.off):
                order.insert(min(len(order), (index + 2 * k) % (args.reps + 1)), False)
            out["examples"][candidate.stem] = runs
            for fresh in order:
                if in_budget(f"{candidate.stem} fresh={'on' if fresh else 'off'}"):
                    runs["on" if fresh else "off"].append(_said(candidate.stem, verify(verifier, candidate, problem, fresh=fresh)))
                    save()

    print(tables(out))
    if out["skipped"]:
        print(f"\nskipped past --budget-s {args.budget_s:g}: {', '.join(out['skipped'])}")
    save()
    print(f"wrote {args.out / 'fresh_values.json'} in {time.perf_counter() - began:.0f} s")


def _said(stem: str, row: dict) -> dict:
    """One line as each verification ends (the log shows where a call's time went), and the row."""
    print(f"  {stem[:32]:32} {row['status']:>13} {_f(row.get('speedup')):>8} {row.get('wall_s', 0):6.1f} s", flush=True)
    return row


def tables(out: dict) -> str:
    """(b) and (c) as text tables, from the raw numbers (fresh_values.json)."""
    lines = ["(b) default settings (fresh timing), per candidate over its verifications: the speedup over eager "
             "(median), the events' own speedup (eager's event median over the candidate's), their ratio, the "
             "spread of the speedup (max/min), which clock decided the candidate's and eager's time in each, and "
             "the cost: fixed and timing seconds, fresh timing on/off",
             "(the events' speedup is the verdict's over paired rounds with both clock factors taken out; in runs "
             "made before it was kept, eager's event median over the candidate's)",
             f"{'candidate':28} {'n':>2} {'speedup':>8} {'events':>8} {'ratio':>6} {'spread':>6} {'clocks':>22} "
             f"{'fixed s on/off':>15} {'timing s on/off':>16}"]
    ratios, spreads, fixed = [], [], {"on": [], "off": []}
    for stem, runs in out["examples"].items():
        on = [r for r in runs["on"] if r["status"] == "correct" and r["speedup"]]
        bad = next((r for r in runs["on"] + runs["off"] if r["status"] != "correct"), None)
        speed, events = _med([r["speedup"] for r in on]), _med([r["event_speedup"] for r in on])
        ratio = speed / events if speed and events else None
        spread = max(r["speedup"] for r in on) / min(r["speedup"] for r in on) if on else None
        clocks = sorted({f"{r['candidate_clock'] or '-'}/{r['eager_clock'] or '-'}" for r in on})
        for key in fixed:
            fixed[key] += [r["fixed_s"] for r in runs[key] if r["fixed_s"] is not None]
        if ratio:
            ratios.append(ratio)
        if spread:
            spreads.append(spread)
        cost = {k: {f: _med([r[f] for r in runs[k]]) for f in ("fixed_s", "timing_s")} for k in ("on", "off")}
        lines.append(f"{stem[:28]:28} {len(on):>2} {_f(speed):>8} {_f(events):>8} {_f(ratio):>6} {_f(spread):>6} "
                     f"{','.join(c.replace('parent clock', 'parent') for c in clocks)[:22]:>22} "
                     f"{_f(cost['on']['fixed_s'], '.2f'):>7}/{_f(cost['off']['fixed_s'], '.2f'):<7} "
                     f"{_f(cost['on']['timing_s'], '.2f'):>7}/{_f(cost['off']['timing_s'], '.2f'):<8}"
                     + (f" {bad['status']}: {bad['reason'][:60]}" if bad else ""))
    if ratios:
        lines.append(f"speedup/events: median {statistics.median(ratios):.3f}, worst |ratio - 1| "
                     f"{max(abs(r - 1) for r in ratios):.3f}; spread worst {max(spreads):.3f}; fixed cost median on "
                     f"{_f(_med(fixed['on']), '.3f')} s, off {_f(_med(fixed['off']), '.3f')} s")
    lines += _phase_table(out) + _parts_table(out)
    if out["memos"]:
        lines += ["", "(c) memo fixtures, default settings: static rules on, off, the honest twin (speedup, clock)",
                  f"{'memo':34} {'rules on':>28} {'rules off':>28} {'twin':>7} {'off/twin':>8}"]
    for stem, row in out["memos"].items():
        def cell(r: dict | None) -> str:
            return "-" if r is None else f"{r['status'][:9]} {_f(r['speedup'])} {r.get('candidate_clock') or ''}"
        twin = (row.get("twin_run") or {}).get("speedup")
        unlinted = (row.get("off") or {}).get("speedup")
        lines.append(f"{stem[:34]:34} {cell(row.get('on')):>28} {cell(row.get('off')):>28} {_f(twin):>7} "
                     f"{_f(unlinted / twin if unlinted and twin else None):>8}")
    return "\n".join(lines)


def _phase_table(out: dict) -> list[str]:
    """(d) where a run kept each verdict's phases: the timing phase's parts, median seconds, fresh timing on/off
    (baselines set up, the rounds, the back-to-back windows; with fresh timing off the rounds are inside
    "timing"), and the whole verification's wall time."""
    parts = ("phase_baselines_s", "phase_rounds_s", "phase_timing_s")
    rows = {stem: runs for stem, runs in out["examples"].items()
            if any(r.get("phases_s") for r in runs["on"] + runs["off"])}
    if not rows:
        return []
    lines = ["", "(d) the timing phase's parts, median seconds a verification, fresh timing on/off: baselines set up, "
                 "rounds (on only: off, they are inside timing), windows (timing), and the verification's wall time",
             f"{'candidate':28} {'baselines':>11} {'rounds':>6} {'timing':>11} {'wall':>11}"]
    for stem, runs in rows.items():
        med = {k: {f: _med([(r.get("phases_s") or {}).get(f) for r in runs[k] if (r.get("phases_s") or {}).get(f) is not None])
                   for f in parts} for k in ("on", "off")}
        wall = {k: _med([r["wall_s"] for r in runs[k]]) for k in ("on", "off")}
        lines.append(f"{stem[:28]:28} {_f(med['on']['phase_baselines_s'], '.2f'):>5}/{_f(med['off']['phase_baselines_s'], '.2f'):<5} "
                     f"{_f(med['on']['phase_rounds_s'], '.2f'):>6} "
                     f"{_f(med['on']['phase_timing_s'], '.2f'):>5}/{_f(med['off']['phase_timing_s'], '.2f'):<5} "
                     f"{_f(wall['on'], '.2f'):>5}/{_f(wall['off'], '.2f'):<5}")
    return lines


def _parts_table(out: dict) -> list[str]:
    """(e) where a run kept them: inside fresh timing, the parent's clock around each part (median seconds a
    verification; timing_driver.TIMING_PARTS says what each is)."""
    from kernelloop.tools.verify.timing_driver import TIMING_PARTS

    rows = {stem: runs["on"] for stem, runs in out["examples"].items() if any(r.get("timing_parts_s") for r in runs["on"])}
    if not rows:
        return []
    keys = [f"timing_{part}" for part in TIMING_PARTS]
    short = [part.removesuffix("_s") for part in TIMING_PARTS]
    lines = ["", "(e) fresh timing's parts, median seconds a verification: " + "; ".join(
        f"{name}: {what}" for name, what in zip(short, TIMING_PARTS.values())),
        f"{'candidate':28} " + " ".join(f"{name[:15]:>15}" for name in short)]
    for stem, runs in rows.items():
        cells = [_med([(r.get("timing_parts_s") or {}).get(k) for r in runs if (r.get("timing_parts_s") or {}).get(k) is not None])
                 for k in keys]
        lines.append(f"{stem[:28]:28} " + " ".join(f"{_f(c, '.2f'):>15}" for c in cells))
    return lines


def write_report(folder: Path) -> None:
    """DIR/README.md, made from DIR/fresh_values.json (the raw numbers beside it) by this script alone."""
    out = json.loads((folder / "fresh_values.json").read_text())
    notes = (folder / "notes.md").read_text().strip() + "\n\n" if (folder / "notes.md").is_file() else ""
    text = (f"# Trusted speed by default, measured on {out['device']}\n\n"
            "Made by `python benchmarks/fresh_values.py --report DIR` from `fresh_values.json` (every verdict's "
            "numbers) and `notes.md` (what the run was) beside it.\n\n" + notes + "```\n"
            + tables(out) + "\n```\n"
            + (f"\nNot run within the call's budget: {', '.join(out['skipped'])}\n" if out.get("skipped") else ""))
    (folder / "README.md").write_text(text)
    print(f"wrote {folder / 'README.md'}")


if __name__ == "__main__":
    main()
