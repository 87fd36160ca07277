"""`kernelloop runs list|show|resume|replay|fork|export`: the threads in the checkpoint DB.

    runs list                         threads with best speedup and status
    runs show THREAD [--turn ID]      a thread's steps as branches, attempts, tokens; --turn: one model
                                      turn, the messages sent and the answer
    runs diff A B                     two attempts (T:r1c0 T:r2c0) or two threads' best (T1 T2) side by side
    runs resume THREAD                continue from the last checkpoint (after Ctrl-C or a kill)
    runs replay THREAD [--checkpoint ID] [--recorded]   re-run from a checkpoint: recorded turns are
                                      re-served where the prompt is unchanged, the rest ask the model;
                                      --recorded: recorded turns only (no endpoint; a changed prompt fails)
    runs fork THREAD --checkpoint ID [--hint ...] [--model ...] [--target ...]   branch with changes
    runs export THREAD OUT.jsonl      the thread's model turns as a recording file
"""

from __future__ import annotations

import json
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.rule import Rule
from rich.syntax import Syntax
from rich.table import Column, Table
from rich.tree import Tree

from kernelloop.cli._app import app
from kernelloop.cli._common import (
    CHECKPOINTS_HELP,
    WORKSPACE_HELP,
    duration_flag,
    errors,
    fail_usage,
    json_errors,
    plain,
    quoted,
    settings,
    sigterm_as_ctrl_c,
    target_flag,
)
from kernelloop.cli._live import STYLE, LiveView, ask_review
from kernelloop.cli.solve_cmd import STOP_AT_END_HELP, interrupted, print_result, recording_ended
from kernelloop.config import defaults
from kernelloop.safe_text import printable

if TYPE_CHECKING:  # the graph loads only when a command runs, never for --help
    from kernelloop.graph.history import Branch
    from kernelloop.graph.rundir import RunDir

runs_app = typer.Typer(help="List, inspect, resume, replay and fork runs (LangGraph threads).", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
console = Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)  # pipes get whole ids

WORKSPACE = typer.Option(None, help=WORKSPACE_HELP, show_default=False)
CHECKPOINTS = typer.Option(None, help=CHECKPOINTS_HELP, show_default=False)
STRICT_HELP = ("only recorded model turns: no endpoint; a changed or missing prompt is an error (default: recorded "
               "turns where the prompt is unchanged, the model for the rest)")
JSON_OUT = typer.Option(False, "--json", help="print JSON (one object or array, on the last stdout line)")


def _where(workspace: Path | None, checkpoints: str | None) -> tuple[Path, str | None]:
    """The workspace and checkpoint URL from the command's Settings: --workspace / --checkpoints, else
    KERNELLOOP_HOME / KERNELLOOP_CHECKPOINTS, .env, kernelloop.toml's home / checkpoints, else the defaults."""
    chosen = settings(home=workspace, checkpoints=checkpoints)
    return chosen.workspace.root, chosen.checkpoints


def _open(checkpoints: str | None, space: Path):
    """The checkpointer and a graph on it (imported here: langgraph is slow to import for `--help`)."""
    from kernelloop.graph.build import build_graph
    from kernelloop.graph.checkpoint import open_checkpointer

    return open_checkpointer(checkpoints, space), build_graph


@contextmanager
def _reading(checkpoints: str | None, space: Path):
    """(saver, build_graph) for the read-only commands; an unreadable database is one line, exit 2."""
    from kernelloop.config.endpoint import ConfigError

    opened, build_graph = _open(checkpoints, space)
    try:
        with opened as saver:
            yield saver, build_graph
    except ConfigError as exc:  # CheckpointError included: names the file and thread
        fail_usage(str(exc).splitlines()[0])


def _status(snapshot, run: RunDir) -> str:
    if snapshot.values.get("status") == "finished":
        return "finished"
    if run.lock_holder() is not None:
        return "running"
    return "waiting" if any(task.interrupts for task in snapshot.tasks) else "stopped"


def _thread(graph, space: Path, thread_id: str):
    from kernelloop.graph.report import summarize
    from kernelloop.graph.rundir import RunDir

    snapshot = graph.get_state({"configurable": {"thread_id": thread_id}})
    if not snapshot.values:
        fail_usage(f"no thread {thread_id} in {space}: `kernelloop runs list` shows the threads")
    run = RunDir(space, thread_id)
    return snapshot, run, summarize(run, snapshot.values, _status(snapshot, run))


@runs_app.command("list")
def list_runs(workspace: Path | None = WORKSPACE, checkpoints: str | None = CHECKPOINTS,
              json_out: bool = JSON_OUT) -> None:
    """Every thread, newest first: problem, status, best attempt and speedup."""
    from kernelloop.graph.checkpoint import thread_ids

    space, checkpoints = _where(workspace, checkpoints)
    with _reading(checkpoints, space) as (saver, build_graph):
        graph = build_graph(saver)
        summaries = [_thread(graph, space, tid)[2] for tid in thread_ids(saver)]
    if json_out:
        print(json.dumps([s.model_dump(mode="json") for s in summaries]))
        return
    table = Table("problem", "run", "best", "speedup", "attempts", "rounds", "stop reason", box=None)
    table.columns.insert(0, Column("thread", no_wrap=True, min_width=max((len(s.thread_id) for s in summaries),
                                                                          default=6)))
    for s in summaries:
        table.add_row(plain(s.thread_id), plain(s.problem), plain(s.run_status),
                      plain(s.status, style=STYLE.get(s.status, "")),
                      f"{s.best_speedup:.3g}x" if s.best_speedup is not None else "-", str(s.attempts),
                      str(s.rounds), plain(s.stop_reason or ""))
    if summaries:
        console.print(table)
    else:  # say where it looked, so a run kept elsewhere is one flag or setting away
        where = checkpoints if checkpoints else str(space / "checkpoints.sqlite")
        console.print(plain(f"no runs in {where} (the workspace {space}); runs kept elsewhere: --workspace DIR or "
                            "KERNELLOOP_HOME, --checkpoints URL or KERNELLOOP_CHECKPOINTS (or kernelloop.toml)", 4000),
                      highlight=False)


@runs_app.command("show")
def show(thread: str, turn: str | None = typer.Option(None, "--turn", help="one model turn: an attempt id (r2c1), "
                                                                           "'plan' or a critic round (critic/r2)"),
         workspace: Path | None = WORKSPACE, checkpoints: str | None = CHECKPOINTS, json_out: bool = JSON_OUT) -> None:
    """A thread's steps as branches (a fork starts one, with its checkpoint and hint), its attempts and
    tokens; with --turn, exactly what the model was sent and what it answered."""
    from kernelloop.graph.history import branches, step_row
    from kernelloop.graph.state import attempts_of, settings_of

    space, checkpoints = _where(workspace, checkpoints)
    with _reading(checkpoints, space) as (saver, build_graph):
        graph = build_graph(saver)
        snapshot, run, summary = _thread(graph, space, thread)
        history = list(graph.get_state_history({"configurable": {"thread_id": thread}}))
    if turn is not None:
        _show_turn(run, [s.values for s in history], turn, json_out)
        return
    steps = [step_row(s) for s in reversed(history)]
    attempts = attempts_of(snapshot.values)
    baseline = settings_of(snapshot.values).baseline
    if json_out:
        rows = [a.model_dump(mode="json", exclude={"code"}) for a in attempts]
        print(json.dumps({"summary": summary.model_dump(mode="json"), "steps": steps, "attempts": rows,
                          "branch_files": run.branch_files()}))
        return
    print_result(summary, False)
    console.print(f"tokens: {summary.tokens.line()}", highlight=False)
    console.print(_branch_tree(branches(steps), Tree(f"[bold]{quoted(thread)}[/] steps (fork or replay from any with "
                                                     "a next step)")))
    table = Table("attempt", "verdict", "speedup", "model s", "verify s", "tokens in/out", "reason", box=None)
    for a in attempts:
        speedup = a.speedup_vs(baseline)
        table.add_row(plain(a.id), plain(a.status, style=STYLE.get(a.status, "")),
                      f"{speedup:.3g}x" if speedup else "-",
                      f"{a.model_s:.1f}", f"{a.verify_s:.1f}" if a.verify_s is not None else "-",
                      f"{a.prompt_tokens:,}/{a.completion_tokens:,}",
                      plain(a.verdict.reason if a.verdict else a.model_error or "", 80))
    console.print(table)
    for branch, files in run.branch_files().items():
        where = run.root / "branches" / branch if branch else run.root
        console.print(plain(f"files of {'branch ' + branch if branch else 'the first branch'}: {where} "
                            f"({', '.join(files) or 'none yet'})", 4000), highlight=False)


def _branch_tree(branch: Branch, tree: Tree) -> Tree:
    """Each branch's steps in order; a fork's branch hangs under the step it came from."""
    forks: dict[str | None, list[Branch]] = {b.start: [] for b in branch.branches}
    for b in branch.branches:
        forks[b.start].append(b)
    for s in branch.steps:
        line = (f"{s['checkpoint']}  step {s['step']}  {s['phase'] or '-'}  round {s['round']}  "
                f"{s['attempts']} attempts  best {s['best'] or '-'}  next {', '.join(s['next']) or '-'}")
        node = tree.add(plain(line, 4000), highlight=False)
        for b in forks.get(s["checkpoint"], []):
            what = [f"hint {b.hint!r}"] if b.hint else []
            what += [f"{key}={value}" for key, value in b.changes.items()]
            named = f"[bold]branch {quoted(b.name)}[/] (files: branches/{quoted(b.name)}/)" if b.name else "[bold]branch[/]"
            _branch_tree(b, node.add(f"{named} from {quoted(s['checkpoint'])}" +
                                     (f": {quoted(', '.join(what), 4000)}" if what else " (a replay)")))
    return tree


def _show_turn(run, states: list[dict], wanted: str, json_out: bool) -> None:
    """One recorded turn: the messages sent, then the reasoning and the answer. Looked up in every
    state of the thread (newest first), so turns of earlier branches are found too."""
    from kernelloop.graph.rundir import turn_refs

    key = {"plan": "planner/plan"}.get(wanted, wanted if "/" in wanted else f"coder/{wanted}")
    ref = next((turn_refs(values).get(key) for values in states if key in turn_refs(values)), None)
    if ref is None:
        fail_usage(f"no recorded model turn {key} in thread {run.thread_id}: give an attempt id (r1c0), 'plan' "
                   "or critic/rN")
    recorded = run.load_turn(ref["turn_file"], ref.get("turn_sha256"))
    if json_out:
        print(recorded.model_dump_json())
        return
    t = recorded.turn
    console.print(f"[bold]{quoted(recorded.key)}[/]  {quoted(run.path(ref['turn_file']))}  model {quoted(t.model)}  "
                  f"{t.prompt_tokens:,} prompt + {t.completion_tokens:,} completion tokens "
                  f"({t.reasoning_tokens:,} reasoning)  {t.latency_s:.1f} s  {t.attempts} HTTP attempts  "
                  f"finish {t.finish_reason}", highlight=False)
    if not t.messages:
        console.print("(this turn was recorded before messages were kept: only its prompt hash is known)")
    for message in t.messages:
        console.print(Rule(plain(f"sent: {message.role}")))
        console.print(printable(message.content), markup=False, highlight=False)
    # What the model wrote is shown whole, but never as terminal escapes.
    console.print(Rule("reasoning"))
    console.print(printable(t.reasoning or "(none)"), markup=False, highlight=False)
    console.print(Rule("answer"))
    console.print(printable(t.content), markup=False, highlight=False)


@runs_app.command()
def diff(left: str = typer.Argument(..., help="THREAD (its best attempt) or THREAD:ATTEMPT"),
         right: str = typer.Argument(..., help="THREAD, THREAD:ATTEMPT, or just ATTEMPT (of LEFT's thread)"),
         workspace: Path | None = WORKSPACE, checkpoints: str | None = CHECKPOINTS, json_out: bool = JSON_OUT) -> None:
    """Two attempts side by side (verdict, speed, tokens) and the diff of their code: two attempts of a
    thread (t:r1c0 t:r2c0, or t:r1c0 r2c0) or the best attempts of two threads (t1 t2)."""
    from kernelloop.graph.history import code_diff, side
    from kernelloop.graph.state import attempts_of, best_of, settings_of

    space, checkpoints = _where(workspace, checkpoints)
    left_thread = left.split(":", 1)[0]
    if ":" not in right and ":" in left and right.startswith("r") and "c" in right:
        right = f"{left_thread}:{right}"  # an attempt of the same thread
    picked = []
    with _reading(checkpoints, space) as (saver, build_graph):
        graph = build_graph(saver)
        for name in (left, right):
            thread, _, attempt_id = name.partition(":")
            values = _thread(graph, space, thread)[0].values
            attempt = next((a for a in attempts_of(values) if a.id == attempt_id), None) if attempt_id \
                else best_of(values)
            if attempt is None:
                fail_usage(f"no attempt {attempt_id or '(best)'} in thread {thread}: `kernelloop runs show {thread}` "
                           "lists them")
            picked.append((f"{thread}:{attempt.id}", attempt, settings_of(values).baseline))
    (lname, la, lbase), (rname, ra, rbase) = picked
    patch = code_diff(la, ra, lname, rname)
    sides = {"left": side(la, lbase) | {"name": lname}, "right": side(ra, rbase) | {"name": rname}}
    if json_out:
        print(json.dumps(sides | {"code_diff": patch}))
        return
    table = Table("", lname, rname, box=None)
    for key in ("status", "speedup", "candidate_ms", "reason", "model", "prompt_tokens", "completion_tokens", "lines"):
        values = [sides[s][key] for s in ("left", "right")]
        shown = [f"{v:.3g}" if isinstance(v, float) else plain("-" if v is None else v, 70) for v in values]
        table.add_row(key, *shown)
    console.print(table)
    console.print(Syntax(patch, "diff") if patch else "(the code is the same)")


def _run(thread: str, space: Path, json_out: bool, workspace: Path | None, call,
         checkpoints: str | None = None) -> None:
    """Drive a resume/replay/fork with the live view; same endings and exit codes as `solve`."""
    flag = "".join(f" {name} {shlex.quote(str(value))}" for name, value in
                   (("--workspace", workspace), ("--checkpoints", checkpoints)) if value)
    from kernelloop.serve.runs import RecordingEnded

    view = LiveView()
    sigterm_as_ctrl_c()
    try:
        with view:
            result = call(on_event=view.on_event, on_progress=view.on_progress,
                          on_review=lambda payload: ask_review(payload, view))
    except KeyboardInterrupt:
        interrupted(thread, space, flag, json_out)
    except RecordingEnded as exc:
        recording_ended(exc, flag)
    except (ValueError, FileNotFoundError) as exc:  # bad input (ConfigError, SolveError, PoolError): one line
        fail_usage(str(exc).splitlines()[0])
    print_result(result, json_out, flag)
    raise typer.Exit(0 if result.status == "correct" else 1)


RECORDING = typer.Option(None, help="re-serve this recording (.jsonl or run dir); default: the one the run was "
                                   "started with, if any")
STOP_AT_END = typer.Option(False, help=STOP_AT_END_HELP)
ENDPOINT_NOTE = ("The model source is the run's own unless told otherwise: a run started from a recording goes on with "
                 "it; --base-url / --model ask a live model (after the recorded turns); --recording FILE another "
                 "recording.")


@runs_app.command(epilog=ENDPOINT_NOTE)
def resume(thread: str, base_url: str | None = None, model: str | None = None, api_key: str | None = None,
           recorded: bool = typer.Option(False, help=STRICT_HELP), recording: Path | None = RECORDING,
           stop_at_recording_end: bool = STOP_AT_END,
           workspace: Path | None = WORKSPACE, checkpoints: str | None = CHECKPOINTS, json_out: bool = JSON_OUT) -> None:
    """Continue a thread from its last checkpoint: nothing done is redone, no attempt is verified twice."""
    from kernelloop.serve.runs import resume as resume_thread

    json_errors(json_out)
    space, checkpoints = _where(workspace, checkpoints)
    _run(thread, space, json_out, workspace, lambda **ui: resume_thread(
        thread, recorded=recording or recorded, base_url=base_url, model=model, api_key=api_key, workspace=space,
        checkpoint_url=checkpoints, stop_at_recording_end=stop_at_recording_end, **ui), checkpoints)


@runs_app.command(epilog=ENDPOINT_NOTE)
def replay(thread: str, checkpoint: str | None = typer.Option(None, help="checkpoint id (`runs show`); default: last"),
           recorded: bool = typer.Option(False, help=STRICT_HELP), recording: Path | None = RECORDING,
           stop_at_recording_end: bool = STOP_AT_END,
           reverify: bool = typer.Option(False, help="verify again even code whose verdict is journaled"),
           base_url: str | None = None, model: str | None = None, api_key: str | None = None,
           workspace: Path | None = WORKSPACE, checkpoints: str | None = CHECKPOINTS, json_out: bool = JSON_OUT) -> None:
    """Re-execute a thread from a checkpoint (the steps after it run again; the ones before are kept)."""
    from kernelloop.serve.runs import replay as replay_thread

    json_errors(json_out)
    space, checkpoints = _where(workspace, checkpoints)
    _run(thread, space, json_out, workspace, lambda **ui: replay_thread(
        thread, checkpoint, recorded=recording or recorded, reverify=reverify, base_url=base_url, model=model,
        api_key=api_key, workspace=space, checkpoint_url=checkpoints, stop_at_recording_end=stop_at_recording_end,
        **ui), checkpoints)


@runs_app.command(epilog=ENDPOINT_NOTE)
def fork(thread: str, checkpoint: str = typer.Option(..., help="checkpoint id to branch from (`runs show`)"),
         hint: str | None = typer.Option(None, help="a hint for the coders from the branch on"),
         target: str | None = typer.Option(None, help="new target speedup, e.g. 1.5x"),
         budget: str | None = typer.Option(None, help="new wall-clock budget, e.g. 10m"),
         max_rounds: int | None = typer.Option(None, min=1, max=defaults.MAX_ROUNDS_LIMIT),
         candidates: int | None = typer.Option(None, min=1, max=defaults.MAX_CANDIDATES),
         baseline: str | None = None,
         model: str | None = typer.Option(None, help="another model for the branch"),
         recorded: bool = typer.Option(False, help=STRICT_HELP), recording: Path | None = RECORDING,
         stop_at_recording_end: bool = STOP_AT_END,
         base_url: str | None = None, api_key: str | None = None,
         workspace: Path | None = WORKSPACE, checkpoints: str | None = CHECKPOINTS, json_out: bool = JSON_OUT) -> None:
    """Branch a thread at a checkpoint with changed state (hint, model, target, budget) and run the branch; its
    report, best kernel and result go under the run dir's branches/<name>/ (the parent's stay as they were)."""
    from kernelloop.serve.runs import fork as fork_thread

    json_errors(json_out)
    changes: dict[str, object] = {key: value for key, value in {
        "model": model, "baseline": baseline, "budget_s": duration_flag(budget), "max_rounds": max_rounds,
        "candidates": candidates}.items() if value is not None}
    if target is not None:
        changes["target_speedup"] = target_flag(target)  # 'none' -> None: stop at the first correct kernel
    space, checkpoints = _where(workspace, checkpoints)
    _run(thread, space, json_out, workspace, lambda **ui: fork_thread(
        thread, checkpoint, hint=hint, changes=changes, recorded=recording or recorded, base_url=base_url,
        model=model, api_key=api_key, workspace=space, checkpoint_url=checkpoints,
        stop_at_recording_end=stop_at_recording_end, **ui), checkpoints)


@runs_app.command()
def export(thread: str, out: Path, workspace: Path | None = WORKSPACE, checkpoints: str | None = CHECKPOINTS) -> None:
    """Write the thread's model turns (plan, coders, critic) as a recording: `solve --recorded OUT` re-serves it."""
    from kernelloop.graph.rundir import recorded_turns, write_recording

    space, checkpoints = _where(workspace, checkpoints)
    with _reading(checkpoints, space) as (saver, build_graph):
        snapshot, run, _ = _thread(build_graph(saver), space, thread)
    turns = recorded_turns(run, snapshot.values)
    write_recording(out, turns)
    errors.print(f"{len(turns)} model turns written to {out}", highlight=False)

