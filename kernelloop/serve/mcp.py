"""kernelloop as an MCP server: tools for coding agents to verify, profile and optimize kernels.

Every tool answers within a few seconds. Verification and profiling run as background jobs
and the tool waits up to `wait_s` (at most MAX_WAIT_S) for the verdict; an optimization run
returns its job id at once. `job_status` polls (optionally waiting a little), `cancel_job`
stops a run at its next safe point. Results are JSON objects with typed fields (JobStatus,
ProfileResult, JobList); bad input is a tool error with one line saying what to fix. A caller sees
and cancels only the jobs it started (serve/callers.py says who a caller is).

`kernelloop mcp` serves this over stdio (the default) or streamable HTTP on a local port.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from kernelloop import __version__
from kernelloop.config import defaults
from kernelloop.config.fields import (
    FROM_SETTINGS,
    Backend,
    BudgetS,
    Candidates,
    Hints,
    MaxRounds,
    StartChoice,
    StartSource,
    TargetChoice,
)
from kernelloop.config.settings import Settings, load_settings, override
from kernelloop.config.units import Device
from kernelloop.serve import job_threads
from kernelloop.serve.callers import Caller, Owners, caller_of, one_run
from kernelloop.serve.jobs import JobManager, JobStatus, no_such_job
from kernelloop.serve.requests import (
    SolveRequest,
    VerifyRequest,
    bad_input_as,
    require_alternatives,
    tool_error,
    tool_error_line,
    unknown_argument,
)

if TYPE_CHECKING:
    from kernelloop.tools.verify.pool import VerifierPool

MAX_WAIT_S = 10.0  # no tool call holds its caller longer than this waiting for a job
NAME = "kernelloop"
INSTRUCTIONS = (
    "Verify, profile and optimize GPU kernels against a PyTorch reference (KernelBench format: the problem "
    "file has class Model, get_inputs, get_init_inputs; a candidate has class ModelNew). verify_kernel and "
    "profile_kernel answer with the verdict when it is ready within wait_s, else with a job to poll with "
    "job_status. start_optimization returns a job id at once; poll job_status for progress and the best kernel, "
    "cancel_job to stop it.")


class ProfileResult(BaseModel):
    """What profile_kernel answers: the job (poll it for `profile`), or why there is nothing to profile."""

    available: bool = Field(description="False when the server has no GPU to profile on")
    message: str
    job: JobStatus | None = None


class JobList(BaseModel):
    jobs: list[JobStatus]


ProblemPath = Annotated[str | None, Field(description="path of the problem file (on the server's machine)")]
ProblemSource = Annotated[str | None, Field(description="the problem file's text, instead of problem_path")]
ProblemName = Annotated[str, Field(description="a name for a problem given as text")]
CandidatePath = Annotated[str | None, Field(description="path of the candidate file (class ModelNew)")]
CandidateSource = Annotated[str | None, Field(description="the candidate's text, instead of candidate_path")]
DeviceArg = Annotated[str | None, Field(description="auto, cpu, cuda or cuda:N; default: the server's --device")]
Detail = Annotated[bool, Field(description="the whole verdict (timings, errors, costs, containment, profile); "
                                           "default: brief (status, code, speedup, reason, feedback)")]
WaitS = Annotated[float, Field(ge=0, description=f"seconds to wait for the job to finish (at most {MAX_WAIT_S:g})")]


def _status(manager: JobManager, owners: Owners, job_id: str, caller: Caller) -> JobStatus:
    """The caller's job of this server, or a solve job of an earlier server read back from its checkpointed
    thread (by its id: callers.py); another caller's job is as unknown as an id that never was."""
    if manager.knows(job_id):
        if not owners.allows(job_id, caller):
            raise no_such_job(job_id)
        return manager.status(job_id)
    return job_threads.recall(manager.workspace, job_id)


async def _watch(status: Callable[[], JobStatus], wait_s: float, ctx: Context) -> JobStatus:
    """Poll until the job ends or wait_s passes, sending each new step as an MCP progress notification."""
    deadline, seen = anyio.current_time() + wait_s, -1
    now = status()
    while not now.finished and anyio.current_time() < deadline:
        if now.events != seen:
            seen = now.events
            await ctx.report_progress(now.events, None, now.message)
        await anyio.sleep(0.1)
        now = status()
    return now


def build_server(manager: JobManager, device: str | None = None, one_client_per_run: bool = True) -> MCPServer:
    """The MCP server over `manager`'s jobs (and its Settings: the default device, knobs and endpoint;
    `device`, the server's --device, over them); the caller closes the manager when the server stops.
    one_client_per_run: served over a pipe (stdio, in-process), where each run is one client's; False for
    streamable HTTP, where a caller is its session (callers.caller_of)."""
    manager.settings = override(manager.settings, device=device)
    server = MCPServer(NAME, version=__version__, instructions=INSTRUCTIONS, log_level="WARNING", lifespan=one_run)
    reads = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    owners = Owners()

    def caller(ctx: Context) -> Caller:
        return caller_of(ctx, one_client_per_run)

    def watch(job_id: str, wait_s: float, ctx: Context) -> Awaitable[JobStatus]:
        who = caller(ctx)
        return _watch(lambda: _status(manager, owners, job_id, who), min(wait_s, MAX_WAIT_S), ctx)

    def verify_request(problem_path: str | None, problem_source: str | None, problem_name: str,
                       candidate_path: str | None, candidate_source: str | None, device: str | None,
                       strict: bool = False) -> VerifyRequest:
        return VerifyRequest(problem_path=problem_path, problem_source=problem_source, problem_name=problem_name,
                             candidate_path=candidate_path, candidate_source=candidate_source,
                             device=override(manager.settings, device=device).device, strict=strict)

    @bad_input_as(ToolError)
    def start_job(who: Caller, profile: bool, problem_path: str | None, problem_source: str | None,
                  problem_name: str, candidate_path: str | None, candidate_source: str | None, device: str | None,
                  strict: bool = False) -> JobStatus | None:
        """A verify or profile job started for `who` (loads the files, may start the pool's workers); None: a
        profile on a server without a GPU, where there is nothing to profile."""
        request = verify_request(problem_path, problem_source, problem_name, candidate_path, candidate_source,
                                 device, strict)
        if profile and manager.pool(request.device).device != "cuda":
            return None
        job = manager.start_verify(request, profile=profile)
        owners.add(job.job_id, who)
        return job

    # verify and profile are async so that, while they wait, each phase the verifier reports (the hook
    # `kernelloop verify` shows on stderr) goes out as a progress notification; the blocking start runs
    # in a worker thread, as the SDK runs a sync tool.
    @server.tool(annotations=reads)
    async def verify_kernel(ctx: Context, problem_path: ProblemPath = None, problem_source: ProblemSource = None,
                            problem_name: ProblemName = "problem", candidate_path: CandidatePath = None,
                            candidate_source: CandidateSource = None, device: DeviceArg = None,
                            strict: Annotated[bool, Field(description="reject library ops kept beside own kernels")] = False,
                            wait_s: WaitS = 5.0, detail: Detail = False) -> JobStatus:
        """Check a candidate kernel against its reference: correctness over several input sets, anti-cheating
        rules, and on a GPU its speed against eager and torch.compile. The verdict is in `verdict` once
        `state` is succeeded; otherwise poll job_status with the job_id. While it waits (wait_s), each
        phase (compiling, checking, timing) goes out as a progress notification."""
        job = await anyio.to_thread.run_sync(functools.partial(
            start_job, caller(ctx), False, problem_path, problem_source, problem_name, candidate_path,
            candidate_source, device, strict))
        assert job is not None  # only a profile is ever refused
        return (await watch(job.job_id, wait_s, ctx)).for_agent(detail)

    @server.tool(annotations=reads)
    async def profile_kernel(ctx: Context, problem_path: ProblemPath = None, problem_source: ProblemSource = None,
                             problem_name: ProblemName = "problem", candidate_path: CandidatePath = None,
                             candidate_source: CandidateSource = None, device: DeviceArg = None,
                             wait_s: WaitS = 5.0) -> ProfileResult:
        """Time a candidate on the GPU and summarize the profiler: device time per kernel, own kernels vs
        library kernels. Needs a GPU; on a CPU-only server it says so and runs nothing. While it waits,
        each phase goes out as a progress notification."""
        started = await anyio.to_thread.run_sync(functools.partial(
            start_job, caller(ctx), True, problem_path, problem_source, problem_name, candidate_path,
            candidate_source, device))
        if started is None:
            return ProfileResult(available=False, message="profiling needs a CUDA GPU: this server verifies on "
                                 "the CPU (Triton interpreter, correctness only); use verify_kernel here")
        job = await watch(started.job_id, wait_s, ctx)
        return ProfileResult(available=True, message=job.message, job=job.for_agent(detail=True))

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True))
    @bad_input_as(ToolError)
    def start_optimization(
            ctx: Context, problem_path: ProblemPath = None, problem_source: ProblemSource = None,
            problem_name: ProblemName = "problem",
            budget_s: BudgetS | None = None, candidates: Candidates | None = None,
            target_speedup: TargetChoice = None, max_rounds: MaxRounds | None = None,
            backend: Backend | None = None, device: DeviceArg = None,
            hints: Hints | None = None,
            start: StartChoice = defaults.START, start_source: StartSource = None,
            base_url: Annotated[str | None, Field(description="OpenAI-compatible endpoint" + FROM_SETTINGS)] = None,
            model: Annotated[str | None, Field(description="model name" + FROM_SETTINGS)] = None) -> JobStatus:
        """Start the optimization loop (plan, parallel coders, verifier, critic) on a problem in the background.
        Returns at once with the job_id; poll job_status for progress and the best kernel so far. start (a file
        or 'auto') or start_source: an existing kernel to improve, verified as attempt 0. Knobs not given are
        the server's settings; the endpoint's key is the server's (KERNELLOOP_API_KEY), never an argument."""
        request = SolveRequest(problem_path=problem_path, problem_source=problem_source, problem_name=problem_name,
                               budget_s=budget_s, candidates=candidates, target_speedup=target_speedup,
                               max_rounds=max_rounds, backend=backend, device=Device.parse(device) if device else None,
                               hints=hints or [], start=start, start_source=start_source, base_url=base_url,
                               model=model)
        status = manager.start_solve(request)
        owners.add(status.job_id, caller(ctx))
        job_threads.remember(manager.workspace, status)  # so job_status finds it after a restart
        return status.for_agent()

    @server.tool(annotations=reads)
    async def job_status(job_id: str, ctx: Context, wait_s: WaitS = 0.0, detail: Detail = False) -> JobStatus:
        """A job's state, progress, best kernel so far (optimization) or verdict (verify, profile). While it
        waits (wait_s), each step of the job goes out as a progress notification."""
        try:
            return (await watch(job_id, wait_s, ctx)).for_agent(detail)
        except ValueError as exc:  # an unknown job id (or another caller's): one line
            raise tool_error(ToolError, "job_status", exc) from exc

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    @bad_input_as(ToolError)
    def cancel_job(job_id: str, ctx: Context) -> JobStatus:
        """Stop a job at its next safe point (the best kernel so far is kept); returns at once."""
        if not owners.allows(job_id, caller(ctx)):  # another caller's is as unknown as no job at all
            raise no_such_job(job_id)
        return manager.cancel(job_id).for_agent()

    @server.tool(annotations=reads)
    @bad_input_as(ToolError)
    def list_jobs(ctx: Context, detail: Detail = False) -> JobList:
        """The jobs you started on this server, oldest first (an optimization job of an earlier server:
        job_status with its id)."""
        who = caller(ctx)
        return JobList(jobs=[job.for_agent(detail) for job in manager.jobs() if owners.listed(job.job_id, who)])

    _forbid_unknown_arguments(server)
    return server


class _StrictTool(Tool):
    """A tool whose bad arguments are one line, naming them and never echoing their values (a value may be a
    secret pasted into the wrong field): an unknown name is refused with a "did you mean" (the SDK would drop
    it, so a misspelt `candidate=2` would run with the default), a bad value says which field and why."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False) -> Any:
        line = unknown_argument(self.name, arguments, list(self.parameters.get("properties", {})))
        if line is not None:
            raise ToolError(line)
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(tool_error_line(self.name, exc.__cause__)) from None
            line = getattr(exc.__cause__, "line", None)  # ours (bad_input_as): one line, named after this tool,
            if isinstance(exc.__cause__, ToolError) and line:  # never in the SDK's "Error executing tool ..."
                raise ToolError(f"{self.name}: {line}") from None
            raise


def _forbid_unknown_arguments(server: MCPServer) -> None:
    """Every tool of the server made a _StrictTool, its schema saying additionalProperties false."""
    tools = server._tool_manager._tools  # noqa: SLF001 - the SDK has no public hook for argument checking
    for name, tool in tools.items():
        strict = _StrictTool.model_validate(dict(tool))
        strict.parameters = require_alternatives({**tool.parameters, "additionalProperties": False})
        tools[name] = strict


def open_manager(*, device: str | None = None, ray: str | None = None, workspace: str | Path | None = None,
                 settings: Settings | None = None, pool_factory: Callable[..., VerifierPool] | None = None) -> JobManager:
    """The server's job manager over its Settings: given, or made here from --device and --workspace."""
    chosen = settings if settings is not None else load_settings(device=device, home=workspace)
    if pool_factory is None:
        return JobManager(ray=ray, settings=chosen)
    return JobManager(ray=ray, settings=chosen, pool_factory=pool_factory)


def serve(transport: Literal["stdio", "http"] = "stdio", *, host: str = "127.0.0.1", port: int = 8765,
          device: str | None = None, ray: str | None = None, workspace: str | None = None,
          settings: Settings | None = None) -> None:
    """Run the server until its client goes away (stdio) or it is stopped (HTTP); then stop every job.
    settings: the entry point's (None: made here from device and workspace, the same way)."""
    manager = open_manager(device=device, ray=ray, workspace=workspace, settings=settings)
    try:
        manager.pool()  # fail now on a bad --device or --ray, not in the first tool call
        server = build_server(manager, one_client_per_run=transport == "stdio")  # chosen's device already
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)
    finally:
        manager.close()
