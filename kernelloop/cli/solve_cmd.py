"""`kernelloop solve PROBLEM`: run the loop with live progress; exit 0 when the best kernel is correct.

Exit codes: 0 best attempt correct, 1 anything else, 2 bad usage, 130 interrupted (Ctrl-C:
progress is saved and the command to resume is printed). With --json the last stdout line
is one object: thread_id, status, best_speedup, best_kernel, attempts, stop_reason, and more.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from kernelloop.cli._app import app
from kernelloop.cli._common import (
    BUDGET_HELP,
    CANDIDATES_HELP,
    CHECKPOINTS_HELP,
    DEVICE_HELP,
    DISK_ERRNOS,
    ROUNDS_HELP,
    SETTINGS_NOTE,
    TARGET_HELP,
    WORKSPACE_HELP,
    device_flag,
    disk_error,
    errors,
    fail_usage,
    json_errors,
    load_problem,
    plain,
    quoted,
    settings,
    sigterm_as_ctrl_c,
)
from kernelloop.cli._live import LiveView, ask_review
from kernelloop.config import defaults

if TYPE_CHECKING:
    from kernelloop.graph.report import RunSummary
    from kernelloop.starts import StartRecord

console = Console(soft_wrap=True)
START_HELP = (f"begin from this kernel, verified as attempt 0: a kernel file, or '{defaults.START_AUTO}' for the problem "
              f"family's hand-written starter (the attention problems) [default: from scratch]")


def print_result(summary: RunSummary, json_out: bool, workspace_flag: str = "") -> None:
    """The ending in a few lines, or (with --json) one object as the last stdout line."""
    if json_out:
        print(summary.model_dump_json())
        return
    speed = f"{summary.best_speedup:.3g}x over {summary.baseline}" if summary.best_speedup is not None else \
        "speed not measured"
    console.print(f"[bold]{quoted(summary.status)}[/bold] ({quoted(speed)}) after {summary.attempts} attempts in "
                  f"{summary.rounds} rounds; stopped: {quoted(summary.stop_reason or summary.run_status)}",
                  highlight=False)
    if summary.best_kernel:
        console.print(plain(f"best kernel: {summary.best_kernel}", 4000), highlight=False)
    if summary.start:
        console.print(plain(f"started from: {summary.start}", 4000), highlight=False)
    console.print(plain(f"report: {Path(summary.outputs_dir or summary.run_dir) / 'report.md'}", 4000),
                  highlight=False)
    console.print(plain(f"steps: kernelloop runs show {summary.thread_id}{workspace_flag}", 4000), highlight=False)


def load_start(start: str | None, problem_name: str) -> StartRecord | None:
    """--start as the run keeps it; a file that can't be read is one line naming the flag, before anything
    starts; 'auto' with no starter for this problem says so in one line and the run starts from scratch."""
    from kernelloop.problem import ProblemError
    from kernelloop.starts import resolve_start

    try:
        record = resolve_start(start if start is None or start == defaults.START_AUTO else Path(start), problem_name)
    except ProblemError as exc:
        fail_usage(f"--start: {exc}")
    if record is not None and not record.has_kernel:
        errors.print(f"[yellow]warning:[/yellow] {escape(record.line)}", highlight=False)
    return record


def recording_ended(exc, flag: str) -> NoReturn:
    """A recording that runs out (serve.runs.RecordingEnded): one line, what to run next; the run is resumable."""
    resume = f"kernelloop runs resume {exc.thread_id}{flag}"
    fail_usage(f"{exc.why}; the run is saved at its last checkpoint: `{resume} --base-url URL --model NAME` goes on "
               f"with a live model, or `{resume} --stop-at-recording-end` ends it where the recording ends",
               code="recording_ended")


STOP_AT_END_HELP = "when the recording has no reply for a model call, end the run there (resumable) instead of failing"


def interrupted(thread_id: str, workspace: Path, workspace_flag: str, json_out: bool) -> NoReturn:
    """Ctrl-C: the checkpoint is saved; say how to go on, print what we have, exit 130."""
    errors.print(f"\ninterrupted: progress is saved. Resume with:\n  kernelloop runs resume {thread_id}"
                 f"{workspace_flag}", highlight=False)
    result = workspace / "runs" / thread_id / "result.json"
    if json_out and result.is_file():
        from kernelloop.graph.report import RunSummary

        record = json.loads(result.read_text())
        print(RunSummary.model_validate({k: v for k, v in record.items() if k in RunSummary.model_fields})
              .model_dump_json())
    sys.stdout.flush()
    sys.stderr.flush()
    # Model calls still running in worker threads can't be cancelled and would hold the exit for
    # minutes; everything done is checkpointed (durability="sync"), so leave without them.
    os._exit(130)


@app.command(epilog=SETTINGS_NOTE)
def solve(
    problem: Path = typer.Argument(..., help="problem file (KernelBench format: Model, get_inputs, get_init_inputs)"),
    budget: str | None = typer.Option(None, help=BUDGET_HELP, show_default=False),
    candidates: int | None = typer.Option(None, min=1, max=defaults.MAX_CANDIDATES, help=CANDIDATES_HELP,
                                          show_default=False),
    target: str | None = typer.Option(None, help=TARGET_HELP, show_default=False),
    baseline: str = typer.Option(defaults.BASELINE, help="what the target is measured against (eager, compile, ...)"),
    max_rounds: int | None = typer.Option(None, min=1, max=defaults.MAX_ROUNDS_LIMIT, help=ROUNDS_HELP,
                                          show_default=False),
    device: str | None = typer.Option(None, help=DEVICE_HELP, show_default=False),
    backend: str | None = typer.Option(None, help=f"triton, cuda (load_inline) or auto (the planner picks) "
                                                  f"[default: {defaults.BACKEND}]", show_default=False),
    interactive: bool = typer.Option(False, help="approve/edit the plan, add hints or stop between rounds"),
    hint: list[str] = typer.Option([], help="a hint for the coders (repeatable)"),
    start: str | None = typer.Option(defaults.START, metavar="KERNEL|auto", help=START_HELP, show_default=False),
    critic_model: bool = typer.Option(False, help="the critic also asks the model for advice (one call per round)"),
    json_out: bool = typer.Option(False, "--json", help="last stdout line: the result as one JSON object"),
    stream: bool = typer.Option(True, "--stream/--no-stream", help="stream the model's replies, so its reasoning "
                                "shows in the live view as it comes (off: for an endpoint that can't stream)"),
    base_url: str | None = typer.Option(None, help="OpenAI-compatible endpoint (or KERNELLOOP_BASE_URL)"),
    model: str | None = typer.Option(None, help="model name (or KERNELLOOP_MODEL)"),
    api_key: str | None = typer.Option(None, help="API key (or KERNELLOOP_API_KEY)"),
    recorded: Path | None = typer.Option(None, help="re-serve a recording (.jsonl or run dir) instead of a model"),
    stop_at_recording_end: bool = typer.Option(False, help=STOP_AT_END_HELP),
    workspace: Path | None = typer.Option(None, help=WORKSPACE_HELP, show_default=False),
    checkpoints: str | None = typer.Option(None, help=CHECKPOINTS_HELP, show_default=False),
    thread: str | None = typer.Option(None, help="thread id to use (default: problem name + time)"),
) -> None:
    """Turn a PyTorch reference into a faster, verified kernel: plan, code, verify, critique, repeat."""
    json_errors(json_out)
    if backend is not None and backend not in defaults.BACKENDS:
        fail_usage(f"--backend must be triton, cuda or auto, not {backend!r}")
    device_flag(device)
    chosen = settings(budget=budget, candidates=candidates, target=target, max_rounds=max_rounds, device=device,
                      backend=backend, home=workspace, checkpoints=checkpoints, base_url=base_url, model=model,
                      api_key=api_key)
    if recorded is not None and not recorded.exists():
        fail_usage(f"--recorded: {recorded}: no such recording (a .jsonl file or a run dir)")
    # On a terminal, a line at once (torch and the agent loop take seconds to load); it clears itself.
    with errors.status(f"kernelloop: loading {quoted(problem.name)} and the agent loop"):
        loaded = load_problem(problem, "PROBLEM")
        start_record = load_start(start, loaded.name)
        from kernelloop.serve import runs as solving  # lazy: the agent loop loads only once the flags are good

    space = chosen.workspace.root
    # the flags a printed `runs resume` / `runs show` needs to find this thread again (the endpoint is remembered)
    flag = "".join(f" {name} {shlex.quote(str(value))}" for name, value in
                   (("--workspace", workspace), ("--checkpoints", checkpoints)) if value)
    thread_id = thread or solving.new_thread_id(loaded.name)
    view = LiveView()  # drawn from the run's first report on, so an error before it stands alone
    sigterm_as_ctrl_c()
    try:
        with view:
            result = solving.solve(
                loaded, settings=chosen, baseline=baseline, interactive=interactive, hints=hint, start=start_record,
                critic_model=critic_model, recorded=recorded, stop_at_recording_end=stop_at_recording_end,
                thread_id=thread_id, stream_reasoning=stream,
                on_event=view.on_event, on_progress=view.on_progress,
                on_review=(lambda p: ask_review(p, view)) if interactive else None)
    except KeyboardInterrupt:
        interrupted(thread_id, space, flag, json_out)
    except solving.RecordingEnded as exc:
        recording_ended(exc, flag)
    except (ValueError, FileNotFoundError) as exc:  # bad input (ConfigError, SolveError, PoolError): one line
        fail_usage(str(exc).splitlines()[0])
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        fail_usage(disk_error(exc, thread_id, flag))
    print_result(result, json_out, flag)
    raise typer.Exit(0 if result.status == "correct" else 1)
