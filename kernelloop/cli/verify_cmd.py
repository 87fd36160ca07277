"""`kernelloop verify CANDIDATE --problem PROBLEM`: exit 0 correct, 1 any other verdict, 2 bad usage.

While it works, stderr says which phase it is in (making the reference, compiling, checking,
timing), so a 20 s verification is not 20 s of silence; stdout carries only the verdict.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernelloop.cli._app import app
from kernelloop.cli._common import (
    DEVICE_HELP,
    FRESH_TIMING_HELP,
    SETTINGS_NOTE,
    WORKSPACE_HELP,
    device_flag,
    errors,
    fail_usage,
    json_errors,
    load_candidate,
    load_problem,
    plain,
    quoted,
    settings,
)
from kernelloop.cli._program import finish
from kernelloop.config import defaults
from kernelloop.safe_text import TAIL_CHARS, clean

if TYPE_CHECKING:
    from kernelloop.records import Verdict

console = Console(stderr=False)
STATUS_STYLE = {"correct": "bold green", "incorrect": "bold red", "rejected": "bold magenta",
                "compile_error": "bold yellow", "runtime_error": "bold yellow", "timeout": "bold yellow"}


@contextmanager
def showing_phases(enabled: bool = True) -> Iterator[None]:
    """Phase lines on stderr while the block runs: a spinner on a terminal, one line per phase elsewhere."""
    from kernelloop import progress

    if not enabled:
        yield
        return
    status = errors.status("verifying") if errors.is_terminal else None
    seen: list[str] = []

    def show(kind: str, phase: str) -> None:
        words = progress.describe(kind, phase)
        if words is None or (seen and seen[-1] == words):
            return
        seen.append(words)
        if status is not None:
            status.update(words)
        else:
            errors.print(f"verify: {words}", highlight=False, markup=False)

    if status is not None:
        status.start()
    try:
        with progress.listening(show):
            yield
    finally:
        if status is not None:
            status.stop()


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), or None where that can't be read."""
    try:
        with open("/proc/self/stat") as stat, open("/proc/uptime") as uptime:
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            return float(uptime.read().split()[0]) - started_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def prestart_workers(device: str, workspace: Path | None, time_it: bool) -> None:
    """Start the verifier's sandbox workers before this process imports torch, so the three imports
    run at once (tools/verify/workers.py). `auto` is guessed without torch (NVML): where torch then
    decides otherwise, the verifier starts its own and the prestarted ones are closed unused."""
    from kernelloop.config.units import Device
    from kernelloop.config.workspace import workspace_dir
    from kernelloop.tools.verify import workers

    if device == "auto":
        from kernelloop.tools.profile.gpu import visible_gpu_count

        device = "cuda" if visible_gpu_count() > 0 else "cpu"
    try:
        parsed = Device.parse(device)
    except ValueError:  # the flag's own check says so, in one line
        return
    if parsed.kind == "cpu":
        workers.prestart("cpu", workspace_dir(workspace), None, time_it=False)
    elif parsed.kind == "cuda":
        workers.prestart("cuda", workspace_dir(workspace), parsed.gpu or 0, time_it=time_it)


def print_timings(verdict: Verdict) -> None:
    """Where the verification's wall time went, phase by phase, on stderr."""
    from kernelloop.tools.verify.verifier import PHASE_NAMES

    cost = verdict.cost_s
    rows = [("process start", "interpreter and CLI imports", cost.get("process_start_s")),
            ("parent imports", "reading the files, the verifier, torch", cost.get("process_imports_s"))]
    rows += [(name, words, cost.get(f"phase_{name}_s")) for name, words in PHASE_NAMES.items()]
    rows += [("close", "sandbox workers stopped", cost.get("close_s"))]
    wall = cost.get("wall_s") or sum(v for _, _, v in rows if v)
    rows.append(("other", "the pool made, the verdict's own bookkeeping", wall - sum(v for _, _, v in rows if v)))
    table = Table("phase", "s", "share", "what", box=None, padding=(0, 2))
    for name, words, value in rows:
        if value is not None and value > 0.0005:
            table.add_row(name, f"{value:.2f}", f"{100 * value / wall:.0f}%" if wall else "", words)
    table.add_row("wall", f"{wall:.2f}", "", "from process start to the verdict")
    errors.print(table)
    within = ("first_call_s", "trials_s", "baselines_import_s", "baselines_build_s", "child_s",
              "trusted_worker_import_s", "candidate_worker_import_s")
    extra = {k: v for k, v in cost.items() if k in within}
    if extra:
        errors.print("  within: " + ", ".join(f"{k} {v:.2f}" for k, v in extra.items()), highlight=False)
    if "baselines_cached_at" in cost:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(cost["baselines_cached_at"]))
        errors.print(f"  torch.compile baselines: cached, measured {stamp} (not compiled here)", highlight=False)


def print_verdict(verdict: Verdict) -> None:
    status = verdict.status.value
    # Every text below but the numbers may be the candidate's: printed as text, never as markup.
    console.print(f"[{STATUS_STYLE.get(status, 'bold')}]{status}[/] on {quoted(verdict.device)}: "
                  f"{quoted(verdict.reason)}", highlight=False)
    if verdict.max_abs_err is not None and verdict.code.value != "wrong_type":  # no error to measure across shapes
        console.print(f"  max_abs_err {verdict.max_abs_err:.3g}   rel_err {verdict.rel_err:.3g}   trials {verdict.trials}")
    if verdict.timings:
        table = Table("timed", "median ms", "IQR ms", "samples", box=None, padding=(0, 2))
        for stats in verdict.timings.values():
            table.add_row(plain(stats.name), f"{stats.median_ms:.4f}", f"{stats.iqr_ms:.4f}", str(stats.samples))
        console.print(table)
    if verdict.speedup is not None:
        extra = quoted(", ".join(f"{name} {value:.2f}x" for name, value in verdict.speedups.items()))
        console.print(f"  speedup over eager [bold]{verdict.speedup:.2f}x[/bold]" + (f" ({extra})" if extra else ""))
    for line in verdict.suspicious:
        console.print(f"  [red]suspicious:[/red] {quoted(line)}", highlight=False)
    if verdict.own_kernels:
        console.print(f"  own kernels: {quoted(', '.join(verdict.own_kernels), 4000)}", highlight=False)
    for warning in verdict.warnings:
        console.print(f"  [yellow]note:[/yellow] {quoted(warning)}", highlight=False)
    if status in ("compile_error", "runtime_error") and verdict.stderr_tail.strip():
        tail = "\n".join(clean(verdict.stderr_tail, TAIL_CHARS, keep="tail").strip().splitlines()[-12:])
        console.print(Text(tail, style="dim"), highlight=False)


@app.command(epilog=SETTINGS_NOTE)
def verify(
    candidate: Path = typer.Argument(..., help="candidate file with class ModelNew"),
    problem: Path = typer.Option(..., "--problem", "-p", help="problem file with Model, get_inputs, get_init_inputs"),
    device: str | None = typer.Option(None, help=DEVICE_HELP, show_default=False),
    json_out: bool = typer.Option(False, "--json", help="print the verdict as one JSON object"),
    strict: bool = typer.Option(False, help="reject any reference compute op still run through torch"),
    strict_claims: bool = typer.Option(False, "--strict-claims", help="refuse a correct verdict whose own kernels "
                                       "doing the work is only the candidate process's claim (own_kernel_evidence)"),
    time_it: bool = typer.Option(True, "--time/--no-time", help="measure speed (GPU only)"),
    fresh_timing: bool = typer.Option(True, "--fresh-timing/--no-fresh-timing", help=FRESH_TIMING_HELP),
    timeout: float | None = typer.Option(None, min=1, help=f"seconds allowed for each of the compile and run phases "
                                         f"[default: {defaults.COMPILE_TIMEOUT_S:g} s to compile, "
                                         f"{defaults.RUN_TIMEOUT_S:g} s to run]", show_default=False),
    workspace: Path | None = typer.Option(None, help=WORKSPACE_HELP, show_default=False),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show the phase on stderr while it works"),
    timings: bool = typer.Option(False, "--timings", help="print where the wall time went, phase by phase (stderr); "
                                 "--json has it in cost_s either way"),
) -> None:
    """Judge one candidate against its problem: correctness, rules, and speed on a GPU."""
    entered, age = time.perf_counter(), process_age_s()
    json_errors(json_out)
    device_flag(device)
    chosen = settings(device=device, home=workspace, compile_timeout=timeout, run_timeout=timeout)
    if not candidate.is_file() or not problem.is_file():  # one-line errors below; start nothing for them
        load_candidate(candidate, "CANDIDATE")
        load_problem(problem, "--problem")
    prestart_workers(chosen.device, chosen.home, time_it)
    from kernelloop.tools.verify import workers

    imports_started = time.perf_counter()
    try:
        loaded_candidate = load_candidate(candidate, "CANDIDATE")  # reading it needs no torch
        loaded_problem = load_problem(problem, "--problem")  # checking it imports torch
        from kernelloop.problem import ProblemError
        from kernelloop.tools.verify.pool import make_pool

        imports_s = time.perf_counter() - imports_started
        try:
            # One candidate: a compile stage would only start build workers (a torch import per core)
            # beside the cold path's own, to build what the candidate's job can build as well.
            with showing_phases(progress), make_pool(chosen.device, workspace=chosen.home, strict=strict,
                                                     strict_claims=strict_claims, time_it=time_it,
                                                     fresh_timing=fresh_timing, compile_workers=0,
                                                     **chosen.limits.model_dump()) as pool:
                verdict = pool.verify(loaded_candidate, loaded_problem)
                closing = time.perf_counter()
        except (ProblemError, ValueError) as exc:  # the problem failed itself, or no such device here
            fail_usage(str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__)
    finally:
        workers.discard()  # prestarted workers no verifier took (a file that does not load, say)
    now = time.perf_counter()
    # The process around the verification: its start (interpreter, CLI imports, reading the files,
    # starting the workers), the parent's own imports, and stopping the workers.
    verdict.cost_s.update(process_start_s=(age or 0.0) + imports_started - entered, process_imports_s=imports_s,
                          close_s=now - closing, wall_s=(age or 0.0) + now - entered)
    if timings:
        print_timings(verdict)
    if json_out:
        print(verdict.model_dump_json())
    else:
        print_verdict(verdict)
    finish(0 if verdict.ok else 1)
