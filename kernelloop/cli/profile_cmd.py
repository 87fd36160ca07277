"""`kernelloop profile CANDIDATE --problem P [--ncu]`: where a correct kernel's device time goes."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from kernelloop.cli._app import app
from kernelloop.cli.verify_cmd import fail_usage, print_verdict
from kernelloop.problem import Candidate, Problem, ProblemError

console = Console()


def print_profile(profile: dict) -> None:
    table = Table("kernel", "calls", "total ms", "%", box=None, padding=(0, 2))
    for row in profile.get("kernels", []):
        table.add_row(row["name"][:70], str(row["calls"]), f"{row['total_ms']:.4f}", f"{row['percent']:.1f}")
    console.print(table)
    split = profile.get("kernel_split") or {}
    if split:
        console.print(f"device time: own {100 * split.get('own_share', 0):.1f}%  library "
                      f"{100 * split.get('library_share', 0):.1f}%  other {100 * split.get('other_share', 0):.1f}%")
    roof = profile.get("roofline") or {}
    if roof.get("floor_ms"):
        bound = "compute" if roof["compute_floor_ms"] >= roof["memory_floor_ms"] else "memory"
        console.print(f"roofline ({roof['peaks']}, {roof['peak_key']}): floor {roof['floor_ms']:.4f} ms, {bound}-bound; "
                      f"at {roof.get('percent_of_limit', 0):.1f}% of the limit")


def print_ncu(report) -> None:
    for kernel in report.kernels:
        brief = kernel.brief()
        stalls = ", ".join(f"{reason} {value:.2f}" for reason, value in brief.pop("top_stalls", []))
        name = brief.pop("kernel")
        console.print(f"[bold]{name[:70]}[/bold]  " + "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                                             for k, v in brief.items()), highlight=False)
        if stalls:
            console.print(f"  top stalls (warps per issue): {stalls}", highlight=False)
    for note in report.notes:
        console.print(f"[yellow]ncu note:[/yellow] {note}", highlight=False)


@app.command()
def profile(
    candidate: Path = typer.Argument(..., help="candidate file with class ModelNew"),
    problem: Path = typer.Option(..., "--problem", "-p"),
    ncu: bool = typer.Option(False, "--ncu", help="also run Nsight Compute on the candidate's own kernels"),
    json_out: bool = typer.Option(False, "--json"),
    workspace: Path | None = typer.Option(None),
) -> None:
    """Verify on the GPU, then show the kernel table, device-time split, roofline, and (--ncu) hardware metrics."""
    import torch

    from kernelloop.tools.verify.verifier import Verifier

    if not torch.cuda.is_available():
        fail_usage("profiling needs a CUDA GPU; on this machine use `kernelloop verify --device cpu` for correctness")
    try:
        loaded_problem, loaded_candidate = Problem.from_file(problem), Candidate.from_file(candidate)
        with Verifier(device="cuda", workspace=workspace) as verifier:
            verdict = verifier.verify(loaded_candidate, loaded_problem)
    except (ProblemError, ValueError) as exc:
        fail_usage(str(exc))
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
