"""The hand-written attention starters on a GPU: verified, then timed against FlexAttention and SDPA.

Needs only torch, triton and this source tree (no pydantic), so it runs on a bare GPU node:

  python benchmarks/attention_starters.py --out FILE.jsonl [--variants 1_causal_mask ...] [--budget-s 540]
      each starter verified by the verifier (realistic shape, irregular variant, fresh inputs),
      then timed in this process with kernelloop's timing module (interleaved rounds, L2 flush,
      device hold: the verifier's method) against FlexAttention (compiled, as its users run it)
      and SDPA's flash and cuDNN backends where SDPA computes the variant. One JSON line each.
  python benchmarks/attention_starters.py --sweep --out FILE.jsonl [--variants ...]
      block sizes, warps and stages (SWEEP) for each starter, timed against each other in the same
      rounds, each checked against the reference first; one JSON line per config, a table at the end.
  python benchmarks/attention_starters.py --report DIR
      DIR/README.md from the raw .jsonl files in DIR (nothing in it is typed by hand).

Variants already in FILE are skipped, so a run cut short by --budget-s goes on where it stopped.
Every run ends with a line {"call": ...} holding its wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from kernelloop.problem import Candidate, Problem, import_source, load_dir

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "kernelloop" / "evals" / "problems" / "attention"
EXAMPLES = ROOT / "examples" / "attention_candidates"
FLEX = "flex_attention"
STARTER = "starter"
# (BLOCK_M, BLOCK_N, num_warps, num_stages): the usual Hopper starting points around 128 x 64
SWEEP = [(128, 64, 4, 3), (128, 64, 4, 4), (128, 64, 4, 2), (128, 64, 8, 3), (128, 128, 8, 3), (128, 128, 8, 2),
         (64, 64, 4, 3), (128, 32, 4, 4)]


def _config(block_m: int, block_n: int, warps: int, stages: int) -> dict[str, int]:
    return {"BLOCK_M": block_m, "BLOCK_N": block_n, "num_warps": warps, "num_stages": stages}


def _label(config: dict[str, int]) -> str:
    return f"{config['BLOCK_M']}x{config['BLOCK_N']} w{config['num_warps']} s{config['num_stages']}"


def _environment() -> dict:
    import triton

    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}


def _load(problem: Problem):
    module = problem.module
    sys.modules.setdefault(module.__name__, module)  # torch.compile re-imports a score_mod's module by name
    return module


def _input_sets(module, count: int = 3) -> list[list[torch.Tensor]]:
    sets = []
    for seed in range(count):
        torch.manual_seed(seed)
        sets.append([x.cuda() for x in module.get_inputs()])
    return sets


def _time(fns: dict, n_sets: int, candidate: str) -> dict[str, dict]:
    """Median, IQR and per-round ratios against `candidate` (ratio > 1: the candidate is faster)."""
    from kernelloop.tools.profile.timing import speedup_from_rounds, summarize, time_interleaved

    samples = time_interleaved(fns, n_sets, candidate=candidate)
    stats = {name: summarize(name, values) for name, values in samples.items()}
    return {name: {"median_ms": s.median_ms, "iqr_ms": s.iqr_ms, "samples": s.samples,
                   "candidate_speedup": speedup_from_rounds(samples[name], samples[candidate])}
            for name, s in stats.items()}


def _write(out, row: dict) -> None:
    out.write(json.dumps(row) + "\n")
    out.flush()
    print(json.dumps(row), flush=True)


def _done(path: Path, key: str) -> set[str]:
    if not path.is_file():
        return set()
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {row[key] for row in rows if key in row}


# --------------------------------------------------------------------------- starters vs baselines


def bench_starter(problem: Problem, verifier, verify: bool) -> dict:
    """One starter: the verifier's verdict, then starter vs FlexAttention vs SDPA in the same rounds."""
    module = _load(problem)
    row: dict = {"variant": problem.name}
    started = time.perf_counter()
    if verify:
        verdict = verifier.verify(Candidate.from_file(EXAMPLES / f"{problem.name}.py"), problem)
        row.update(status=verdict.status.value, reason=verdict.reason, rel_err=verdict.rel_err,
                   verify_s=round(time.perf_counter() - started, 2))
        if verdict.status.value != "correct":
            return row
    torch._dynamo.reset()  # each variant from a clean compiler, as in its own verifier child
    starter = import_source(EXAMPLES / f"{problem.name}.py", f"starter_{problem.number}")
    sets = _input_sets(module)
    model = starter.ModelNew()
    fns = {STARTER: lambda i: model(*sets[i])}
    compile_s = {}
    for name, baseline in module.get_baselines().items():
        callable_ = baseline().cuda()
        began = time.perf_counter()
        with torch.no_grad():
            callable_(*sets[0])  # the compile, outside the timed rounds
        torch.cuda.synchronize()
        compile_s[name] = round(time.perf_counter() - began, 2)
        fns[name] = (lambda c: lambda i: c(*sets[i]))(callable_)
    with torch.no_grad():
        timed = _time(fns, len(sets), STARTER)
    baselines = {name: t for name, t in timed.items() if name != STARTER}
    best = min(baselines, key=lambda name: baselines[name]["median_ms"])
    row.update(config=starter.CONFIG, ms={name: t["median_ms"] for name, t in timed.items()},
               iqr_ms={name: t["iqr_ms"] for name, t in timed.items()}, samples=timed[STARTER]["samples"],
               speedup={name: t["candidate_speedup"] for name, t in baselines.items()},
               best_available=best, speedup_over_best=baselines[best]["candidate_speedup"],
               compile_s=compile_s, wall_s=round(time.perf_counter() - started, 2))
    return row


# --------------------------------------------------------------------------- config sweep


def sweep(problem: Problem) -> list[dict]:
    """Every SWEEP config of one starter, each checked against the reference, then timed together."""
    from kernelloop.tools.verify.compare import compare_one

    module = _load(problem)
    starter = import_source(EXAMPLES / f"{problem.name}.py", f"sweep_{problem.number}")
    sets = _input_sets(module)
    with torch.no_grad():
        reference = module.Model().cuda()(*sets[0])
    rows, fns = [], {}
    for config in [_config(*c) for c in SWEEP]:
        label = _label(config)
        row = {"sweep": problem.name, "config": config, "label": label, "default": config == starter.CONFIG}
        try:
            began = time.perf_counter()
            out = _with_config(starter, problem.name, sets, config)(0)
            torch.cuda.synchronize()
            row["compile_s"] = round(time.perf_counter() - began, 2)
            comparison = compare_one(out, reference, 0, module.TOLERANCE)
            row.update(ok=comparison.ok, reason=comparison.reason)
        except Exception as exc:  # noqa: BLE001 - a config the GPU can't hold (shared memory, registers) is a row
            row.update(ok=False, reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
        rows.append(row)
        if row["ok"]:
            fns[label] = _with_config(starter, problem.name, sets, config)
    if fns:
        default = next((r["label"] for r in rows if r["default"] and r["ok"]), next(iter(fns)))
        timed = _time(fns, len(sets), default)
        for row in rows:
            if row["label"] in timed:
                row.update(median_ms=timed[row["label"]]["median_ms"], iqr_ms=timed[row["label"]]["iqr_ms"])
    return rows


def _with_config(starter, name: str, sets: list, config: dict):
    return lambda i: starter.attention(*sets[i][:3], *_extra(name, sets[i]), config=config)


def _extra(name: str, inputs: list) -> list:
    """attention()'s arguments after q, k, v for this variant (its one extra input, or the grid width)."""
    if len(inputs) > 3:
        return [inputs[3]]
    if name.endswith("neighborhood_2d"):
        return [None, math.isqrt(inputs[0].shape[-2])]
    return []


def sweep_table(rows: list[dict]) -> list[str]:
    lines = [f"{'variant':26} {'best config':18} {'best ms':>9} {'default ms':>11} {'gain':>6}"]
    for name in dict.fromkeys(r["sweep"] for r in rows):
        timed = [r for r in rows if r["sweep"] == name and "median_ms" in r]
        if not timed:
            lines.append(f"{name:26} (no config ran)")
            continue
        best = min(timed, key=lambda r: r["median_ms"])
        default = next((r for r in timed if r["default"]), None)
        default_ms = default["median_ms"] if default else float("nan")
        lines.append(f"{name:26} {best['label']:18} {best['median_ms']:9.4f} {default_ms:11.4f} "
                     f"{default_ms / best['median_ms']:5.2f}x")
    return lines


# --------------------------------------------------------------------------- report


def _cell(value: float | None, fmt: str = ".4f") -> str:
    return "-" if value is None else format(value, fmt)


BASELINES_RUN = ROOT / "docs" / "results" / "h100_attention_eval_cost"  # attention_baselines.py's raw files


def _faster_elsewhere(starters: list[dict]) -> list[str]:
    """Variants where the baselines run found a baseline this run did not time (torch.compile of the
    reference) faster than this run's best: said beside the table, with the caveat of two processes."""
    baselines = {}
    for raw in sorted(BASELINES_RUN.glob("*.jsonl")):
        for line in raw.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if "problem" in row:
                baselines[row["problem"]] = row
    lines = []
    for r in starters:
        other = baselines.get(r["variant"], {})
        compiled, best = (other.get("ms") or {}).get("compile"), (other.get("ms") or {}).get(r.get("best_available"))
        starter = (r.get("ms") or {}).get(STARTER)
        if compiled and best and starter and compiled < best:
            lines.append(f"- {r['variant']}: in the baselines run ({BASELINES_RUN.name}) torch.compile of the "
                         f"reference took {compiled:.2f} ms, faster than {r['best_available']} ({best:.2f} ms there), "
                         f"which this run did not time; against it the starter's {starter:.2f} ms is about "
                         f"{compiled / starter:.1f}x (times from two processes, not one run's rounds).")
    return [""] + lines if lines else []


def _starters_table(starters: list[dict]) -> list[str]:
    lines = ["| variant | verdict | starter ms | FlexAttention ms | vs FlexAttention | SDPA flash ms | SDPA cuDNN ms "
             "| best available | vs best | config |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in starters:
        ms, speedup = r.get("ms", {}), r.get("speedup", {})
        verdict = r.get("status", "not verified")
        if verdict != "correct" and "ms" not in r:
            lines.append(f"| {r['variant']} | {verdict}: {r.get('reason', '')[:80]} |" + " - |" * 8)
            continue
        config = r.get("config") or {}
        lines.append(
            f"| {r['variant']} | {verdict} | {_cell(ms.get(STARTER))} | {_cell(ms.get(FLEX))} | "
            f"{_cell(speedup.get(FLEX), '.2f')}x | {_cell(ms.get('sdpa_flash'))} | {_cell(ms.get('sdpa_cudnn'))} | "
            f"{r.get('best_available', '-')} | {_cell(r.get('speedup_over_best'), '.2f')}x | "
            f"{_label(config) if config else '-'} |")
    over_flex = [r["speedup"][FLEX] for r in starters if FLEX in r.get("speedup", {})]
    over_best = [r["speedup_over_best"] for r in starters if r.get("speedup_over_best")]
    if over_flex:
        lines += ["", f"Geometric mean over FlexAttention: {statistics.geometric_mean(over_flex):.2f}x "
                      f"({len(over_flex)} variants); over the best baseline this run timed: "
                      f"{statistics.geometric_mean(over_best):.2f}x."]
    return lines + _faster_elsewhere(starters)


def report(folder: Path) -> str:
    """README.md text from every raw .jsonl file in `folder`."""
    rows = []
    for raw in sorted(folder.glob("*.jsonl")):
        rows += [dict(json.loads(line), _file=raw.name) for line in raw.read_text().splitlines() if line.strip()]
    calls = [r for r in rows if "call" in r]
    starters = [r for r in rows if "variant" in r]
    swept = [r for r in rows if "sweep" in r]
    env = next((r["call"].get("environment") for r in calls if r["call"].get("environment")), {})
    lines = ["# Attention starters on the GPU", "",
             "Written by `benchmarks/attention_starters.py --report` from the raw files beside it; nothing here is "
             "typed by hand. The starters are hand-written (benchmarks/attention_starter_kernel.py: one Triton "
             "flash-attention forward, made each variant by its score/mask hooks), not made by the agent loop: "
             "they are the floor the loop starts from.", ""]
    if env:
        lines += [f"Measured on {env.get('gpu')}, torch {env.get('torch')}, triton {env.get('triton')}.", ""]
    lines += ["Correctness: the verifier (realistic shape, the irregular input variant, fresh inputs). Speed: "
              "kernelloop's timing module in one process (interleaved rounds, L2 flushed before each call, the "
              "verifier's method); a speedup is the median over rounds of baseline / starter, so > 1 means the "
              "starter is faster. Best available: the fastest baseline timed for the variant (FlexAttention, "
              "or SDPA's flash or cuDNN backend where SDPA computes the variant).", ""]
    builds = folder / "builds.json"  # what each raw file ran, where its name needs words
    what_ran = json.loads(builds.read_text()) if builds.is_file() else {}
    by_file: dict[str, list[dict]] = {}
    for r in starters:
        by_file.setdefault(r["_file"], []).append(r)
    for name, group in by_file.items():  # one table per raw file: each is one build's run
        lines += [f"## Starters against FlexAttention and the best available ({name})", "",
                  *([what_ran[name], ""] if name in what_ran else []), *_starters_table(group), ""]
    if swept:
        lines += ["## Config sweep (block sizes, warps, stages)", "",
                  "Each config checked against the reference, then all of a variant's configs timed in the same "
                  "rounds.",
                  "", "```", *sweep_table(swept), "```", ""]
        failed = [r for r in swept if not r.get("ok")]
        lines += [f"- {r['sweep']} {r['label']}: {r.get('reason')}" for r in failed]
        lines.append("")
    if calls:
        lines += ["## Device calls", "", "| file | mode | wall s | variants |", "|---|---|---|---|"]
        lines += [f"| {r['_file']} | {r['call']['mode']} | {r['call']['wall_s']:.0f} | {r['call']['variants']} |"
                  for r in calls]
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--variants", nargs="*", default=[], help="problem stems (default: all)")
    parser.add_argument("--sweep", action="store_true", help="time SWEEP's configs of each starter")
    parser.add_argument("--no-verify", action="store_true", help="time without the verifier's verdict first")
    parser.add_argument("--report", type=Path, help="write DIR/README.md from the raw files in DIR")
    parser.add_argument("--budget-s", type=float, default=540.0)
    parser.add_argument("--workspace", type=Path, default=Path("/tmp/attention-starters"))
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
        return
    if args.out is None:
        parser.error("--out FILE.jsonl is needed, or --report DIR")
    started = time.perf_counter()
    problems = [p for p in load_dir(PROBLEMS) if not args.variants or p.name in args.variants]
    key = "sweep" if args.sweep else "variant"
    done = _done(args.out, key)
    ran, rows = [], []
    verifier = None
    if not args.sweep and not args.no_verify:
        from kernelloop.tools.verify.verifier import Verifier

        verifier = Verifier(device="cuda", workspace=args.workspace, time_it=False)
    try:
        with args.out.open("a") as out:
            for problem in problems:
                if problem.name in done:
                    continue
                if time.perf_counter() - started > args.budget_s:
                    print(f"budget spent: {len(problems) - len(done) - len(ran)} variants left", flush=True)
                    break
                if args.sweep:
                    torch._dynamo.reset()
                    for row in sweep(problem):
                        _write(out, row)
                        rows.append(row)
                else:
                    _write(out, bench_starter(problem, verifier, verify=verifier is not None))
                ran.append(problem.name)
            _write(out, {"call": {"mode": "sweep" if args.sweep else "starters", "variants": len(ran),
                                  "wall_s": round(time.perf_counter() - started, 1), "environment": _environment()}})
    finally:
        if verifier is not None:
            verifier.close()
    if args.sweep and rows:
        print("\n".join(sweep_table(rows)))


if __name__ == "__main__":
    main()
