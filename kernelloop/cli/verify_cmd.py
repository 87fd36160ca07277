"""`kernelloop verify CANDIDATE --problem PROBLEM`: exit 0 correct, 1 any other verdict, 2 bad usage.

While it works, stderr says which phase it is in (making the reference, compiling, checking,
timing), so a 20 s verification is not 20 s of silence; stdout carries only the verdict.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from kernelloop import defaults
from kernelloop.cli._app import app
from kernelloop.cli._common import (
    DEVICE_HELP,
    SETTINGS_NOTE,
    WORKSPACE_HELP,
    device_flag,
    errors,
    fail_usage,
    load_candidate,
    load_problem,
    settings,
)

if TYPE_CHECKING:
    from kernelloop.results import Verdict

console = Console(stderr=False)
STATUS_STYLE = {"correct": "bold green", "incorrect": "bold red", "rejected": "bold magenta",
                "compile_error": "bold yellow", "runtime_error": "bold yellow", "timeout": "bold yellow"}
# What each job phase is, in a person's words (kernelloop.progress reports (job kind, phase)).
PHASES = {("reference", "compile"): "making the reference outputs",
          ("candidate", "compile"): "compiling the candidate and making its first call",
          ("candidate", "trials"): "checking the candidate's outputs",
          ("candidate", "timing"): "timing the candidate against the baselines",
          ("candidate", "fresh"): "checking on fresh inputs",
          ("baselines", "compile"): "timing the baselines"}


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
        words = PHASES.get((kind, phase))
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


def print_verdict(verdict: Verdict) -> None:
    status = verdict.status.value
    console.print(f"[{STATUS_STYLE.get(status, 'bold')}]{status}[/] on {verdict.device}: {verdict.reason}",
                  highlight=False)
    if verdict.max_abs_err is not None:
        console.print(f"  max_abs_err {verdict.max_abs_err:.3g}   rel_err {verdict.rel_err:.3g}   trials {verdict.trials}")
    if verdict.timings:
        table = Table("timed", "median ms", "IQR ms", "samples", box=None, padding=(0, 2))
        for stats in verdict.timings.values():
            table.add_row(stats.name, f"{stats.median_ms:.4f}", f"{stats.iqr_ms:.4f}", str(stats.samples))
        console.print(table)
    if verdict.speedup is not None:
        extra = ", ".join(f"{name} {value:.2f}x" for name, value in verdict.speedups.items())
        console.print(f"  speedup over eager [bold]{verdict.speedup:.2f}x[/bold]" + (f" ({extra})" if extra else ""))
    for line in verdict.suspicious:
        console.print(f"  [red]suspicious:[/red] {line}", highlight=False)
    if verdict.own_kernels:
        console.print(f"  own kernels: {', '.join(verdict.own_kernels)}", highlight=False)
    for warning in verdict.warnings:
        console.print(f"  [yellow]note:[/yellow] {warning}", highlight=False)
    if status in ("compile_error", "runtime_error") and verdict.stderr_tail.strip():
        tail = "\n".join(verdict.stderr_tail.strip().splitlines()[-12:])
        console.print(f"[dim]{tail}[/dim]", highlight=False, markup=False)


@app.command(epilog=SETTINGS_NOTE)
def verify(
    candidate: Path = typer.Argument(..., help="candidate file with class ModelNew"),
    problem: Path = typer.Option(..., "--problem", "-p", help="problem file with Model, get_inputs, get_init_inputs"),
    device: str | None = typer.Option(None, help=DEVICE_HELP, show_default=False),
    json_out: bool = typer.Option(False, "--json", help="print the verdict as one JSON object"),
    strict: bool = typer.Option(False, help="reject any reference compute op still run through torch"),
    time_it: bool = typer.Option(True, "--time/--no-time", help="measure speed (GPU only)"),
    timeout: float = typer.Option(defaults.VERIFY_TIMEOUT_S, min=1, help="seconds allowed for each of the compile "
                                  "and run phases"),
    workspace: Path | None = typer.Option(None, help=WORKSPACE_HELP, show_default=False),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show the phase on stderr while it works"),
) -> None:
    """Judge one candidate against its problem: correctness, rules, and speed on a GPU."""
    device_flag(device)
    chosen = settings(device=device, home=workspace)
    loaded_candidate = load_candidate(candidate, "CANDIDATE")  # first: reading it needs no torch
    loaded_problem = load_problem(problem, "--problem")
    from kernelloop.problem import ProblemError
    from kernelloop.tools.verify.pool import make_pool

    try:
        with showing_phases(progress), make_pool(chosen.device, workspace=chosen.home, strict=strict,
                                                 time_it=time_it, compile_timeout_s=timeout,
                                                 run_timeout_s=timeout) as pool:
            verdict = pool.verify(loaded_candidate, loaded_problem)
    except (ProblemError, ValueError) as exc:  # the problem failed itself, or no such device here
        fail_usage(str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__)
    if json_out:
        print(verdict.model_dump_json())
    else:
        print_verdict(verdict)
    raise typer.Exit(0 if verdict.ok else 1)
