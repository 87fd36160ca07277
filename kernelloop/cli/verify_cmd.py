"""`kernelloop verify CANDIDATE --problem PROBLEM`: exit 0 correct, 1 any other verdict, 2 bad usage."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kernelloop.cli._app import app
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.results import Status, Verdict

console = Console(stderr=False)
errors = Console(stderr=True)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


STATUS_STYLE = {Status.correct: "bold green", Status.incorrect: "bold red", Status.rejected: "bold magenta",
                Status.compile_error: "bold yellow", Status.runtime_error: "bold yellow", Status.timeout: "bold yellow"}


def fail_usage(message: str) -> None:
    """Bad usage: one line on stderr, exit code 2."""
    errors.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(2)


def print_verdict(verdict: Verdict) -> None:
    console.print(f"[{STATUS_STYLE[verdict.status]}]{verdict.status.value}[/] on {verdict.device}: {verdict.reason}",
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
    if verdict.status in (Status.compile_error, Status.runtime_error) and verdict.stderr_tail.strip():
        tail = "\n".join(verdict.stderr_tail.strip().splitlines()[-12:])
        console.print(f"[dim]{tail}[/dim]", highlight=False, markup=False)


@app.command()
def verify(
    candidate: Path = typer.Argument(..., help="candidate file with class ModelNew"),
    problem: Path = typer.Option(..., "--problem", "-p", help="problem file with Model, get_inputs, get_init_inputs"),
    device: Device = typer.Option(Device.auto, help="cpu runs Triton in its interpreter: correctness only"),
    json_out: bool = typer.Option(False, "--json", help="print the verdict as one JSON object"),
    strict: bool = typer.Option(False, help="reject any reference compute op still run through torch"),
    time_it: bool = typer.Option(True, "--time/--no-time", help="measure speed (GPU only)"),
    timeout: float = typer.Option(300.0, help="seconds allowed for each of the compile and run phases"),
    workspace: Path | None = typer.Option(None, help="workspace dir (default $KERNELLOOP_HOME or ./.kernelloop)"),
) -> None:
    """Judge one candidate against its problem: correctness, rules, and speed on a GPU."""
    from kernelloop.tools.verify.verifier import Verifier

    try:
        loaded_problem = Problem.from_file(problem)
        loaded_candidate = Candidate.from_file(candidate)
        with Verifier(device=device.value, strict=strict, time_it=time_it, workspace=workspace,
                      compile_timeout_s=timeout, run_timeout_s=timeout) as verifier:
            verdict = verifier.verify(loaded_candidate, loaded_problem)
    except (ProblemError, ValueError) as exc:
        fail_usage(str(exc))
    if json_out:
        print(verdict.model_dump_json())
    else:
        print_verdict(verdict)
    raise typer.Exit(0 if verdict.ok else 1)
