"""`kernelloop bench SUITE`: run a suite and write results.jsonl, summary.json, report.md and plots.

Three ways to run: the agent loop on every problem (default, needs a model endpoint),
`--candidates DIR` or `--list FILE --problems-dir DIR` (judge kernels written elsewhere: a
directory of KernelBench samples, or a list pairing problems with code, such as the KernelBench
leaderboard's raw_data.json; SUITE then only names the run), `--baselines-only` (time eager,
torch.compile and the problems' own baselines; needs a GPU, no model). `--no-timing` judges
correctness alone, and only then may `--workers-per-gpu N` share a GPU among workers.
Exit 0 when the run completes or stops at `--stop-after` (whatever the kernels' verdicts), 2 for bad usage.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from kernelloop.cli._app import app
from kernelloop.cli._common import (
    BUDGET_HELP,
    DEVICE_HELP,
    DISK_ERRNOS,
    FRESH_TIMING_HELP,
    SETTINGS_NOTE,
    WORKSPACE_HELP,
    device_flag,
    errors,
    fail_usage,
    plain,
    quoted,
    settings,
)

if TYPE_CHECKING:  # torch and the suites load only once the flags are good, never for --help
    from kernelloop.config.endpoint import EndpointConfig
    from kernelloop.evals.records import BenchSummary
    from kernelloop.evals.suite import Listed, SolveFn, Suite
    from kernelloop.graph.usage import Prices, Usage
    from kernelloop.problem import Problem
    from kernelloop.records import Verdict
    from kernelloop.tools.verify.pool import VerifierPool

console = Console()


def _open_pool(device: str, ray: str | None, workspace: Path | None, timing: bool = True,
               workers_per_gpu: int = 1, fresh_timing: bool = True, limits: dict | None = None,
               compile_workers: int | None = None) -> VerifierPool:
    """The verifier workers of this bench: workers_per_gpu per local GPU (or the CPU), or Ray actors with
    --ray; `limits`: the settings' compile and run limits of a candidate's job (Settings.limits);
    `compile_workers`: the local compile stage's build jobs (None: one a core; 0: none)."""
    from kernelloop.tools.verify.pool import make_pool

    return make_pool(device, ray, workspace=workspace, workers_per_device=workers_per_gpu, time_it=timing,
                     fresh_timing=fresh_timing, compile_workers=compile_workers, **(limits or {}))


class _PoolLease:
    """What a bench worker thread verifies with: the shared pool, which outlives the thread (close is a no-op)."""

    def __init__(self, pool: VerifierPool):
        self.pool = pool

    def verify(self, candidate, problem: Problem) -> Verdict:
        return self.pool.verify(candidate, problem)

    def close(self) -> None:
        """The pool is closed once, by the bench command."""


def _callers(pool: VerifierPool, mode) -> list[str]:
    """One bench worker per device; scoring candidates, more, as many as the compile stage builds
    ahead of the devices (pool.parallel_callers), each labelled with the device they end up on."""
    slots = pool.slots
    extra = getattr(pool, "parallel_callers", len(slots)) - len(slots) if mode.value == "candidates" else 0
    return slots + [slots[i % len(slots)] for i in range(max(0, extra))]


def _verifier_factory(pool: VerifierPool):
    return lambda device: _PoolLease(pool)


@dataclass(frozen=True)
class _SolvedAttempt:
    verdict: Verdict
    elapsed_s: float  # from the start of the solve to this verdict
    kernel_path: Path | None


@dataclass(frozen=True)
class _SolveOutcome:
    attempts: list[_SolvedAttempt]
    tokens: Usage  # the run's result.json: every model call, as the server reported it


def _solved_attempts(run_dir: Path, verified_at: dict[str, float], spent_s: float) -> list[_SolvedAttempt]:
    """Every verified attempt of a finished run, read from its result.json (written on any ending)."""
    from kernelloop.agents.records import Attempt

    result = run_dir / "result.json"
    records = json.loads(result.read_text()).get("attempt_list", []) if result.is_file() else []
    attempts = [Attempt.model_validate(record) for record in records]
    return [_SolvedAttempt(a.verdict, verified_at.get(a.id, spent_s),
                           run_dir / a.kernel_file if a.kernel_file else None)
            for a in attempts if a.verdict is not None]


def _agent_solve_fn(endpoint: EndpointConfig, workspace: Path | None, verifier: VerifierPool | None = None,
                    prices: Prices | None = None) -> SolveFn:
    """The agent loop as a SolveFn: kernelloop.solve on one problem, verifying through the bench's pool."""

    def solve_problem(problem: Problem, budget_s: float, device: str) -> _SolveOutcome:
        from kernelloop.serve.runs import solve  # the agent loop loads only for agent mode

        started = time.perf_counter()
        verified_at: dict[str, float] = {}

        def on_event(event) -> None:
            if event.kind == "verified" and event.attempt_id:
                verified_at.setdefault(event.attempt_id, time.perf_counter() - started)

        result = solve(problem, budget_s=budget_s, device="cpu" if device == "cpu" else "cuda", verifier=verifier,
                       workspace=workspace, base_url=endpoint.base_url, model=endpoint.model,
                       api_key=endpoint.api_key.get_secret_value(), prices=prices, on_event=on_event)
        return _SolveOutcome(_solved_attempts(Path(result.run_dir), verified_at, time.perf_counter() - started),
                             result.tokens)

    return solve_problem


def _print_summary(summary: BenchSummary) -> None:
    from kernelloop.evals.records import Mode
    from kernelloop.evals.report import tokens_line

    if summary.mode is Mode.baselines:
        console.print(f"[bold]{quoted(summary.suite)}[/bold]: baselines timed for {summary.problems} problem(s); "
                      f"{quoted(tokens_line(summary))}", highlight=False)
        return
    console.print(f"[bold]{quoted(summary.suite)}[/bold] ({summary.mode.value}): {summary.solved}/{summary.problems} "
                  f"solved, correctness rate {100 * (summary.correctness_rate or 0):.1f}%")
    table = Table("against", *(f"fast_{p}" for p in summary.fast_p), "geomean", "timed", box=None, padding=(0, 2))
    for name, metrics in summary.by_baseline.items():
        geomean = "-" if metrics.geomean_speedup is None else f"{metrics.geomean_speedup:.2f}x"
        # fast_p over 0 means nothing without a timing: "not timed", never a 0.0% that reads as slow
        cells = [f"{100 * v:.1f}%" if v is not None else "not timed" for v in metrics.fast_p.values()]
        table.add_row(plain(name), *cells, geomean, str(metrics.timed))  # a problem may name its own baselines
    console.print(table)
    console.print(plain(tokens_line(summary), 4000), highlight=False)


def _listed_suite(name: str, path: Path, problems_dir: Path, level: int | None, subset: str | None,
                  out_dir: Path) -> tuple[Suite, Listed]:
    """The suite of a list file: its solutions (of --level and --problems), their problems, their code
    written under OUT/listed/ so each is judged and resumed like a candidate file."""
    from kernelloop.evals.listed import listed_problems, read_list, write_candidates
    from kernelloop.evals.suite import Listed, Suite
    from kernelloop.problem import ProblemError

    if not name.replace("-", "").replace("_", "").isalnum():
        raise ProblemError(f"with --list, SUITE names the run: letters, digits, - and _ only, got {name!r}")
    solutions = read_list(path, level, subset)
    if not solutions:
        raise ProblemError(f"{path}: no solutions" + (" of the chosen level and problems" if level or subset else ""))
    skipped: list[str] = []
    found = listed_problems(solutions, problems_dir, skipped)
    kept = [s for s in solutions if (s.level, s.number) in found]
    if not kept:
        raise ProblemError(f"{problems_dir}: no problem file for any listed solution ({skipped[0]})")
    files = write_candidates(kept, out_dir / "listed")
    problems = sorted(found.values(), key=lambda p: (p.level or 0, p.number or 0))
    return Suite(name, "list", problems, subset, skipped), Listed(kept, found, files)


@app.command(epilog=SETTINGS_NOTE)
def bench(
    suite: str = typer.Argument(..., help="attention, training (forward and backward), kernelbench (with --root and --level), "
                               "or a directory of problems"),
    root: Path | None = typer.Option(None, help="KernelBench checkout (for the kernelbench suite)"),
    level: int | None = typer.Option(None, help="KernelBench level (for the kernelbench suite)"),
    problems: str | None = typer.Option(None, "--problems", help="subset by problem number, e.g. 1-10,23"),
    candidates: Path | None = typer.Option(None, "--candidates",
                                           help="score the kernels in DIR (NAME.py or level_L_problem_N_sample_S_kernel.py)"),
    listed: Path | None = typer.Option(None, "--list", help="judge the solutions in FILE (JSON list or JSONL: the "
                                       "KernelBench leaderboard's raw_data.json, or id/level/problem/code entries)"),
    problems_dir: Path | None = typer.Option(None, "--problems-dir", help="the problems of --list: l{L}_p{N}.py files "
                                             "or a KernelBench checkout's level{L}/{N}_Name.py"),
    baselines_only: bool = typer.Option(False, "--baselines-only", help="time eager, compile and problem baselines only"),
    timing: bool = typer.Option(True, "--timing/--no-timing", help="--no-timing: correctness only, no speed measured"),
    fresh_timing: bool = typer.Option(True, "--fresh-timing/--no-fresh-timing", help=FRESH_TIMING_HELP),
    workers_per_gpu: int = typer.Option(1, "--workers-per-gpu", min=1, help="verifier workers sharing each GPU "
                                        "(more than 1 needs --no-timing: a timed candidate has its GPU alone)"),
    compile_workers: int | None = typer.Option(None, "--compile-workers", min=0, help="build jobs of the compile "
                                               "stage ahead of the verifiers (default: one a core; 0: none, and "
                                               "candidates are taken strictly in turn)", show_default=False),
    stop_after: str | None = typer.Option(None, "--stop-after", help="start no candidate after this long (e.g. 8m); "
                                          "what ran is written and a rerun goes on", show_default=False),
    out: Path | None = typer.Option(None, "--out", help="output dir (default WORKSPACE/bench/SUITE-MODE); reruns resume"),
    budget: str | None = typer.Option(None, help="agent loop time per problem; " + BUDGET_HELP, show_default=False),
    device: str | None = typer.Option(None, help=DEVICE_HELP, show_default=False),
    ray: str | None = typer.Option(None, "--ray", help="verify on a Ray cluster: auto, local or an ADDRESS "
                                                      "(one actor per GPU; pip install 'kernelloop[ray]')"),
    workspace: Path | None = typer.Option(None, help=WORKSPACE_HELP, show_default=False),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (agent loop)"),
    model: str | None = typer.Option(None, "--model", help="model name (agent loop)"),
    api_key: str | None = typer.Option(None, "--api-key", help="API key (agent loop)"),
    prices: str | None = typer.Option(None, "--prices", help="USD per million prompt and completion tokens, e.g. "
                                                            "0.55,2.19 (agent loop): the summary adds the cost"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar on stderr"),
    json_out: bool = typer.Option(False, "--json", help="print summary.json's object as the last line"),
) -> None:
    """Run a suite with a budget per problem, in parallel over GPUs; resumable."""
    if candidates is not None and baselines_only:
        fail_usage("--candidates and --baselines-only exclude each other")
    if listed is not None and (candidates is not None or baselines_only):
        fail_usage("--list excludes --candidates and --baselines-only")
    if (listed is None) != (problems_dir is None):
        fail_usage("--list and --problems-dir go together")
    if baselines_only and not timing:
        fail_usage("--baselines-only times baselines: it can't be --no-timing")
    if workers_per_gpu > 1 and timing:
        fail_usage(f"--workers-per-gpu {workers_per_gpu} needs --no-timing: a timed candidate has its GPU alone")
    if workers_per_gpu > 1 and ray is not None:
        fail_usage("--workers-per-gpu is for local GPUs; --ray has one actor per GPU")
    if compile_workers is not None and ray is not None:
        fail_usage("--compile-workers is for local GPUs; a Ray cluster's actors build their own")
    from kernelloop.config.units import parse_duration_s

    try:
        stop_after_s = parse_duration_s(stop_after) if stop_after is not None else None
    except ValueError as exc:
        fail_usage(f"--stop-after: {exc}")
    device_flag(device)
    from kernelloop.graph.usage import Prices

    try:
        price = Prices.parse(prices) if prices is not None else None
    except ValueError as exc:  # pydantic's ValidationError too (a negative price)
        fail_usage(f"--prices: {str(exc).splitlines()[0]}")
    chosen_settings = settings(budget=budget, device=device, home=workspace)
    from kernelloop.config.endpoint import EndpointConfig
    from kernelloop.evals.records import Mode
    from kernelloop.evals.suite import (
        BenchStopped,
        WorkFactory,
        agent_work,
        baselines_work,
        resolve_devices,
        resolve_suite,
        run_bench,
        scoring_work,
    )
    from kernelloop.problem import ProblemError

    mode = Mode.candidates if candidates is not None or listed is not None else Mode.baselines if baselines_only else Mode.agent
    budget_s, device = chosen_settings.budget, chosen_settings.device
    space = chosen_settings.home.expanduser().resolve()
    chosen_list: Listed | None = None
    try:
        if listed is not None and problems_dir is not None:
            chosen, chosen_list = _listed_suite(suite, listed, problems_dir, level, problems,
                                                out or space / "bench" / f"{suite}-{mode.value}")
        else:
            chosen = resolve_suite(suite, root=root, level=level, subset=problems)
        if ray is None:
            resolve_devices(device)  # a bad --device is a usage error before any worker starts
        endpoint = EndpointConfig.resolve(base_url, model, api_key) if mode is Mode.agent else None
        # PoolError: no GPU, no Ray, no cluster, a GPU shared for timing (in seconds)
        pool = _open_pool(device, ray, space, timing, workers_per_gpu, fresh_timing, chosen_settings.limits.model_dump(),
                          compile_workers)
    except ValueError as exc:  # ProblemError, ConfigError, PoolError: one line
        fail_usage(str(exc).splitlines()[0])
    for line in chosen.skipped:  # a pipe, a symlink, a device among the problems: that one is left out
        errors.print(f"[yellow]warning:[/yellow] problem file not read: {quoted(line, 4000)}", highlight=False)
    try:
        if mode is Mode.baselines and pool.device == "cpu":
            fail_usage("--baselines-only times kernels and needs a CUDA GPU; torch sees none here")
        if chosen.kind == "attention" and pool.device == "cpu":
            fail_usage("the attention suite is sized for a GPU (B=4, H=16, S=4096 and longer): "
                       "on the CPU's Triton interpreter it would take hours; run it where torch sees a GPU")
        work: WorkFactory
        if mode is Mode.candidates:
            work = scoring_work(_verifier_factory(pool))
        elif mode is Mode.baselines:
            work = baselines_work(lambda problem, slot: pool.time_baselines(problem)["timings"])
        else:
            assert endpoint is not None  # resolved above for agent mode, or it was a usage error
            work = agent_work(_agent_solve_fn(endpoint, space, pool, price), budget_s)
        out_dir = out or space / "bench" / f"{chosen.name}-{mode.value}"
        try:
            result = run_bench(chosen, mode, work, _callers(pool, mode), out_dir, candidates_dir=candidates,
                               budget_s=budget_s if mode is Mode.agent else None, show_progress=progress,
                               listed=chosen_list, stop_after_s=stop_after_s)
        except ProblemError as exc:
            fail_usage(str(exc))
        except BenchStopped as exc:  # the sandbox or the verifier failed: one line, exit 1, a rerun resumes
            errors.print(f"[red]error:[/red] {quoted(str(exc), 4000)}; fix it and rerun the same command "
                         "(finished problems are skipped)", highlight=False)
            raise typer.Exit(1) from None
        except OSError as exc:  # a full or read-only --out: one line; a rerun resumes what was written
            if exc.errno not in DISK_ERRNOS:
                raise
            fail_usage(f"can't write {exc.filename or out_dir}: {exc.strerror or exc}; free space or pass --out "
                       "on another disk, then rerun the same command (finished problems are skipped)")
    finally:
        pool.close()
    _print_summary(result.summary)
    if result.skipped:
        console.print(plain(f"resumed: {result.skipped} job(s) already in {result.results_path}", 4000))
    if result.left:
        why = "interrupted" if result.interrupted else "stopped at --stop-after"
        console.print(plain(f"{why}: {result.left} job(s) left; rerun the same command to go on", 4000))
    console.print(plain(f"report: {result.files.report_md} (and {result.files.report_html.name} beside it)", 4000),
                  highlight=False)
    if json_out:
        print(result.summary.model_dump_json())
    if result.interrupted:
        raise typer.Exit(130)  # a shell's code for a run stopped by Ctrl-C
