"""Run the loop from Python: `solve` a problem, `resume`/`replay` a thread, `fork` it with changes.

The CLI, the bench and the MCP server all come through here. Every entry point:
- opens the checkpointer (SQLite in the workspace unless a URL says otherwise),
- takes the thread's lock, drives the graph (interrupts go to `on_review`), and
- on any ending, finalize or not (Ctrl-C, an error), writes best_kernel.py, result.json and
  report.md of the best attempt so far, then returns or re-raises.
`kernelloop.solve`, `.resume`, `.replay` and `.fork` are these functions.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, cast

from langchain_core.runnables import RunnableConfig
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from kernelloop.agents.calls import Asking
from kernelloop.agents.planner import ReferenceFacts, reference_facts
from kernelloop.agents.records import Attempt
from kernelloop.agents.turns import ChatModel, KeyedReplayChatClient, RecordedTurn, ReplayExhausted
from kernelloop.config import defaults
from kernelloop.config.endpoint import shown_endpoint
from kernelloop.config.fields import Backend
from kernelloop.config.settings import ConfigError, Settings, load_settings
from kernelloop.errors import error_line
from kernelloop.graph.build import build_graph
from kernelloop.graph.checkpoint import open_checkpointer
from kernelloop.graph.context import Context, RunEvent, VerifierLike
from kernelloop.graph.report import RunSummary, summarize, write_outputs
from kernelloop.graph.rundir import ModelSource, RunDir, load_recording, read_recording, recorded_turns
from kernelloop.graph.state import InputState, ProblemRecord, Review, RunSettings, State, attempts_of, settings_of
from kernelloop.graph.usage import Prices
from kernelloop.problem import Candidate, Problem
from kernelloop.starts import StartRecord, resolve_start

Graph = CompiledStateGraph[State, Context, InputState, State]  # what build_graph returns
OnEvent = Callable[[RunEvent], None]
OnProgress = Callable[[RunSummary], None]
OnReview = Callable[[dict], Review | dict]  # gets an interrupt's payload, returns the person's answer


FROM_SETTINGS: Literal["from settings"] = "from settings"  # solve()'s target_speedup when not given


class RunCancelled(Exception):
    """Raised from a callback (on_event / on_progress) to stop a run at a safe point, like Ctrl-C."""


class SolveError(ValueError):
    """A request that can't be served (unknown thread, thread exists, checkpoint not forkable). One line."""


class RecordingMismatch(SolveError):
    """A recording that answers another problem than the run's. One line: what differs, what to do."""


class RecordingEnded(SolveError):
    """The recording has no reply for a model call (none recorded, or its prompt changed). The run is saved at
    its last checkpoint and can be resumed: with a live endpoint, or with stop_at_recording_end=True."""

    def __init__(self, thread_id: str, exhausted: ReplayExhausted):
        self.thread_id, self.key, self.why = thread_id, exhausted.key, exhausted.why
        super().__init__(f"{self.why}; thread {thread_id} is saved at its last checkpoint: resume({thread_id!r}, "
                         "base_url=..., model=...) goes on with a live model from there, or "
                         "stop_at_recording_end=True stops where the recording ends")


def recording_turns(path: str | Path, problem: ProblemRecord | Problem) -> list[RecordedTurn]:
    """The turns of a recording, refused (RecordingMismatch) when its header names another problem."""
    recording = load_recording(Path(path))
    header = recording.header
    if header is not None and header.problem_sha256 != problem.sha256:
        raise RecordingMismatch(
            f"{path} answers problem {header.problem or '?'!r} (sha256 {header.problem_sha256[:12]}), not "
            f"{problem.name!r} (sha256 {problem.sha256[:12]}): give a recording of {problem.name!r} (`kernelloop runs "
            f"export THREAD OUT.jsonl` writes one), or a live endpoint instead")
    return recording.turns


class SolveResult(RunSummary):
    """What a run ended with (also written to the run dir as result.json).

    `attempts` is the count (as every JSON answer has it: the CLI's --json, MCP, result.json); the attempts
    themselves, typed and with their code, are `attempt_list` (result.json's key of that name holds the same
    records without the code). attempt_list is left out of model_dump / JSON.
    """

    report: str | None = None
    attempt_list: list[Attempt] = Field(default_factory=list, exclude=True,
                                        description="every verified attempt, in order (Python only)")

    @classmethod
    def of(cls, summary: RunSummary, values: dict) -> SolveResult:
        return cls(**summary.model_dump(), report=str(Path(summary.outputs_dir) / "report.md"),
                   attempt_list=attempts_of(values))


def new_thread_id(problem_name: str) -> str:
    return f"{problem_name}-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable = {"thread_id": thread_id} | ({"checkpoint_id": checkpoint_id} if checkpoint_id else {})
    return {"configurable": configurable, "recursion_limit": 10_000}


def live_client(base_url: str | None = None, model: str | None = None, api_key: str | None = None,
                stream: bool = False) -> ChatModel:
    """The endpoint's chat model (flags > KERNELLOOP_* environment); ConfigError says what to set,
    SolveError says when nothing answers at the endpoint (checked once, before the run starts)."""
    from kernelloop.agents.llm import make_chat_model  # lazy: only live runs need the HTTP client
    from kernelloop.doctor import probe_endpoint

    chat = make_chat_model(base_url=base_url, model=model, api_key=api_key, stream=stream)
    key = chat.openai_api_key.get_secret_value() if isinstance(chat.openai_api_key, SecretStr) else "not-needed"
    base = cast(str, chat.openai_api_base)  # make_chat_model passes EndpointConfig.base_url, always a str
    probe = probe_endpoint(base, key)
    if not probe.reachable:
        # shown_endpoint: this line reaches a server's callers too (a job's error), never a key in the URL
        raise SolveError(f"model endpoint {shown_endpoint(base) or '(not an http URL)'} is unreachable "
                         f"({probe.error}): start the server or fix --base-url / KERNELLOOP_BASE_URL")
    return chat


def _sampling(chat: object) -> dict[str, Any]:
    temperature = getattr(chat, "temperature", None)
    return {"temperature": temperature} if isinstance(temperature, (int, float)) else {}


def _model_name(chat: object) -> str:
    """What the model calls itself: a LangChain model's name, a keyed client's model_name."""
    from kernelloop.agents.llm import endpoint_of

    return endpoint_of(chat).get("model") or getattr(chat, "model_name", None) or type(chat).__name__


def _thread_turns(run: RunDir, latest: dict) -> list[RecordedTurn]:
    """The turns the latest state points at first, then every other turn of the thread's run dir
    (earlier branches): a replay serves whichever answered exactly the prompt it sends."""
    return recorded_turns(run, latest) + (read_recording(run.root) if (run.root / "turns").is_dir() else [])


def _replaying(turns: list[RecordedTurn], settings: RunSettings, strict: bool, base_url: str | None,
               model: str | None, api_key: str | None, stream: bool, own: bool = True) -> ChatModel:
    """Recorded turns re-served where their prompt is unchanged; the rest go to the run's endpoint
    (flags > the endpoint the run remembers > KERNELLOOP_*), or, strict, are refused. own: the turns are
    the thread's own (a resume), not a recording someone made."""
    if strict:
        return KeyedReplayChatClient(turns, model_name=settings.model)
    live = live_client(base_url or settings.base_url, model or settings.model or None, api_key, stream)
    if not turns:
        return live
    return KeyedReplayChatClient(turns, model_name=settings.model, fallback=Asking(live), own_thread=own)


def default_analyzer(device: str) -> Callable[[Problem], ReferenceFacts]:
    """reference_facts with the GPU's peaks when the run will time on one."""
    def analyze(problem: Problem) -> ReferenceFacts:
        import torch

        name = torch.cuda.get_device_name() if device != "cpu" and torch.cuda.is_available() else None
        return reference_facts(problem, name)
    return analyze


@contextmanager
def _session(thread_id: str, workspace: Path, checkpoint_url: str | None) -> Iterator[tuple[Graph, RunDir]]:
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


def _drive(graph: Graph, run: RunDir, payload: Any, config: RunnableConfig, context: Context,
           on_event: OnEvent | None, on_progress: OnProgress | None, on_review: OnReview | None,
           stop_at_recording_end: bool = False) -> SolveResult:
    """Stream the graph to its end or to an interrupt nobody answers; write outputs however it ends.
    A recording that runs out stops the run at its last checkpoint (resumable): RecordingEnded, or with
    stop_at_recording_end a result whose stop_reason says where the recording ended."""
    thread = _config(run.thread_id)
    try:
        return _stream(graph, run, payload, config, context, on_event, on_progress, on_review)
    except ReplayExhausted as exc:
        values = graph.get_state(thread).values
        reason = f"recording_end: {exc.why}"
        summary = write_outputs(run, values, "stopped", reason) if "settings" in values else summarize(run, values)
        if stop_at_recording_end:
            return SolveResult.of(summary, values)
        raise RecordingEnded(run.thread_id, exc) from None


def _stream(graph: Graph, run: RunDir, payload: Any, config: RunnableConfig, context: Context,
            on_event: OnEvent | None, on_progress: OnProgress | None, on_review: OnReview | None) -> SolveResult:
    thread = _config(run.thread_id)
    try:
        while True:
            for mode, chunk in graph.stream(payload, config, context=context, stream_mode=["custom", "values"],
                                            durability="sync"):
                if mode == "custom" and on_event is not None:
                    on_event(RunEvent.model_validate(chunk))
                elif mode == "values" and on_progress is not None and isinstance(chunk, dict) and "settings" in chunk:
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
        if "settings" in values and not isinstance(exc, ReplayExhausted):
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
    return SolveResult.of(summary, values)


@contextmanager
def _judge(given: VerifierLike | None, device: str, workspace: Path,
           settings: Settings | None = None) -> Iterator[VerifierLike]:
    """The caller's verifier, or a pool on `device` ('cuda:N' names one GPU) that this run opens and closes."""
    if given is not None:
        yield given
        return
    from kernelloop.tools.verify.pool import make_pool  # lazy: a run with its own verifier needs no pool

    limits = (settings or load_settings()).limits
    with make_pool(device, workspace=workspace, **limits.model_dump()) as pool:
        yield pool


def solve(problem: Problem | str | Path, *, settings: Settings | None = None,
          budget_s: float | None = None, candidates: int | None = None,
          target_speedup: float | Literal["from settings"] | None = FROM_SETTINGS, max_rounds: int | None = None,
          device: str | None = None, backend: Backend | None = None, workspace: str | Path | None = None,
          checkpoint_url: str | None = None, base_url: str | None = None, model: str | None = None,
          api_key: str | None = None, baseline: str = defaults.BASELINE, interactive: bool = False,
          hints: Sequence[str] = (), start: StartRecord | Candidate | str | Path | None = defaults.START,
          critic_model: bool = False, chat_client: ChatModel = None, stream_reasoning: bool = False,
          prices: Prices | str | None = None, recorded: str | Path | None = None, stop_at_recording_end: bool = False,
          verifier: VerifierLike | None = None, analyze: Callable[[Problem], ReferenceFacts | None] | None = None,
          thread_id: str | None = None, on_event: OnEvent | None = None, on_progress: OnProgress | None = None,
          on_review: OnReview | None = None) -> SolveResult:
    """Plan, write candidates in parallel, verify, critique, repeat until a stop condition
    (docs/architecture.md). A value past a cap is a one-line ConfigError naming the argument.

    settings: the entry point's Settings (kernelloop.config.settings.load_settings); None: made here, the same
    way, from the arguments given over KERNELLOOP_* > .env > kernelloop.toml > kernelloop.config.defaults
    (arguments left at None come from there; target_speedup=None stops at the first correct kernel).
    Give settings or those arguments, not both. The rest are RunOptions (see there): how the run starts
    (baseline, interactive, hints, start, critic_model), what answers its model calls (chat_client, or a
    recording: `recorded`, with stop_at_recording_end), what judges (verifier, analyze) and what it reports to
    (thread_id, on_event, on_progress, on_review).
    """
    flags = {"budget": budget_s, "candidates": candidates, "max_rounds": max_rounds, "device": device,
             "backend": backend, "home": workspace, "checkpoints": checkpoint_url, "base_url": base_url,
             "model": model, "api_key": api_key,
             "target": None if target_speedup == FROM_SETTINGS else ("none" if target_speedup is None else target_speedup)}
    if settings is None:
        settings = load_settings(python_api=True, **flags)
    elif any(value is not None for value in flags.values()):
        raise ConfigError(f"give settings= or {', '.join(n for n, v in flags.items() if v is not None)}, not both")
    options = RunOptions(baseline=baseline, interactive=interactive, hints=hints, start=start, critic_model=critic_model,
                         chat_client=chat_client, stream_reasoning=stream_reasoning, prices=prices, recorded=recorded,
                         stop_at_recording_end=stop_at_recording_end, verifier=verifier, analyze=analyze,
                         thread_id=thread_id, on_event=on_event, on_progress=on_progress, on_review=on_review)
    return run_solve(problem, settings, options)


class RunOptions(BaseModel):
    """What one run is given besides its Settings: how it starts, who answers, what it reports to.

    start: the kernel to begin from, verified as attempt 0 before any coder writes (a file path, a
    Candidate for a kernel's text, or 'auto': the problem family's hand-written starter, with a
    warning and a start from scratch where there is none). Kept in the thread for resume.
    chat_client: any LangChain chat model (or a keyed client); None: ChatOpenAI on the settings'
    endpoint, streaming when stream_reasoning. prices: USD per million prompt and completion tokens
    ('0.55,2.19' or a Prices). recorded: a recording (.jsonl or a run dir) to re-serve instead of a model
    (refused when it names another problem); stop_at_recording_end: a call it can't answer ends the run there,
    resumable, instead of raising RecordingEnded.
    on_review: answers interrupts of an interactive run; without it an interactive run pauses ("waiting").
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    baseline: str = defaults.BASELINE
    interactive: bool = False
    hints: Sequence[str] = ()
    start: StartRecord | Candidate | str | Path | None = defaults.START
    critic_model: bool = False
    chat_client: Any = None
    stream_reasoning: bool = False
    prices: Prices | str | None = None
    recorded: str | Path | None = None
    stop_at_recording_end: bool = False
    verifier: Any = None  # a VerifierLike; None: a pool on the settings' device, opened and closed here
    analyze: Callable[[Problem], ReferenceFacts | None] | None = None
    thread_id: str | None = None
    on_event: OnEvent | None = None
    on_progress: OnProgress | None = None
    on_review: OnReview | None = None


def run_solve(problem: Problem | str | Path, settings: Settings, options: RunOptions) -> SolveResult:
    """solve() once its Settings are made: every entry point's run comes through here with one Settings."""
    problem = as_problem(problem)
    start, chat_client = options.start, options.chat_client
    start_record = resolve_start(start, problem.name)  # an unreadable start file fails here, before any model call
    if start_record is not None and not start_record.has_kernel and not isinstance(start, StartRecord):
        warnings.warn(start_record.line, stacklevel=3)  # 'auto' with no starter: said once, then from scratch
    source = ModelSource(kind="client")
    if chat_client is None and options.recorded is not None:
        turns = recording_turns(options.recorded, problem)
        chat_client = KeyedReplayChatClient(turns, model_name=settings.model or next(
            (t.turn.model for t in turns if t.turn.model), "recorded"))
        source = ModelSource(kind="recording", recording=str(Path(options.recorded).resolve()))
    elif chat_client is None:
        source = ModelSource(kind="endpoint")
        chat_client = live_client(settings.base_url, settings.model, settings.api_key.get_secret_value(),
                                  options.stream_reasoning)
    from kernelloop.agents.llm import endpoint_of

    prices = Prices.parse(options.prices) if isinstance(options.prices, str) else options.prices
    device = settings.device
    run_settings = RunSettings(backend=settings.backend, device=device, model=_model_name(chat_client),
                               base_url=endpoint_of(chat_client).get("base_url"),
                               prices=prices.model_dump() if prices else None,
                               sampling=_sampling(chat_client), target_speedup=settings.target,
                               baseline=options.baseline, max_rounds=settings.max_rounds,
                               candidates=settings.candidates, budget_s=settings.budget,
                               interactive=options.interactive, critic_model=options.critic_model)
    record = ProblemRecord(name=problem.name, path=str(problem.path), source=problem.source, sha256=problem.sha256,
                           trusted=problem.trusted)
    space = settings.workspace.root
    thread_id = options.thread_id or new_thread_id(problem.name)
    with _judge(options.verifier, device, space, settings) as judge, \
            _session(thread_id, space, settings.checkpoints) as (graph, run):
        if graph.get_state(_config(thread_id)).values:
            raise SolveError(f"thread {thread_id} already exists: `kernelloop runs resume {thread_id}` continues it")
        run.save_model_source(source)
        context = Context(chat_client=chat_client, verifier=judge, workspace=space, device=device,
                          analyze=options.analyze or default_analyzer(device))
        state = {"problem": record.model_dump(), "settings": run_settings.model_dump(), "hints": list(options.hints)}
        if start_record is not None:
            state["start"] = start_record.model_dump()
        return _drive(graph, run, state, _config(thread_id), context, options.on_event, options.on_progress,
                      options.on_review, options.stop_at_recording_end)


def as_problem(problem: Problem | str | Path) -> Problem:
    """A Problem as given, or one from a file path, or from source text (a str with a newline: never a path)."""
    if isinstance(problem, Problem):
        return problem
    if isinstance(problem, str) and "\n" in problem:
        return Problem.from_source(problem)
    return Problem.from_file(problem)


def replay(thread_id: str, checkpoint_id: str | None = None, *, recorded: bool | str | Path = False,
           reverify: bool = False, chat_client: ChatModel = None,
           base_url: str | None = None, model: str | None = None, api_key: str | None = None,
           stream_reasoning: bool = False, stop_at_recording_end: bool = False,
           verifier: VerifierLike | None = None, analyze: Callable[[Problem], ReferenceFacts | None] | None = None,
           workspace: str | Path | None = None, checkpoint_url: str | None = None, on_event: OnEvent | None = None,
           on_progress: OnProgress | None = None, on_review: OnReview | None = None) -> SolveResult:
    """Re-run a thread from a checkpoint (its latest when None: that is a resume).

    The model source is the one the run was started with (kept in its run dir) unless told otherwise:
    - a run started from a recording goes on with that recording (and the thread's own turns);
    - recorded=PATH serves another recording (refused when it answers another problem);
    - base_url / model: a live endpoint; with a recording, recorded turns first, then the live model;
    - recorded=True: the thread's own turns (and its recording), no endpoint.
    A turn is re-served only to the prompt it answered (by node and attempt, so parallel coders get the same
    replies). With no endpoint, a call the recording can't answer raises RecordingEnded and leaves the thread
    resumable at its last checkpoint; stop_at_recording_end=True returns there instead.
    reverify: verify again even code whose verdict is journaled (default: reuse, so no attempt is verified twice).
    """
    chosen = load_settings(home=workspace, checkpoints=checkpoint_url)  # the entry point's Settings
    space = chosen.workspace.root
    with _session(thread_id, space, chosen.checkpoints) as (graph, run):
        latest = graph.get_state(_config(thread_id))
        if not latest.values:
            raise SolveError(f"no thread {thread_id} in {space}: `kernelloop runs list` shows the threads")
        settings = settings_of(latest.values)
        if chat_client is None:
            chat_client = _model_for(run, latest.values, recorded, base_url, model, api_key, stream_reasoning,
                                     settings)
        with _judge(verifier, settings.device, space, chosen) as judge:
            context = Context(chat_client=chat_client, verifier=judge, workspace=space, device=settings.device,
                              analyze=analyze or default_analyzer(settings.device), reuse_verdicts=not reverify)
            return _drive(graph, run, None, _config(thread_id, checkpoint_id), context, on_event, on_progress,
                          on_review, stop_at_recording_end)


def _model_for(run: RunDir, values: dict, recorded: bool | str | Path, base_url: str | None, model: str | None,
               api_key: str | None, stream: bool, settings: RunSettings) -> ChatModel:
    """What answers a resumed, replayed or forked run's model calls (see replay)."""
    from kernelloop.graph.state import problem_of

    source = run.model_source()
    live = base_url is not None or model is not None  # told to use an endpoint
    own = _thread_turns(run, values)
    if isinstance(recorded, (str, Path)):
        turns = recording_turns(recorded, problem_of(values))
        run.save_model_source(ModelSource(kind="recording", recording=str(Path(recorded).resolve())))
        return _replaying(turns, settings, not live, base_url, model, api_key, stream, own=False)
    if source is not None and source.kind == "recording" and source.recording:
        turns = own + recording_turns(source.recording, problem_of(values))
        return _replaying(turns, settings, not live, base_url, model, api_key, stream, own=False)
    return _replaying(own, settings, bool(recorded), base_url, model, api_key, stream)


def resume(thread_id: str, *, recorded: bool | str | Path = False, chat_client: ChatModel = None,
           base_url: str | None = None, model: str | None = None, api_key: str | None = None,
           stream_reasoning: bool = False, stop_at_recording_end: bool = False, reverify: bool = False,
           verifier: VerifierLike | None = None, analyze: Callable[[Problem], ReferenceFacts | None] | None = None,
           workspace: str | Path | None = None, checkpoint_url: str | None = None, on_event: OnEvent | None = None,
           on_progress: OnProgress | None = None, on_review: OnReview | None = None) -> SolveResult:
    """Continue a thread from its last checkpoint (after Ctrl-C, SIGTERM, a kill, or a pause at a review), with
    the model source it was started with unless told otherwise (see replay)."""
    return replay(thread_id, None, recorded=recorded, reverify=reverify, chat_client=chat_client, base_url=base_url,
                  model=model, api_key=api_key, stream_reasoning=stream_reasoning,
                  stop_at_recording_end=stop_at_recording_end, verifier=verifier, analyze=analyze, workspace=workspace,
                  checkpoint_url=checkpoint_url, on_event=on_event, on_progress=on_progress, on_review=on_review)


def fork(thread_id: str, checkpoint_id: str, *, hint: str | None = None, changes: dict[str, Any] | None = None,
         workspace: str | Path | None = None, checkpoint_url: str | None = None, **options) -> SolveResult:
    """Branch a thread at a checkpoint with changed state, then run the branch to its end.

    hint: added to the coders' hints. changes: RunSettings fields (target_speedup, model, budget_s,
    max_rounds, candidates, baseline, ...). The branch lives in the same thread (LangGraph's fork);
    the original steps stay in `runs show`. Other options as for `replay`.
    """
    chosen = load_settings(home=workspace, checkpoints=checkpoint_url)
    space, checkpoint_url = chosen.workspace.root, chosen.checkpoints
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
        run = RunDir(space, thread_id)
        update["branch"] = run.new_branch_name()  # the branch's files go under branches/<name>
        if options.get("chat_client") is None:
            # the branch's own state holds no turns past the fork: serve the original branch's
            latest = graph.get_state(_config(thread_id)).values
            options["chat_client"] = _model_for(
                run, latest, options.pop("recorded", False) or False, options.get("base_url"), options.get("model"),
                options.get("api_key"), bool(options.get("stream_reasoning")), settings)
        at: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
        branch = graph.update_state(at, update, as_node=producers.pop())
    return replay(thread_id, branch["configurable"]["checkpoint_id"], workspace=space, checkpoint_url=checkpoint_url,
                  **options)
