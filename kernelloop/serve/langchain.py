"""kernelloop as LangChain tools: `verify_kernel` and `optimize_kernel`, for any LangChain/LangGraph agent.

    from kernelloop.serve.langchain import kernelloop_tools
    verify_kernel, optimize_kernel = kernelloop_tools(device="cuda")   # bind to a model, or give to an agent
    verify_kernel.invoke({"problem_path": "p.py", "candidate_path": "k.py"})   # -> the verdict as a dict

Each tool answers with a JSON object (the ToolMessage content a model reads) and keeps the typed
result as the message's artifact: a Verdict for verify_kernel, a SolveResult for optimize_kernel.
Both run to their end in the calling thread (an optimization takes its budget); an agent that
must not wait should use the MCP server's background jobs instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool, ToolException
from pydantic import Field

from kernelloop.agents.turns import ChatClient, KeyedChatClient
from kernelloop.config.endpoint import shown_endpoint
from kernelloop.config.settings import Settings, load_settings, override
from kernelloop.graph.context import VerifierLike
from kernelloop.records import Verdict
from kernelloop.serve.requests import (
    CandidateInput,
    SolveSettings,
    VerdictBrief,
    VerifyRequest,
    bad_input_as,
    confined,
    validation_line,
)
from kernelloop.serve.runs import RunOptions, SolveResult, run_solve

VERIFY_DESCRIPTION = (
    "Check a GPU kernel (class ModelNew) against its PyTorch reference (class Model): correctness over several "
    "input sets, anti-cheating rules, and on a GPU its speedup over eager and torch.compile. Returns the verdict: "
    "status, reason, errors, timings, feedback.")
OPTIMIZE_DESCRIPTION = (
    "Write a faster, verified GPU kernel for a PyTorch reference problem: plans, writes candidates in parallel "
    "with a reasoning model, verifies and critiques them until the target speedup or the budget; `start` (a kernel "
    "file, or 'auto' for the family's starter) or `start_source` begins from an existing kernel, verified as attempt "
    "0. Returns the run's summary: status, best_speedup, best_kernel (a file path), attempts, start.")


class VerifyArgs(CandidateInput):
    """verify_kernel's arguments: the candidate and its problem, and how much of the verdict to answer with."""

    detail: bool = Field(default=False, description="the whole verdict (timings, errors, costs, containment); "
                                                    "default: brief (status, code, speedup, reason, feedback)")


def verify_tool(*, device: str | None = None, strict: bool = False, verifier: VerifierLike | None = None,
                workspace: str | Path | None = None, settings: Settings | None = None) -> StructuredTool:
    """The verify_kernel tool. verifier: a VerifierPool (or Verifier) to reuse across calls; None
    starts a fresh Verifier per call (a few seconds of sandbox start-up each time). settings: the entry
    point's (None: made here, once, from device and workspace over KERNELLOOP_* > .env > kernelloop.toml)."""
    chosen = settings if settings is not None else load_settings(device=device, home=workspace)
    space = chosen.workspace.root

    @bad_input_as(ToolException)
    def verify_kernel(detail: bool = False, **args: Any) -> tuple[dict, Verdict]:
        request = confined(VerifyRequest(**args, device=chosen.device, strict=strict), chosen)
        problem, candidate = request.load_problem(space), request.load_candidate()
        if verifier is not None:
            verdict = verifier.verify(candidate, problem)
        else:
            from kernelloop.tools.verify.pool import make_pool  # lazy: starts a sandbox worker; takes 'cuda:N' too

            with make_pool(chosen.device, workspace=space, strict=strict, **chosen.limits.model_dump()) as pool:
                verdict = pool.verify(candidate, problem)
        shown = verdict.model_dump() if detail else VerdictBrief.of(verdict).model_dump(mode="json")
        return shown, verdict

    return StructuredTool.from_function(verify_kernel, name="verify_kernel", description=VERIFY_DESCRIPTION,
                                        args_schema=VerifyArgs, response_format="content_and_artifact",
                                        handle_tool_error=True,
                                        handle_validation_error=validation_line("verify_kernel", list(VerifyArgs.model_fields)))


def solve_tool(*, device: str | None = None, verifier: VerifierLike | None = None,
               workspace: str | Path | None = None, base_url: str | None = None, model: str | None = None,
               api_key: str | None = None, chat_client: ChatClient | KeyedChatClient | None = None,
               settings: Settings | None = None) -> StructuredTool:
    """The optimize_kernel tool: kernelloop.solve on a problem. Settings (device, knobs, endpoint) are the
    entry point's, made once here (or given); a call's knobs go over them. chat_client replaces the endpoint
    with any LangChain chat model the agent already has (or a recording)."""
    chosen = settings if settings is not None else load_settings(device=device, home=workspace, base_url=base_url,
                                                                 model=model, api_key=api_key)

    @bad_input_as(ToolException)
    def optimize_kernel(**args: Any) -> tuple[dict, SolveResult]:
        request = confined(SolveSettings(**args), chosen)  # its files in the operator's dirs, links followed
        problem = request.load_problem(chosen.workspace.root)
        result = run_solve(problem, override(chosen, **request.flags()), RunOptions(
            hints=request.hints, start=request.load_start(problem), verifier=verifier, chat_client=chat_client))
        shown = result.model_dump(mode="json")  # what the agent reads: the endpoint without its credentials
        return shown | {"base_url": shown_endpoint(result.base_url)}, result

    return StructuredTool.from_function(optimize_kernel, name="optimize_kernel", description=OPTIMIZE_DESCRIPTION,
                                        args_schema=SolveSettings, response_format="content_and_artifact",
                                        handle_tool_error=True,
                                        handle_validation_error=validation_line("optimize_kernel",
                                                                                list(SolveSettings.model_fields)))


def kernelloop_tools(*, device: str | None = None, verifier: VerifierLike | None = None,
                     workspace: str | Path | None = None, settings: Settings | None = None,
                     **endpoint: Any) -> list[StructuredTool]:
    """[verify_kernel, optimize_kernel] sharing one verifier (pass a pool), workspace and Settings (made once
    here from device, workspace and endpoint, or given). endpoint: base_url, model, api_key or chat_client."""
    chat_client = endpoint.pop("chat_client", None)
    chosen = settings if settings is not None else load_settings(device=device, home=workspace, **endpoint)
    return [verify_tool(strict=False, verifier=verifier, settings=chosen),
            solve_tool(verifier=verifier, chat_client=chat_client, settings=chosen)]
