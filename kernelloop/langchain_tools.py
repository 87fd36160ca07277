"""kernelloop as LangChain tools: `verify_kernel` and `optimize_kernel`, for any LangChain/LangGraph agent.

    from kernelloop.langchain_tools import kernelloop_tools
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

from kernelloop.agents.turns import ChatClient, KeyedChatClient
from kernelloop.config import workspace_dir
from kernelloop.graph.context import VerifierLike
from kernelloop.requests import CandidateInput, SolveRequest, SolveSettings, VerifyRequest, bad_input_as, one_line
from kernelloop.results import Verdict
from kernelloop.runs import SolveResult, solve

VERIFY_DESCRIPTION = (
    "Check a GPU kernel (class ModelNew) against its PyTorch reference (class Model): correctness over several "
    "input sets, anti-cheating rules, and on a GPU its speedup over eager and torch.compile. Returns the verdict: "
    "status, reason, errors, timings, feedback.")
OPTIMIZE_DESCRIPTION = (
    "Write a faster, verified GPU kernel for a PyTorch reference problem: plans, writes candidates in parallel "
    "with a reasoning model, verifies and critiques them until the target speedup or the budget; `start` (a kernel "
    "file, or 'auto' for the family's starter) or `start_source` begins from an existing kernel, verified as attempt "
    "0. Returns the run's summary: status, best_speedup, best_kernel (a file path), attempts, start.")


def verify_tool(*, device: str = "auto", strict: bool = False, verifier: VerifierLike | None = None,
                workspace: str | Path | None = None) -> StructuredTool:
    """The verify_kernel tool. verifier: a VerifierPool (or Verifier) to reuse across calls; None
    starts a fresh Verifier per call (a few seconds of sandbox start-up each time)."""
    space = workspace_dir(workspace)

    @bad_input_as(ToolException)
    def verify_kernel(**args: Any) -> tuple[dict, Verdict]:
        request = VerifyRequest(**args, device=device, strict=strict)
        problem, candidate = request.load_problem(space), request.load_candidate()
        if verifier is not None:
            verdict = verifier.verify(candidate, problem)
        else:
            from kernelloop import verify  # lazy: starts a sandbox worker; takes 'cuda:N' too

            verdict = verify(candidate, problem, device=device, strict=strict, workspace=space)
        return verdict.model_dump(), verdict

    return StructuredTool.from_function(verify_kernel, name="verify_kernel", description=VERIFY_DESCRIPTION,
                                        args_schema=CandidateInput, response_format="content_and_artifact",
                                        handle_tool_error=True, handle_validation_error=one_line)


def solve_tool(*, device: str = "auto", verifier: VerifierLike | None = None, workspace: str | Path | None = None,
               base_url: str | None = None, model: str | None = None, api_key: str | None = None,
               chat_client: ChatClient | KeyedChatClient | None = None) -> StructuredTool:
    """The optimize_kernel tool: kernelloop.solve on a problem. The endpoint defaults to KERNELLOOP_*
    settings; chat_client replaces it with any LangChain chat model the agent already has (or a recording)."""
    space = workspace_dir(workspace)

    @bad_input_as(ToolException)
    def optimize_kernel(**args: Any) -> tuple[dict, SolveResult]:
        request = SolveRequest(**args, device=device)
        problem = request.load_problem(space)
        result = solve(problem, budget_s=request.budget_s, candidates=request.candidates,
                       target_speedup=request.target_speedup, max_rounds=request.max_rounds, hints=request.hints,
                       start=request.load_start(problem),
                       device=device, verifier=verifier, workspace=space, chat_client=chat_client,
                       base_url=base_url, model=model, api_key=api_key)
        return result.model_dump(mode="json"), result

    return StructuredTool.from_function(optimize_kernel, name="optimize_kernel", description=OPTIMIZE_DESCRIPTION,
                                        args_schema=SolveSettings, response_format="content_and_artifact",
                                        handle_tool_error=True, handle_validation_error=one_line)


def kernelloop_tools(*, device: str = "auto", verifier: VerifierLike | None = None,
                     workspace: str | Path | None = None, **endpoint: Any) -> list[StructuredTool]:
    """[verify_kernel, optimize_kernel] sharing one verifier (pass a pool) and workspace.
    endpoint: base_url, model, api_key or chat_client for optimize_kernel."""
    return [verify_tool(device=device, verifier=verifier, workspace=workspace),
            solve_tool(device=device, verifier=verifier, workspace=workspace, **endpoint)]
