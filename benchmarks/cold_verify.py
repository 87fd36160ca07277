"""The cold path: one verification in a fresh process, where its wall time goes.

Each run is a fresh `python -m kernelloop.cli verify --json` (or, where the CLI's packages are
missing, as on the bare GPU node, the same steps through the Verifier alone: `--runner bare`) in a
fresh workspace; with `--cache reused` every run of a pair shares one trusted cache dir
(KERNELLOOP_TRUSTED_CACHE), so the second run on shows what is reused across processes. One JSON
line per run: the wall clock around the process, the verdict's status, and its cost_s (the phase
split: `phase_*_s`, `process_*_s`, `close_s`, and the candidate's own first call and trials).

    python benchmarks/cold_verify.py [--device cpu|cuda] [--runs 3] [--cache fresh|reused|both]
        [--pair CANDIDATE PROBLEM ...] [--label NAME] [--out FILE.jsonl] [--src DIR] [--profile-jobs DIR]
        [--no-precompile]         (the first run leaves the kept bytecode to the importers, as before precompile.py)
        [--kernelbench PATH]      (also time KernelBench's eval_kernel_against_ref, fresh processes, alone and
                                   then with its torch.compile reference timing; PATH holds its src/)
    python benchmarks/cold_verify.py --report DIR   (DIR/README.md from DIR/*.jsonl; never edit it by hand)

--src runs another source tree's kernelloop (a checkout of an older commit: before/after).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PAIRS = [("examples/candidates/2_SoftmaxIrregular.py", "kernelloop/evals/problems/2_SoftmaxIrregular.py"),
                 ("examples/candidates/6_MatmulFP16.py", "kernelloop/evals/problems/6_MatmulFP16.py")]
FIRST_CALL_STEPS = ["inputs", "poison", "forward", "checks", "outputs"]
BESIDE = {"trusted_worker_import": "the trusted worker's start to ready, as it reported",
          "candidate_worker_import": "the candidates' worker's, likewise",
          "baselines_import": "the compiler's import in the reference job",
          "baselines_build": "the baselines built there (torch.compile's first call)"}
PHASES = ["process_start", "process_imports", "precheck", "workers", "reference", "candidate", "compare", "baselines",
          "timing", "profile", "fresh", "finish", "cache", "close"]

# The CLI's steps with the verifier alone (torch, triton, nvidia-ml-py): for a node without typer/pydantic.
BARE = r'''
import json, sys, time
entered = time.perf_counter()
from pathlib import Path
candidate, problem, device, workspace = sys.argv[1:5]
kind, _, index = device.partition(":")
try:
    from kernelloop.tools.verify import workers
    workers.prestart(kind, Path(workspace).resolve(), int(index) if index else (0 if kind == "cuda" else None))
except ImportError:  # a tree without prestart
    workers = None
imports = time.perf_counter()
from kernelloop.problem import Candidate, Problem
from kernelloop.tools.verify.verifier import Verifier
c, p = Candidate.from_file(candidate), Problem.from_file(problem)
imported = time.perf_counter()
with Verifier(device=kind, gpu_index=int(index) if index else (0 if kind == "cuda" else None),
              workspace=Path(workspace)) as verifier:
    verdict = verifier.verify(c, p)
    closing = time.perf_counter()
now = time.perf_counter()
verdict.cost_s.update(process_start_s=imports - entered, process_imports_s=imported - imports, close_s=now - closing)
print(verdict.model_dump_json())
'''

# KernelBench's own evaluation of the same files, in a fresh process (its repo on sys.path). Its
# package imports its LLM clients at import time (dotenv, openai, litellm); where they are missing (the
# bare GPU node) empty stand-ins take their names, and the row says which: eval never calls them, so
# this only leaves their import time out of KernelBench's wall clock (in its favour). Triton
# candidates need backend="triton" (the @triton.jit source must come from a file); the precision is
# float16 or bfloat16 where the reference's source names one, else float32. With "+compile", the same process then times the reference
# under torch.compile through measure_ref_program_time, as our verify times its compile baseline.
KERNELBENCH = r'''
import importlib.util, sys, time, json, types
started = time.perf_counter()
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/src"]
stubbed = []
for name, attrs in (("dotenv", ("load_dotenv",)), ("openai", ("OpenAI",)), ("litellm", ("completion",))):
    if importlib.util.find_spec(name) is None:
        module = types.ModuleType(name)
        for attr in attrs:
            setattr(module, attr, lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stand-in")))
        sys.modules[name] = module
        stubbed.append(name)
try:
    from kernelbench.eval import eval_kernel_against_ref
    from kernelbench.timing import measure_ref_program_time
except ImportError:
    from src.eval import eval_kernel_against_ref
    measure_ref_program_time = None
import torch
ref, new, with_compile = open(sys.argv[2]).read(), open(sys.argv[3]).read(), sys.argv[5] == "1"
backend = "triton" if "import triton" in new else "cuda"
precision = torch.float16 if "float16" in ref else torch.bfloat16 if "bfloat16" in ref else torch.float32
imported = time.perf_counter()
result = eval_kernel_against_ref(ref, new, measure_performance=True, num_correct_trials=5, num_perf_trials=100,
                                 build_dir=sys.argv[4], device=torch.device("cuda:0"), backend=backend,
                                 precision=precision)
done = time.perf_counter()
compiled_ms = None
if with_compile and measure_ref_program_time is not None:
    stats = measure_ref_program_time("ref", ref, use_torch_compile=True, device=torch.device("cuda:0"),
                                     precision=precision)
    compiled_ms = stats.get("mean") if isinstance(stats, dict) else None
finished = time.perf_counter()
print(json.dumps({"compiled": getattr(result, "compiled", None), "correctness": getattr(result, "correctness", None),
                  "runtime_ms": getattr(result, "runtime", None), "ref_runtime_ms": getattr(result, "ref_runtime", None),
                  "compile_ref_ms": compiled_ms, "imports_s": imported - started, "eval_s": done - imported,
                  "compile_ref_s": finished - done if with_compile else None, "backend": backend,
                  "precision": str(precision), "stubbed": stubbed}))
'''


def cli_available(python: str) -> bool:
    return subprocess.run([python, "-c", "import typer, pydantic_settings"], capture_output=True).returncode == 0


def one_run(args, candidate: Path, problem: Path, cache_dir: Path | None, runner: str, run: int = 0) -> dict:
    workspace = Path(tempfile.mkdtemp(prefix="cold-ws-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(args.src), os.environ.get("PYTHONPATH")) if p)}
    env["KERNELLOOP_TRUSTED_CACHE"] = str(cache_dir) if cache_dir else "off"
    if args.no_precompile:
        env["KERNELLOOP_PRECOMPILE"] = "0"
    python = [args.python]
    if args.profile_jobs:  # cProfile in the parent and in every job's process (child._profiled)
        where = args.profile_jobs.resolve() / f"{candidate.stem}-{'reused' if cache_dir else 'fresh'}-{run + 1}"
        where.mkdir(parents=True, exist_ok=True)
        env["KERNELLOOP_PROFILE_JOBS"] = str(where)
        python += ["-m", "cProfile", "-o", str(where / "parent.prof")]
    if runner == "cli":
        command = [*python, "-m", "kernelloop.cli", "verify", str(candidate), "--problem", str(problem),
                   "--device", args.device, "--workspace", str(workspace), "--json", "--no-progress"]
    else:
        script = workspace / "bare_verify.py"  # a file, not -c: cProfile runs files and modules
        script.write_text(BARE)
        command = [*python, str(script), str(candidate), str(problem), args.device, str(workspace)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=args.src, timeout=args.timeout)
    wall = time.perf_counter() - started
    row = {"label": args.label, "pair": candidate.stem, "cache": "reused" if cache_dir else "fresh", "runner": runner,
           "device": args.device, "wall_s": wall, "load_1min": os.getloadavg()[0], "at": time.time()}
    try:
        verdict = json.loads(done.stdout.strip().splitlines()[-1])
        row.update(status=verdict["status"], isolation=verdict.get("isolation"), cost_s=verdict.get("cost_s", {}),
                   warnings=[w for w in verdict.get("warnings", []) if "cached" in w or "trusted cache" in w])
    except (IndexError, ValueError, KeyError):
        row.update(status="failed", error=(done.stderr or done.stdout)[-800:])
    subprocess.run(["rm", "-rf", str(workspace)], check=False)
    if cache_dir:
        row.update(_precompile_after(cache_dir / "pycache", since=time.time() - wall))
    return row


def _precompile_after(bytecode_dir: Path, since: float, limit_s: float = 300) -> dict:
    """Where the run started filling the kept bytecode dir in the background (precompile.py): wait
    until that is done, so the next run starts on an idle machine, and keep its stamp (if it was
    this run's, finished after `since`)."""
    import fcntl

    from kernelloop.tools.verify.precompile import LOCK, STAMP

    lock = bytecode_dir / LOCK
    if not lock.is_file():
        return {}
    started = time.perf_counter()
    with open(lock) as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except OSError:
                if time.perf_counter() - started > limit_s:
                    break
                time.sleep(0.05)
    try:
        stamp = json.loads((bytecode_dir / STAMP).read_text())
    except (OSError, ValueError):
        stamp = {}
    if not isinstance(stamp, dict) or stamp.get("finished_at", 0) < since:
        return {}
    return {"precompile_wait_s": time.perf_counter() - started,
            "precompile": {k: stamp[k] for k in ("files", "compiled", "workers", "seconds", "finished_at") if k in stamp}}


def kernelbench_run(args, candidate: Path, problem: Path, with_compile: bool) -> dict:
    build = Path(tempfile.mkdtemp(prefix="kb-build-"))
    started = time.perf_counter()
    done = subprocess.run([args.python, "-c", KERNELBENCH, str(args.kernelbench), str(problem), str(candidate), str(build),
                           "1" if with_compile else "0"], capture_output=True, text=True, timeout=args.timeout)
    label = "kernelbench+compile" if with_compile else "kernelbench"
    row = {"label": label, "pair": candidate.stem, "cache": "fresh", "runner": "kernelbench",
           "device": "cuda", "wall_s": time.perf_counter() - started, "load_1min": os.getloadavg()[0], "at": time.time()}
    try:
        row.update(json.loads(done.stdout.strip().splitlines()[-1]), status="ran")
    except (IndexError, ValueError):
        row.update(status="failed", error=(done.stderr or done.stdout)[-800:])
    return row


def measure(args) -> None:
    runner = args.runner if args.runner != "auto" else ("cli" if cli_available(args.python) else "bare")
    pairs = [(ROOT / c, ROOT / p) for c, p in (args.pair or DEFAULT_PAIRS)]
    modes = ["fresh", "reused"] if args.cache == "both" else [args.cache]
    out = open(args.out, "a") if args.out else None  # noqa: SIM115 - appended line by line
    header = {"machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                          "device": args.device, "label": args.label, "runner": runner}}

    def emit(row: dict, run: int) -> None:
        line = json.dumps({**row, "run": run + 1, **header})
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    for run in range(args.runs):
        emit(help_run(args), run)
    for candidate, problem in pairs:
        for mode in modes:
            cache_dir = Path(tempfile.mkdtemp(prefix="cold-cache-")) if mode == "reused" else None
            for run in range(args.runs):
                emit(one_run(args, candidate, problem, cache_dir, runner, run), run)
        if args.kernelbench:
            for with_compile in (False,) if args.kernelbench_eval_only else (False, True):
                for run in range(args.runs):
                    emit(kernelbench_run(args, candidate, problem, with_compile), run)


def help_run(args) -> dict:
    """`kernelloop --help` in a fresh process: what a newcomer waits for first."""
    started = time.perf_counter()
    done = subprocess.run([args.python, "-m", "kernelloop.cli", "--help"], capture_output=True, text=True, cwd=args.src,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(args.src), os.environ.get("PYTHONPATH"))
                                                                          if p)}, timeout=args.timeout)
    return {"label": "help", "pair": "kernelloop --help", "cache": "fresh", "runner": "help", "device": args.device,
            "wall_s": time.perf_counter() - started, "status": "ran" if done.returncode == 0 else "failed"}


# --------------------------------------------------------------------------- report


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def report(directory: Path) -> str:
    """DIR/README.md's text, from DIR/*.jsonl (and DIR/warm_pool_*.json, DIR/help_times.txt, DIR/builds.json)."""
    rows = [{**json.loads(line), "file": path.stem} for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines() if line.strip()]
    # A label used in several raw files (one per device call, each maybe another node) is shown as
    # FILE/LABEL, so rows of different calls are never pooled into one median.
    files_of: dict[str, set[str]] = {}
    for row in rows:
        files_of.setdefault(row["label"], set()).add(row["file"])
    for row in rows:
        if len(files_of[row["label"]]) > 1:
            row["label"] = f"{row['file']}/{row['label']}"
    kernelbench = [r for r in rows if r.get("runner") == "kernelbench"]
    helps = [r["wall_s"] for r in rows if r.get("runner") == "help" and r.get("status") == "ran"]
    rows = [r for r in rows if r.get("runner") not in ("kernelbench", "help")]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        # A reused cache's first run fills it: shown apart, so the reused row's median is of cache hits.
        cache = "filling" if row["cache"] == "reused" and row.get("run") == 1 else row["cache"]
        groups.setdefault((row["label"], row["pair"], cache, row.get("runner", "")), []).append(row)
    machines = {json.dumps(r["machine"], sort_keys=True) for r in rows if "machine" in r}
    lines = ["# Cold verification: where one fresh process's time goes", "",
             "Written by `benchmarks/cold_verify.py --report` from the raw files beside it "
             f"({', '.join(p.name for p in sorted(directory.glob('*.jsonl')))}); nothing here is typed by hand.", "",
             "Machines: " + "; ".join(
                 f"{m['device']} on {m['cpus']} CPUs, {m['platform']}, Python {m['python']} ({m['label']}, {m['runner']})"
                 for m in map(json.loads, sorted(machines))) + ".", "",
             *(["CPU rows: Triton's interpreter (TRITON_INTERPRET=1), correctness only, no timing or baselines, on "
                f"{', '.join(sorted({str(json.loads(m)['cpus']) for m in machines}))}-CPU machine(s): where the time "
                "goes here, not what an H100 costs.", ""] if any(r.get("device") == "cpu" for r in rows) else []),
             "Each row: the median over its runs (fresh process, fresh workspace; `reused`: one trusted cache dir for "
             "every run of the row, whose first run, `filling`, fills it and is shown apart). Phases are the verdict's "
             "`cost_s` (`phase_*_s`), plus the process around it: "
             "start (interpreter, CLI, reading the files), the parent's imports and stopping the workers. Load is the "
             "1-minute load average when each run ended (the median): a loaded machine stretches every phase.", ""]
    builds = directory / "builds.json"  # what each label ran, recorded with the raw files where labels need words
    if builds.is_file():
        lines += ["Builds (from builds.json):", ""] + [f"- `{label}`: {what}" for label, what in
                                                       json.loads(builds.read_text()).items()] + [""]
    shown = [p for p in PHASES if any(f"{p}_s" in r.get("cost_s", {}) or f"phase_{p}_s" in r.get("cost_s", {})
                                      for r in rows)]
    # The candidate's first call, step by step, where the child reported it (harness.run_one's laps)
    split = [k for k in FIRST_CALL_STEPS if any(f"first_{k}_s" in r.get("cost_s", {}) for r in rows)]
    lines.append("| build | pair | cache | runs | status | wall s | load | " + " | ".join(shown) + " | first call | "
                 + "".join(f"first: {k} | " for k in split) + "trials |")
    lines.append("|---" * (7 + len(shown) + 2 + len(split)) + "|")
    for (label, pair, cache, _runner), group in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        def phase(name: str, group=group) -> float | None:
            values = [r["cost_s"].get(f"phase_{name}_s", r["cost_s"].get(f"{name}_s")) for r in group if r.get("cost_s")]
            return _median([v for v in values if v is not None])
        statuses = ",".join(sorted({r["status"] for r in group}))
        cells = [label, pair, cache, str(len(group)), statuses, _fmt(_median([r["wall_s"] for r in group])),
                 _fmt(_median([r.get("load_1min", 0.0) for r in group]))]
        cells += [_fmt(phase(p)) for p in shown] + [_fmt(phase("first_call"))]
        cells += [_fmt(phase(f"first_{k}")) for k in split] + [_fmt(phase("trials"))]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _beside_section(groups)
    lines += ["", "Per run (wall s, in order): " + "; ".join(
        f"{label}/{pair}/{cache}: " + ", ".join(f"{r['wall_s']:.1f}" for r in group)
        for (label, pair, cache, _), group in sorted(groups.items())) + ".", ""]
    outside = [(key, [r["cost_s"]["first_call_s"] - r["cost_s"]["first_forward_s"] for r in group
                      if "first_call_s" in r.get("cost_s", {}) and "first_forward_s" in r["cost_s"]])
               for key, group in sorted(groups.items())]
    if any(values for _, values in outside):
        lines += ["The candidate's first call outside its own forward (moving the inputs in, poisoning memory, the checks, "
                  "the outputs out; median s): " + "; ".join(f"{label}/{pair}/{cache}: {statistics.median(values):.2f}"
                                                            for (label, pair, cache, _), values in outside if values) + ".", ""]
    coarse = sorted({r["label"] for r in rows if r.get("cost_s") and "phase_reference_s" not in r["cost_s"]})
    if coarse:
        lines += [f"Rows of a build without the phase split ({', '.join(coarse)}) show the coarse keys it recorded: "
                  "`reference` is its reference_s (the trusted worker's start and the reference), `compare` its "
                  "compare_s.", ""]
    warm = sorted(directory.glob("warm_pool_*.json"))
    if warm:
        lines += ["Warm pool (one Verifier, each candidate verified twice; `benchmarks/verifier_bench.py --device cpu`; "
                  f"files {', '.join(p.name for p in warm)}): per verification, total s and fixed s (the verifier's own "
                  "cost: everything but the candidate's compile, trials and timing, and the reference).", "",
                  "| file | problem | total s | fixed s | reference s (first) |", "|---|---|---|---|---|"]
        for path in warm:
            for row in json.loads(path.read_text()):
                lines.append(f"| {path.stem} | {row['problem']} | {', '.join(f'{v:.2f}' for v in row['total_s'])} | "
                             f"{', '.join(f'{v:.2f}' for v in row['fixed_s'])} | {row['reference_s']:.2f} |")
        lines.append("")
    cached = [r for r in rows if "baselines_cached_at" in r.get("cost_s", {})]
    if cached:
        lines.append(f"Runs that reused cached torch.compile baselines: {len(cached)} (the verdict says so in its warnings).")
    lines += _precompile_section(groups)
    lines += _kernelbench_section(kernelbench) + _help_section(helps, directory / "help_times.txt")
    return "\n".join(lines) + "\n"


def _beside_section(groups: dict[tuple, list[dict]]) -> list[str]:
    """Work beside the critical path, where the verdicts recorded it (median s): each worker's own
    imports (they run while the parent imports), and the trusted job's compiler import and baseline
    build (while the candidate runs)."""
    keys = [k for k in BESIDE if any(f"{k}_s" in r.get("cost_s", {}) for group in groups.values() for r in group)]
    if not keys:
        return []
    lines = ["", "Beside the critical path (median s; not in the phases above, which are the parent's waits): "
             + "; ".join(f"{k}: {BESIDE[k]}" for k in keys) + ".", "",
             "| build | pair | cache | " + " | ".join(keys) + " |", "|---" * (3 + len(keys)) + "|"]
    for (label, pair, cache, _runner), group in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        values = [_median([r["cost_s"][f"{k}_s"] for r in group if f"{k}_s" in r.get("cost_s", {})]) for k in keys]
        if any(v is not None for v in values):
            lines.append(f"| {label} | {pair} | {cache} | " + " | ".join(_fmt(v) for v in values) + " |")
    return lines


def _precompile_section(groups: dict[tuple, list[dict]]) -> list[str]:
    """The background fill of the kept bytecode dir that a reused cache's first run started, where
    one ran: how long it took, with how many processes, and how long after the verification ended
    it was still running (the benchmark waits for it before the next run)."""
    filled = [(key, r) for key, group in sorted(groups.items()) for r in group if r.get("precompile")]
    if not filled:
        return []
    lines = ["", "Precompile (the first run's background fill of the kept bytecode, precompile.py): per run, its own "
             "wall s, files compiled of those listed, processes, and the wait after the verification ended.", "",
             "| build | pair | cache | run | precompile s | files | processes | still running after the run, s |",
             "|---|---|---|---|---|---|---|---|"]
    for (label, pair, cache, _runner), row in filled:
        stamp = row["precompile"]
        lines.append(f"| {label} | {pair} | {cache} | {row.get('run', '')} | {_fmt(stamp.get('seconds'))} | "
                     f"{stamp.get('compiled', '')} of {stamp.get('files', '')} | {stamp.get('workers', '')} | "
                     f"{_fmt(row.get('precompile_wait_s'))} |")
    return lines


def _kernelbench_section(rows: list[dict]) -> list[str]:
    """KernelBench's eval_kernel_against_ref on the same files, fresh processes, beside our rows."""
    if not rows:
        return []
    stubbed = sorted({name for r in rows for name in r.get("stubbed", [])})
    lines = ["", "## KernelBench on the same files", "",
             "Each run a fresh process: KernelBench's `eval_kernel_against_ref` (5 correctness trials, 100 timed calls of "
             "the kernel and of the eager reference), and in `kernelbench+compile` then `measure_ref_program_time` with "
             "torch.compile in the same process, as our verify also times a torch.compile baseline. Its Triton cache is "
             "the machine's default (~/.triton), kept between runs; ours starts empty in every fresh workspace."
             + (f" KernelBench's LLM client modules missing on that machine ({', '.join(stubbed)}) were empty stand-ins: "
                "eval never calls them, so only their import time is left out (in KernelBench's favour)." if stubbed else ""),
             "", "| build | pair | runs | correct | wall s | imports s | eval s | compile timing s | kernel ms | eager ms |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["pair"], row["label"]), []).append(row)
    for (pair, label), group in sorted(groups.items()):
        def median(key: str, group=group) -> float | None:
            return _median([r[key] for r in group if isinstance(r.get(key), (int, float))])
        correct = sum(1 for r in group if r.get("correctness") is True)
        lines.append(f"| {label} | {pair} | {len(group)} | {correct} | {_fmt(median('wall_s'))} | {_fmt(median('imports_s'))} | "
                     f"{_fmt(median('eval_s'))} | {_fmt(median('compile_ref_s'))} | {_fmt(median('runtime_ms'), 4)} | "
                     f"{_fmt(median('ref_runtime_ms'), 4)} |")
    lines += ["", "Per run (wall s, in order): " + "; ".join(
        f"{label}/{pair}: " + ", ".join(f"{r['wall_s']:.1f}" for r in group) for (pair, label), group in sorted(groups.items())) + "."]
    return lines


def _help_section(walls: list[float], legacy: Path) -> list[str]:
    """`kernelloop --help` in a fresh process: the rows help_run wrote, or (2026-11-26, before it) lines
    'help_wall_s N' that `/usr/bin/time -f "help_wall_s %e" python3 -m kernelloop.cli --help` wrote."""
    if legacy.is_file():
        walls = walls + [float(line.split()[1]) for line in legacy.read_text().splitlines() if line.startswith("help_wall_s ")]
    if not walls:
        return []
    return ["", "`kernelloop --help` in a fresh process: " + ", ".join(f"{w:.2f}" for w in walls) + " s."]




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache", choices=["fresh", "reused", "both"], default="both")
    parser.add_argument("--pair", nargs=2, action="append", metavar=("CANDIDATE", "PROBLEM"))
    parser.add_argument("--label", default="now")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--src", type=Path, default=ROOT, help="the source tree whose kernelloop runs")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--runner", choices=["auto", "cli", "bare"], default="auto")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--kernelbench", type=Path, help="a KernelBench checkout: time eval_kernel_against_ref too (GPU)")
    parser.add_argument("--kernelbench-eval-only", action="store_true",
                        help="with --kernelbench: its eval alone, not also with its torch.compile reference timing")
    parser.add_argument("--no-precompile", action="store_true",
                        help="KERNELLOOP_PRECOMPILE=0: the first run does not fill the kept bytecode on the spare cores")
    parser.add_argument("--report", type=Path, help="write DIR/README.md from DIR/*.jsonl and stop")
    parser.add_argument("--profile-jobs", type=Path, metavar="DIR",
                        help="cProfile the parent and each job's process into DIR/<pair>-<cache>-<run>/ (slows them: "
                             "for finding where the time goes, not for the timings)")
    args = parser.parse_args()
    if args.report:
        (args.report / "README.md").write_text(report(args.report))
    else:
        measure(args)


if __name__ == "__main__":
    main()
