"""Background jobs for callers that must get an answer at once (the MCP server): optimize, verify, profile.

A call starts a job and gets its id back; later calls poll it. Each job runs in its own daemon
thread. Verifications go through the verifier pools kept here (one per device and strictness),
so any number of jobs never starts more sandbox workers than there are GPUs.

Cancel is cooperative. A solve job stops at the loop's next safe point: solve() calls
on_event / on_progress whenever a node reports, and those callbacks raise JobCancelled once a
cancel was asked; solve then writes the best kernel so far (best_kernel.py, result.json) and
re-raises. Work already under way (a model call, a verification) finishes first. A verify or
profile job that has begun runs to its end and is then marked cancelled.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from kernelloop import progress
from kernelloop.agents.turns import ChatClient, KeyedChatClient
from kernelloop.config.endpoint import EndpointConfig, shown_endpoint
from kernelloop.config.settings import Settings, load_settings, override
from kernelloop.errors import error_line
from kernelloop.graph.context import RunEvent
from kernelloop.graph.report import RunSummary
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.records import Code, Profile, Status, Verdict
from kernelloop.safe_text import one_line
from kernelloop.serve.requests import RequestError, SolveRequest, VerdictBrief, VerifyRequest, caller_endpoint, confined
from kernelloop.serve.runs import RunCancelled
from kernelloop.starts import StartRecord
from kernelloop.tools.verify.pool import VerifierPool, local_devices, make_pool

JobKind = Literal["solve", "verify", "profile"]
JobState = Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]
FINISHED: tuple[JobState, ...] = ("succeeded", "failed", "cancelled")


class JobCancelled(RunCancelled):
    """Raised inside a job's thread at a safe point after cancel() was asked."""


class JobError(RequestError):
    """A job request that can't be served (an unknown job id). One line."""


def no_such_job(job_id: str) -> JobError:
    """The one line for a job id a caller can't have: unknown, or another caller's (the same words, so
    whether an id exists never shows)."""
    return JobError(f"no job {job_id!r}: list_jobs shows the jobs you started on this server")


# --------------------------------------------------------------------------- status


class JobStatus(BaseModel):
    """A job as a poll sees it. Times are seconds since the epoch."""

    job_id: str
    kind: JobKind
    state: JobState
    problem: str = Field(description="the problem's name")
    message: str = Field(default="", description="one line: what the job is doing or how it ended")
    created_at: float
    finished_at: float | None = None
    error: str | None = Field(default=None, description="why it failed, one line")
    thread_id: str | None = Field(default=None, description="solve: the run's thread (kernelloop runs show THREAD)")
    summary: RunSummary | None = Field(default=None, description="solve: the run so far, or how it ended")
    last_event: RunEvent | None = None
    events: int = Field(default=0, description="steps so far: a solve's run events, a verification's phases")
    best_kernel: str | None = Field(default=None, description="solve: the source of the best attempt so far")
    verdict: VerdictBrief | Verdict | None = Field(default=None, description="verify and profile: the verifier's "
                                                   "verdict (brief unless asked with detail)")
    problem_error: str | None = Field(default=None, description="verify and profile: the problem itself failed (its "
                                      "reference could not be made), not the candidate; the verdict says so too")
    profile: Profile | None = Field(default=None, description="profile: the verdict's profiler summary")

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def for_agent(self, detail: bool = False) -> JobStatus:
        """As a tool answers: brief (the verdict's status, code, speedup, reason, feedback; no profile) unless
        `detail` asks for the whole verdict with its timings and costs; either way the run's endpoint as
        shown_endpoint shows it (a caller never sees a credential in the operator's URL)."""
        shown = self
        if self.summary is not None and self.summary.base_url:
            summary = self.summary.model_copy(update={"base_url": shown_endpoint(self.summary.base_url)})
            shown = self.model_copy(update={"summary": summary})
        if detail or not isinstance(shown.verdict, Verdict):
            return shown
        return shown.model_copy(update={"verdict": VerdictBrief.of(shown.verdict), "profile": None})


@dataclass
class _Job:
    status: JobStatus
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, **changes: Any) -> None:
        with self.lock:
            self.status = self.status.model_copy(update=changes)

    def snapshot(self) -> JobStatus:
        with self.lock:
            return self.status.model_copy()

    def begin(self) -> None:
        """queued -> running, unless a cancel came first (then the job ends before any work)."""
        with self.lock:
            if self.status.state == "queued":
                self.status = self.status.model_copy(update={"state": "running", "message": "started"})
        self.safe_point()

    def safe_point(self) -> None:
        if self.cancel.is_set():
            raise JobCancelled(f"job {self.status.job_id} cancelled on request")


def _best_kernel(summary: RunSummary) -> str | None:
    """The best attempt's source when it is correct (best_kernel.py once written, else its file under the run's
    kernels/); None while nothing is: a failed attempt is no kernel to hand on."""
    if summary.status != "correct":
        return None
    candidates = [Path(summary.best_kernel)] if summary.best_kernel else []
    if summary.best_id and summary.run_dir:
        candidates.append(Path(summary.run_dir) / "kernels" / f"{summary.best_id}.py")
    return next((p.read_text() for p in candidates if p.is_file()), None)


def _final_summary(summary: RunSummary | None) -> RunSummary | None:
    """After a run stops early, result.json holds how it ended (solve writes it on any ending)."""
    if summary is None or not summary.run_dir:
        return summary
    result = Path(summary.run_dir) / "result.json"
    return RunSummary.model_validate_json(result.read_text()) if result.is_file() else summary


def _describe(event: RunEvent) -> str:
    parts = [f"round {event.round}" if event.round else "", event.kind, event.attempt_id or "",
             f"({event.status})" if event.status else ""]
    return " ".join(p for p in parts if p)


def problem_failed_verdict(exc: ProblemError, device: str) -> Verdict:
    """A verdict for a candidate that could not be judged because its problem failed (the
    reference could not be made): shaped like any other, and saying whose failure it is."""
    line = (str(exc).splitlines() or [type(exc).__name__])[0]  # a ProblemError's message is one line
    return Verdict(status=Status.runtime_error, reason=f"problem error: {line}"[:500], code=Code.problem_error, device=device,
                   feedback=f"The problem's reference failed before the candidate was judged, so this is not the "
                            f"candidate's fault and changing it will not help: {line}")


# --------------------------------------------------------------------------- the manager


class JobManager:
    """Starts, tracks and cancels jobs; owns the verifier pools they share. close() when done."""

    def __init__(self, workspace: str | Path | None = None, ray: str | None = None,
                 pool_factory: Callable[..., VerifierPool] = make_pool, settings: Settings | None = None):
        """settings: the server's (made once by its entry point); None: made here from `workspace`, the same way."""
        self.settings = settings if settings is not None else load_settings(home=workspace)
        self.workspace = self.settings.workspace.root
        self.ray = ray
        self._pool_factory = pool_factory
        self._pools: dict[tuple, VerifierPool] = {}
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()

    # -- pools ---------------------------------------------------------------------------------
    def pool(self, device: str | None = None, strict: bool = False) -> VerifierPool:
        """The shared pool for a device (None: the settings'; 'auto' and 'cuda' name the same local GPUs)."""
        device = device or self.settings.device
        key = (device if self.ray else tuple(local_devices(device)), strict)
        with self._lock:
            if key not in self._pools:
                self._pools[key] = self._pool_factory(device, self.ray, workspace=self.workspace, strict=strict,
                                                      **self.settings.limits.model_dump())
            return self._pools[key]

    # -- starting ------------------------------------------------------------------------------
    def start_solve(self, request: SolveRequest,
                    chat_client: ChatClient | KeyedChatClient | None = None) -> JobStatus:
        """Start an optimization run; returns at once. chat_client: instead of the endpoint settings."""
        from kernelloop.serve.runs import new_thread_id  # lazy: solve imports the whole agent loop

        request = confined(request, self.settings)  # its files in the operator's dirs, links followed
        chosen = override(self.settings, **request.flags())  # the call's knobs over the server's settings
        chosen = caller_endpoint(self.settings, chosen, request.base_url)  # the server's key to its endpoint only
        problem = request.load_problem(self.workspace)
        start = request.load_start(problem)  # an unreadable start kernel is the caller's error now, too
        if chat_client is None and not (chosen.base_url and chosen.model):
            # a missing endpoint is the caller's error now, not a failed job later
            EndpointConfig.resolve(chosen.base_url, chosen.model)
        pool = self.pool(chosen.device)
        job = self._new_job("solve", problem, thread_id=new_thread_id(problem.name))
        self._start(job, lambda: self._run_solve(job, request, chosen, problem, pool, chat_client, start))
        return job.snapshot()

    def start_verify(self, request: VerifyRequest, profile: bool = False) -> JobStatus:
        """Verify (with timing and the profiler's summary on a GPU) in the background; returns at once."""
        request = confined(request, self.settings)
        problem, candidate = request.load_problem(self.workspace), request.load_candidate()
        pool = self.pool(override(self.settings, device=request.device).device, request.strict)
        job = self._new_job("profile" if profile else "verify", problem)
        self._start(job, lambda: self._run_verify(job, candidate, problem, pool))
        return job.snapshot()

    def _new_job(self, kind: JobKind, problem: Problem, thread_id: str | None = None) -> _Job:
        job_id = f"{kind}-{uuid.uuid4().hex}"  # unguessable: an anonymous caller's job is owned by its id
        job = _Job(JobStatus(job_id=job_id, kind=kind, state="queued", problem=problem.name,
                             created_at=time.time(), thread_id=thread_id))
        with self._lock:
            self._jobs[job_id] = job
        return job

    def _start(self, job: _Job, work: Callable[[], str]) -> None:
        def run() -> None:
            try:
                job.begin()
                message = work()
                state: JobState = "cancelled" if job.cancel.is_set() else "succeeded"
                job.update(state=state, message=message)
            except JobCancelled as exc:
                job.update(state="cancelled", message=str(exc))
            except Exception as exc:  # the job fails alone; its status carries the reason
                reason = one_line(error_line(exc), 4000)
                job.update(state="failed", error=reason, message=reason)
            finally:
                if job.status.kind == "solve":
                    summary = _final_summary(job.status.summary)
                    job.update(summary=summary, best_kernel=_best_kernel(summary) if summary else None)
                job.update(finished_at=time.time())
                job.done.set()

        threading.Thread(target=run, name=job.status.job_id, daemon=True).start()

    # -- the work ------------------------------------------------------------------------------
    def _run_solve(self, job: _Job, request: SolveRequest, chosen: Settings, problem: Problem, pool: VerifierPool,
                   chat_client: ChatClient | KeyedChatClient | None, start: StartRecord | None = None) -> str:
        from kernelloop.serve.runs import RunOptions, run_solve  # lazy: see start_solve

        def on_event(event: RunEvent) -> None:
            job.update(last_event=event, events=job.status.events + 1, message=_describe(event))
            job.safe_point()

        def on_progress(summary: RunSummary) -> None:
            job.update(summary=summary, best_kernel=_best_kernel(summary))
            job.safe_point()

        result = run_solve(problem, chosen, RunOptions(
            hints=request.hints, start=start, chat_client=chat_client, verifier=pool, thread_id=job.status.thread_id,
            on_event=on_event, on_progress=on_progress))
        job.update(summary=RunSummary.model_validate(result.model_dump()))
        speed = f", {result.best_speedup:.3g}x" if result.best_speedup is not None else ""
        return f"{result.stop_reason or result.run_status}: best {result.best_id or 'none'} ({result.status}{speed})"

    def _run_verify(self, job: _Job, candidate: Candidate, problem: Problem, pool: VerifierPool) -> str:
        job.update(message=f"verifying on {pool.device}")

        def on_phase(kind: str, phase: str) -> None:  # the verifier's phases (as `kernelloop verify` shows them)
            words = progress.describe(kind, phase)
            if words is not None and words != job.status.message:
                job.update(message=words, events=job.status.events + 1)

        try:
            with progress.listening(on_phase):  # this thread's verification only (a local pool verifies here)
                verdict = pool.verify(candidate, problem)
        except ProblemError as exc:  # the reference's failure: an answer for the caller, not a failed job
            verdict = problem_failed_verdict(exc, pool.device)
            job.update(problem_error=verdict.reason.removeprefix("problem error: "))
        job.update(verdict=verdict, profile=verdict.profile)
        return f"{verdict.status.value}: {verdict.reason}"

    # -- polling and cancel --------------------------------------------------------------------
    def _job(self, job_id: str) -> _Job:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise no_such_job(job_id)
        return job

    def knows(self, job_id: str) -> bool:
        """Whether job_id is one of this manager's jobs (of any caller)."""
        with self._lock:
            return job_id in self._jobs

    def status(self, job_id: str) -> JobStatus:
        return self._job(job_id).snapshot()

    def wait(self, job_id: str, timeout_s: float) -> JobStatus:
        """The status once the job has finished, or after timeout_s seconds, whichever is first."""
        job = self._job(job_id)
        job.done.wait(max(0.0, timeout_s))
        return job.snapshot()

    def cancel(self, job_id: str) -> JobStatus:
        """Ask the job to stop at its next safe point; returns at once (state 'cancelling' until it has)."""
        job = self._job(job_id)
        job.cancel.set()
        with job.lock:
            if job.status.state in ("queued", "running"):
                job.status = job.status.model_copy(update={"state": "cancelling",
                                                           "message": "cancelling at the next safe point"})
            return job.status.model_copy()

    def jobs(self) -> list[JobStatus]:
        with self._lock:
            jobs = list(self._jobs.values())
        return [job.snapshot() for job in jobs]

    def close(self, timeout_s: float = 30.0) -> None:
        """Cancel what still runs, wait up to timeout_s for it to stop, then stop the verifier workers."""
        with self._lock:
            jobs, pools = list(self._jobs.values()), list(self._pools.values())
            self._pools.clear()
        for job in jobs:
            job.cancel.set()
        deadline = time.monotonic() + timeout_s
        for job in jobs:
            job.done.wait(max(0.0, deadline - time.monotonic()))
        for pool in pools:
            pool.close()

    def __enter__(self) -> JobManager:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
