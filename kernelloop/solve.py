"""Run the loop from Python: `solve` a problem, `resume`/`replay` a thread, `fork` it with changes.

The CLI, the bench and the MCP server all come through here. Every entry point:
- opens the checkpointer (SQLite in the workspace unless a URL says otherwise),
- takes the thread's lock, drives the graph (interrupts go to `on_review`), and
- on any ending, finalize or not (Ctrl-C, an error), writes best_kernel.py, result.json and
  report.md of the best attempt so far, then returns or re-raises.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from kernelloop.agents.planner import ReferenceFacts, reference_facts
from kernelloop.agents.turns import ChatClient, KeyedChatClient, KeyedReplayChatClient
from kernelloop.config import workspace_dir
from kernelloop.errors import error_line
from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import open_checkpointer
from kernelloop.graph.context import Context, RunEvent, VerifierLike
from kernelloop.graph.report import RunSummary, summarize, write_outputs
from kernelloop.graph.rundir import RunDir, read_recording, recorded_turns
from kernelloop.graph.state import ProblemRecord, Review, RunSettings, settings_of
from kernelloop.problem import Problem

OnEvent = Callable[[RunEvent], None]
OnProgress = Callable[[RunSummary], None]
OnReview = Callable[[dict], Review | dict]  # gets an interrupt's payload, returns the person's answer


class RunCancelled(Exception):
    """Raised from a callback (on_event / on_progress) to stop a run at a safe point, like Ctrl-C."""


class SolveError(ValueError):
    """A request that can't be served (unknown thread, thread exists, checkpoint not forkable). One line."""


class SolveResult(RunSummary):
    """What a run ended with (also written to the run dir as result.json)."""

    report: str | None = None


def new_thread_id(problem_name: str) -> str:
    return f"{problem_name}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _config(thread_id: str, checkpoint_id: str | None = None) -> dict:
    configurable = {"thread_id": thread_id} | ({"checkpoint_id": checkpoint_id} if checkpoint_id else {})
    return {"configurable": configurable, "recursion_limit": 10_000}


def live_client(base_url: str | None = None, model: str | None = None, api_key: str | None = None) -> ChatClient:
    """The endpoint client (flags > KERNELLOOP_* environment); ConfigError says what to set,
    SolveError says when nothing answers at the endpoint (checked once, before the run starts)."""
    from kernelloop.agents.llm import make_chat_client  # lazy: only live runs need the HTTP client
    from kernelloop.doctor import probe_endpoint

    client = make_chat_client(base_url=base_url, model=model, api_key=api_key)
    probe = probe_endpoint(client.config.base_url, client.config.api_key.get_secret_value())
    if not probe.reachable:
        raise SolveError(f"model endpoint {client.config.base_url} is unreachable ({probe.error}): start the server "
                         "or fix --base-url / KERNELLOOP_BASE_URL")
    return client


def _sampling(client: object) -> dict[str, Any]:
    config = getattr(client, "config", None)
    return {"temperature": config.temperature} if hasattr(config, "temperature") else {}


def default_analyzer(device: str) -> Callable[[Problem], ReferenceFacts]:
    """reference_facts with the GPU's peaks when the run will time on one."""
    def analyze(problem: Problem) -> ReferenceFacts:
        import torch

        name = torch.cuda.get_device_name() if device != "cpu" and torch.cuda.is_available() else None
        return reference_facts(problem, name)
    return analyze


@contextmanager
def _session(thread_id: str, workspace: Path, checkpoint_url: str | None) -> Iterator[tuple[CompiledStateGraph, RunDir]]:
    run = RunDir(workspace, thread_id)
    holder = run.lock_holder()
    if holder is not None:
        raise SolveError(f"thread {thread_id} is being run by process {holder}; wait for it or stop it first")
    with open_checkpointer(checkpoint_url, workspace) as saver:
        run.acquire()
        try:
            yield build_graph(saver), run
        finally:
            run.release()


def _drive(graph: CompiledStateGraph, run: RunDir, payload: Any, config: dict, context: Context,
           on_event: OnEvent | None, on_progress: OnProgress | None, on_review: OnReview | None) -> SolveResult:
    """Stream the graph to its end or to an interrupt nobody answers; write outputs however it ends."""
    thread = _config(run.thread_id)
    try:
        while True:
            for mode, chunk in graph.stream(payload, config, context=context, stream_mode=["custom", "values"],
                                            durability="sync"):
                if mode == "custom" and on_event is not None:
                    on_event(RunEvent.model_validate(chunk))
                elif mode == "values" and on_progress is not None and "settings" in chunk:
                    on_progress(summarize(run, chunk))
            snapshot = graph.get_state(thread)
            pending = [item for task in snapshot.tasks for item in task.interrupts]
            if not pending or on_review is None:
                break
            payload = Command(resume=Review.model_validate(on_review(pending[0].value)).model_dump())
            config = thread
            context.session_started_at = time.time()  # the time a person took to answer is not spent
    except BaseException as exc:  # Ctrl-C or an error: keep the best so far, then let it propagate
        values = graph.get_state(thread).values
        if "settings" in values:
            stopped = isinstance(exc, (KeyboardInterrupt, RunCancelled))
            reason = ("cancelled" if isinstance(exc, RunCancelled) else "interrupted") if stopped else \
                f"error: {error_line(exc)}"
            write_outputs(run, values, "interrupted" if stopped else "failed", reason)
        raise
    values = snapshot.values
    if snapshot.next:  # paused at a review with nobody to answer it
        summary = write_outputs(run, values, "waiting", "waiting for review")
    else:
        summary = summarize(run, values)
    return SolveResult(**summary.model_dump(), report=str(run.path("report.md")))


def _close_owned(context: Context, given: VerifierLike | None) -> None:
    """Close the verifier the context built itself (a worker process), never one the caller passed."""
    if given is None and context.verifier is not None and hasattr(context.verifier, "close"):
        context.verifier.close()


def solve(problem: Problem | str | Path, *, budget_s: float = 900.0, candidates: int = 4,
          target_speedup: float | None = 1.2, baseline: str = "eager", max_rounds: int = 8,
          device: str = "auto", backend: str = "triton", interactive: bool = False, hints: Sequence[str] = (),
          critic_model: bool = False, chat_client: ChatClient | KeyedChatClient | None = None,
          base_url: str | None = None, model: str | None = None, api_key: str | None = None,
          recorded: str | Path | None = None, verifier: VerifierLike | None = None,
          analyze: Callable[[Problem], ReferenceFacts | None] | None = None, workspace: str | Path | None = None,
          checkpoint_url: str | None = None, thread_id: str | None = None, on_event: OnEvent | None = None,
          on_progress: OnProgress | None = None, on_review: OnReview | None = None) -> SolveResult:
    """Plan, write candidates in parallel, verify, critique, repeat until a stop condition; see DESIGN.md.

    budget_s: wall-clock budget in s. target_speedup: over `baseline` (None: the first correct kernel).
    recorded: a recording (.jsonl or a run dir) to re-serve instead of calling a model.
    on_review: answers interrupts of an interactive run; without it an interactive run pauses ("waiting").
    """
    problem = problem if isinstance(problem, Problem) else Problem.from_file(problem)
    if chat_client is None and recorded is not None:
        turns = read_recording(Path(recorded))
        chat_client = KeyedReplayChatClient(turns, model_name=model or next(
            (t.turn.model for t in turns if t.turn.model), "recorded"))
    elif chat_client is None:
        chat_client = live_client(base_url, model, api_key)
    settings = RunSettings(backend=backend, device=device, model=chat_client.model_name,
                           sampling=_sampling(chat_client), target_speedup=target_speedup, baseline=baseline,
                           max_rounds=max_rounds, candidates=candidates, budget_s=budget_s,
                           interactive=interactive, critic_model=critic_model)
    record = ProblemRecord(name=problem.name, path=str(problem.path), source=problem.source, sha256=problem.sha256)
    space = workspace_dir(workspace)
    thread_id = thread_id or new_thread_id(problem.name)
    context = Context(chat_client=chat_client, verifier=verifier, workspace=space, device=device,
                      analyze=analyze or default_analyzer(device))
    with _session(thread_id, space, checkpoint_url) as (graph, run):
        if graph.get_state(_config(thread_id)).values:
            raise SolveError(f"thread {thread_id} already exists: `kernelloop runs resume {thread_id}` continues it")
        state = {"problem": record.model_dump(), "settings": settings.model_dump(), "hints": list(hints)}
        try:
            return _drive(graph, run, state, _config(thread_id), context, on_event, on_progress, on_review)
        finally:
            _close_owned(context, verifier)


def replay(thread_id: str, checkpoint_id: str | None = None, *, recorded: bool | str | Path = False,
           reverify: bool = False, chat_client: ChatClient | KeyedChatClient | None = None,
           base_url: str | None = None, model: str | None = None, api_key: str | None = None,
           verifier: VerifierLike | None = None, analyze: Callable[[Problem], ReferenceFacts | None] | None = None,
           workspace: str | Path | None = None, checkpoint_url: str | None = None, on_event: OnEvent | None = None,
           on_progress: OnProgress | None = None, on_review: OnReview | None = None) -> SolveResult:
    """Re-run a thread from a checkpoint (its latest when None: that is a resume).

    recorded: True re-serves the thread's own recorded model turns (by node and attempt, so no
    endpoint is needed and parallel coders get the same replies); a path serves another recording.
    reverify: verify again even code whose verdict is journaled (default: reuse, so no attempt
    is verified twice).
    """
    space = workspace_dir(workspace)
    with _session(thread_id, space, checkpoint_url) as (graph, run):
        latest = graph.get_state(_config(thread_id))
        if not latest.values:
            raise SolveError(f"no thread {thread_id} in {space}: `kernelloop runs list` shows the threads")
        settings = settings_of(latest.values)
        if chat_client is None and recorded is True:
            chat_client = KeyedReplayChatClient(recorded_turns(run, latest.values), model_name=settings.model)
        elif chat_client is None and recorded:
            chat_client = KeyedReplayChatClient(read_recording(Path(recorded)), model_name=settings.model)
        elif chat_client is None:
            chat_client = live_client(base_url, model or settings.model or None, api_key)
        context = Context(chat_client=chat_client, verifier=verifier, workspace=space, device=settings.device,
                          analyze=analyze or default_analyzer(settings.device), reuse_verdicts=not reverify)
        try:
            return _drive(graph, run, None, _config(thread_id, checkpoint_id), context, on_event, on_progress,
                          on_review)
        finally:
            _close_owned(context, verifier)


def resume(thread_id: str, **options) -> SolveResult:
    """Continue a thread from its last checkpoint (after Ctrl-C, a kill, or a pause at a review)."""
    return replay(thread_id, None, **options)


def fork(thread_id: str, checkpoint_id: str, *, hint: str | None = None, changes: dict[str, Any] | None = None,
         workspace: str | Path | None = None, checkpoint_url: str | None = None, **options) -> SolveResult:
    """Branch a thread at a checkpoint with changed state, then run the branch to its end.

    hint: added to the coders' hints. changes: RunSettings fields (target_speedup, model, budget_s,
    max_rounds, candidates, baseline, ...). The branch lives in the same thread (LangGraph's fork);
    the original steps stay in `runs show`. Other options as for `replay`.
    """
    space = workspace_dir(workspace)
    with open_checkpointer(checkpoint_url, space) as saver:
        graph = build_graph(saver)
        snapshot = graph.get_state(_config(thread_id, checkpoint_id))
        if not snapshot.values or snapshot.parent_config is None:
            raise SolveError(f"no checkpoint {checkpoint_id} after the start of thread {thread_id}")
        producers = set(graph.get_state(snapshot.parent_config).next)
        if len(producers) != 1 or not snapshot.next or producers & {"__start__"}:
            raise SolveError(f"checkpoint {checkpoint_id} can't be forked (made by {sorted(producers) or 'nothing'}, "
                             f"next {list(snapshot.next) or 'nothing'}): pick one `runs show` lists with a next step")
        unknown = set(changes or {}) - set(RunSettings.model_fields)
        if unknown:
            raise SolveError(f"can't change {', '.join(sorted(unknown))}: a fork changes {', '.join(RunSettings.model_fields)}")
        settings = RunSettings.model_validate(settings_of(snapshot.values).model_dump() | (changes or {}))
        update: dict[str, Any] = {"settings": settings.model_dump()}
        if hint:
            update["hints"] = list(snapshot.values.get("hints") or []) + [hint]
        if options.get("recorded") is True and options.get("chat_client") is None:
            # the branch's own state holds no turns past the fork: serve the original branch's
            latest = graph.get_state(_config(thread_id)).values
            options["chat_client"] = KeyedReplayChatClient(recorded_turns(RunDir(space, thread_id), latest),
                                                           model_name=settings.model)
        at = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
        branch = graph.update_state(at, update, as_node=producers.pop())
    return replay(thread_id, branch["configurable"]["checkpoint_id"], workspace=space, checkpoint_url=checkpoint_url,
                  **options)
