"""`kernelloop profile CANDIDATE --problem P [--ncu]`: where a correct kernel's device time goes."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kernelloop.cli._app import app
from kernelloop.cli._common import (
    WORKSPACE_HELP,
    device_flag,
    fail_usage,
    load_candidate,
    load_problem,
    plain,
    quoted,
    settings,
)
from kernelloop.cli.verify_cmd import print_verdict, showing_phases
from kernelloop.records import Profile

console = Console()


def print_profile(record: Profile) -> None:
    """A verdict's profile (results.Profile, the record the critic reads)."""
    table = Table("kernel", "kind", "calls", "mean ms", "%", box=None, padding=(0, 2))
    for row in record.kernels:
        table.add_row(plain(row.name, 70), plain(row.kind), str(row.calls), f"{row.mean_ms:.4f}", f"{100 * row.share:.1f}")
    console.print(table)
    console.print(f"device time: own {100 * record.own_share:.1f}%  library {100 * record.library_share:.1f}%  "
                  f"other {100 * record.other_share:.1f}%")
    roof = record.roofline
    if roof is not None:
        console.print(f"roofline ({roof.peaks}, {roof.peak_key}): floor {roof.floor_ms:.4f} ms, {roof.bound}-bound; "
                      f"at {roof.percent_of_limit:.1f}% of the limit; {roof.achieved_gb_per_s:.0f} GB/s "
                      f"({roof.bandwidth_pct:.0f}% of the bandwidth)")


def print_ncu(report) -> None:
    for kernel in report.kernels:
        brief = kernel.brief()
        stalls = ", ".join(f"{reason} {value:.2f}" for reason, value in brief.pop("top_stalls", []))
        name = brief.pop("kernel")
        # Kernel names are the candidate's own: text, never markup.
        console.print(f"[bold]{quoted(name, 70)}[/bold]  " + quoted("  ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in brief.items()), 4000), highlight=False)
        if stalls:
            console.print(f"  top stalls (warps per issue): {quoted(stalls, 4000)}", highlight=False)
    for note in report.notes:
        console.print(f"[yellow]ncu note:[/yellow] {quoted(note, 4000)}", highlight=False)


@app.command()
def profile(
    candidate: Path = typer.Argument(..., help="candidate file with class ModelNew"),
    problem: Path = typer.Option(..., "--problem", "-p", help="problem file with Model, get_inputs, get_init_inputs"),
    ncu: bool = typer.Option(False, "--ncu", help="also run Nsight Compute on the candidate's own kernels"),
    device: str = typer.Option("cuda", help="cuda or cuda:N (profiling needs a GPU)"),
    json_out: bool = typer.Option(False, "--json", help="print the verdict and the ncu report as one JSON object"),
    workspace: Path | None = typer.Option(None, help=WORKSPACE_HELP, show_default=False),
) -> None:
    """Verify on the GPU, then show the kernel table, device-time split, roofline, and (--ncu) hardware metrics."""
    device_flag(device)
    if not device.startswith("cuda"):
        fail_usage(f"--device must be cuda or cuda:N for profiling, not {device!r}; "
                   "`kernelloop verify --device cpu` checks correctness on the CPU")
    space = settings(home=workspace).home
    loaded_candidate = load_candidate(candidate, "CANDIDATE")  # first: reading it needs no torch
    loaded_problem = load_problem(problem, "--problem")
    import torch

    from kernelloop.problem import ProblemError
    from kernelloop.tools.verify.pool import make_pool

    if not torch.cuda.is_available():
        fail_usage("profiling needs a CUDA GPU; on this machine use `kernelloop verify --device cpu` for correctness")
    try:
        with showing_phases(not json_out), make_pool(device, workspace=space) as pool:
            verdict = pool.verify(loaded_candidate, loaded_problem)
    except (ProblemError, ValueError) as exc:
        fail_usage(str(exc).splitlines()[0])
    report = None
    if ncu and verdict.ok:
        from kernelloop.tools.profile.ncu_run import run_ncu

        report = run_ncu(candidate, problem, verdict.own_kernels)
    if json_out:
        print(json.dumps({"verdict": verdict.model_dump(), "ncu": report.model_dump() if report else None}))
    else:
        print_verdict(verdict)
        if verdict.profile:
            print_profile(verdict.profile)
        if report is not None:
            print_ncu(report)
    raise typer.Exit(0 if verdict.ok else 1)
