"""review38: attacks that are not corpus fixtures (the MCP server's caller, the sandbox's view of the host, the
timing loop's order), each a strict xfail while open, and the mechanisms the review38 fixtures stand on.

Open holes are strict xfails, the corpus's convention (tests/verify/test_adversarial.py `_OPEN`): each asserts
what a correct server or verifier does, fails on the current code, and shows as XPASS once fixed."""

from __future__ import annotations

import importlib.util
import os
import shutil
import uuid
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
CHEATS = FIXTURES / "cheats"
PROBLEMS = FIXTURES / "problems"
SECRET = "sk-review38-OPERATOR-0123456789"


# --------------------------------------------------------------------------- the MCP server's caller


def test_a_callers_hints_are_bounded_like_its_sources():
    """start_optimization(hints=[...]) from an MCP caller: 64 hints of 1 MiB each are validated, kept in the
    run's state and checkpoints, and rendered into each coder prompt (coder.j2: "Hints from the user (follow
    them)"), which the server sends to its endpoint with its own key, for up to `candidates` x `max_rounds`
    prompts. The caller's problem text alone is held to 1 MiB. Fix: cap hints (count and total bytes) in
    SolveSettings, as check_source_size caps a source."""
    from kernelloop.serve.requests import SolveRequest

    source = (PROBLEMS / "relu.py").read_text()
    with pytest.raises(ValueError):
        SolveRequest(problem_source=source, hints=["h" * (1 << 20)] * 64)


def test_a_job_status_never_shows_credentials_in_the_operators_endpoint(tmp_path):
    """An operator whose endpoint carries its credential in the URL (https://user:password@gateway/v1, a key in
    the query or in a gateway's path) serves callers who must never see it: `api_key` is kept from them (it
    is never a request field), but the run's settings hold base_url, and graph.report.summarize copies it into
    the RunSummary that job_status hands every caller (JobStatus.for_agent keeps the summary). list_jobs shows
    every job of the server, another caller's too. Fix: show a caller the endpoint's scheme, host and path
    with userinfo and query cut (or nothing of it), as the key is."""
    from kernelloop.graph.report import summarize
    from kernelloop.graph.rundir import RunDir
    from kernelloop.graph.state import RunSettings
    from kernelloop.serve.jobs import JobStatus

    endpoint = f"https://operator:{SECRET}@llm.internal/v1?api-key={SECRET}"
    settings = RunSettings.model_validate({"base_url": endpoint, "model": "r1"})
    state = {"problem": {"name": "relu", "source": (PROBLEMS / "relu.py").read_text()}, "settings": settings.model_dump()}
    summary = summarize(RunDir(tmp_path, "t1"), state)
    answered = JobStatus(job_id="solve-1", kind="solve", state="running", problem="relu", created_at=0.0,
                         summary=summary).for_agent()
    assert SECRET not in answered.model_dump_json()


# --------------------------------------------------------------------------- the sandbox's view of the host


ENVRC_READER = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

with open({path!r}) as _handle:
    _found = _handle.read()
print("review38 found:", _found.strip()[::-1], flush=True)  # reversed: the redaction cuts the literal value only


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
'''


@pytest.mark.xfail(strict=True, reason="open: the sandbox is --ro-bind / / with /tmp, home, /run and the workspace "
                                       "hidden: the operator's working dir shows, and only its .env and "
                                       "kernelloop.toml are masked (.envrc, .env.local, .git/config ... are not); the "
                                       "redaction backstop cuts the literal value only")
def test_a_key_in_the_operators_working_dir_never_reaches_a_verdict(tmp_path, monkeypatch):
    """The operator runs the verifier (the MCP server, bench) from a project dir holding its key in a direnv
    `.envrc` (export KERNELLOOP_API_KEY=...), which is how direnv users keep it. As root the job is nobody on
    the host and a 0644 file is readable to it; as a user it is that user. A candidate (rules off: the
    boundary alone) reads it and prints it reversed; the verdict's stdout tail carries it to whoever asked
    (an MCP caller, the model in the loop). Fix: bind what jobs need (the Python install, the package, the
    work dir) into an empty root instead of hiding a list of dirs in the host's; at least mask every dot-file
    of the working dir and the dirs on the import path."""
    from kernelloop.tools.verify.verifier import Verifier

    project = REPO / ".pytest_cache" / f"review38-project-{uuid.uuid4().hex[:8]}"  # outside /tmp and home: shown
    project.mkdir(parents=True)
    try:
        os.chmod(project, 0o755)
        envrc = project / ".envrc"
        envrc.write_text(f"export KERNELLOOP_API_KEY={SECRET}\n")
        os.chmod(envrc, 0o644)
        monkeypatch.chdir(project)
        monkeypatch.setenv("KERNELLOOP_API_KEY", SECRET)
        with Verifier(device="cpu", workspace=tmp_path / "ws", time_it=False, static_checks=False,
                      compile_timeout_s=60.0, run_timeout_s=60.0) as verifier:
            verdict = verifier.verify(Candidate.from_source(ENVRC_READER.format(path=str(envrc))),
                                      Problem.from_file(PROBLEMS / "relu.py"))
        text = "\n".join((verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail))
        assert SECRET not in text and SECRET[::-1] not in text, verdict.stdout_tail[-500:]
    finally:
        shutil.rmtree(project, ignore_errors=True)


# --------------------------------------------------------------------------- mechanisms of the fixtures


def _fixture_module(stem: str):
    spec = importlib.util.spec_from_file_location(f"review38_{stem}", CHEATS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_lazy_output_list_never_runs_its_kernel_when_its_outputs_are_read(monkeypatch):
    """review38_lazy_output_list.py under Triton's interpreter: its forward launches nothing and returns a
    list subclass whose __iter__ would launch the kernel when the harness reads the outputs (after a timed
    call's stop event). flatten_outputs reads a list subclass as a list holds it: no items, no kernel."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from kernelloop.tools.verify.compare import flatten_outputs

    module = _fixture_module("review38_lazy_output_list")
    original = module.relu_kernel.run
    log: list[str] = []

    def counted(*args, **kwargs):
        log.append("kernel")
        return original(*args, **kwargs)

    monkeypatch.setattr(module.relu_kernel, "run", counted)
    result = module.ModelNew()(torch.randn(37, 129))
    assert isinstance(result, list) and type(result) is not list
    assert flatten_outputs(result) == [] and log == []
    assert [type(t) for t in flatten_outputs((torch.ones(1), [torch.ones(2)]))] == [torch.Tensor, torch.Tensor]
    assert len(flatten_outputs(torch.ones(3, 2).max(dim=1))) == 2  # torch's own tuple subclasses read as before


@pytest.mark.xfail(strict=True, reason="open: the static rules walk a candidate's AST about 33 times (one ast.walk "
                                       "per rule and per helper), in the server's own process (LocalPool._precheck); "
                                       "bounded since by MAX_CANDIDATE_TOKENS (a caller's 1 MiB candidate_source held "
                                       "it for about 35 s of CPU under its GIL; one at the bound, about 2.5 s)")
def test_the_lint_of_a_callers_candidate_visits_each_node_a_few_times(monkeypatch):
    """verify_kernel(candidate_source=...) is prechecked (syntax, static rules) before any worker is involved,
    in the MCP server's process: 100,000 one-line statements (`f(x0)`, 1 MiB, lint-clean) took 6.8 s to parse
    and 33 s to lint here, every call, so a few callers keep the server's CPU busy (its other tools answer late).
    Bounded in work, not time: each AST node of a 115 kB candidate visited at most 10 times. Fix: one walk
    that feeds every rule (or a node budget before the rules, a lower size cap for a caller's text, or the
    precheck in a CPU worker)."""
    import ast

    from kernelloop.tools.verify.static_check import first_broken_rule

    source = (FIXTURES / "honest" / "relu_triton.py").read_text() + "\n" + "".join(f"f(x{i})\n" for i in range(12500))
    nodes = sum(1 for _ in ast.walk(ast.parse(source)))
    visits = [0]
    original = ast.iter_child_nodes

    def counted(node):
        visits[0] += 1
        return original(node)

    monkeypatch.setattr(ast, "iter_child_nodes", counted)
    assert first_broken_rule(source) is None  # lint-clean: a caller's text reaches the sandbox after this
    assert visits[0] <= 10 * nodes, f"{visits[0]:,} visits of {nodes:,} nodes"


def test_one_mcp_caller_never_sees_or_cancels_anothers_jobs(tmp_path, monkeypatch):
    """`kernelloop mcp --transport http` serves every client that reaches its port (127.0.0.1 by default: any
    local user's process; --host for more) from one JobManager, with no notion of whose job is whose: a
    caller that lists the jobs gets another caller's job ids, problems and verdicts (job_status(detail=True)
    their whole text, a solve's best_kernel the other's best kernel), and cancel_job stops them. Each caller
    is untrusted. Fix: jobs owned by the session (or a per-client token) that started them; list_jobs,
    job_status and cancel_job answer a caller's own only."""
    import json

    import anyio
    from mcp import Client

    from kernelloop.serve.jobs import JobManager
    from kernelloop.serve.mcp import build_server
    from tests.graph.scripted import FIXED_KERNEL, RELU_PROBLEM
    from tests.serve.test_mcp import ScriptedPool

    for name in ("KERNELLOOP_ALLOW_CALLER_ENDPOINTS", "KERNELLOOP_BASE_URL", "KERNELLOOP_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("KERNELLOOP_FILE_ROOTS", str(tmp_path))

    async def sessions(server) -> tuple[str, str, bool, bool]:
        async with Client(server) as alice, Client(server) as mallory:
            started = await alice.call_tool("verify_kernel", {"problem_source": RELU_PROBLEM.read_text(),
                                                              "candidate_source": FIXED_KERNEL, "wait_s": 5})
            job_id = started.structured_content["job_id"]
            listed = json.dumps((await mallory.call_tool("list_jobs", {"detail": True})).structured_content)
            read = await mallory.call_tool("job_status", {"job_id": job_id, "detail": True})
            cancelled = await mallory.call_tool("cancel_job", {"job_id": job_id})
            return job_id, listed, read.is_error, cancelled.is_error

    with JobManager(tmp_path / "ws", pool_factory=ScriptedPool) as manager:
        job_id, listed, read_refused, cancel_refused = anyio.run(sessions, build_server(manager, "cpu"))
    assert job_id not in listed and read_refused and cancel_refused


def test_a_cuda_graph_of_the_candidates_own_is_refused_by_the_lint():
    """review38_cuda_graph_hides_torch.py (GPU only) replays torch work from its own graph, which no op
    record sees: the lint refuses graph names where they are torch's (attributes, imports), not a variable."""
    import ast

    from kernelloop.tools.verify.static_check import check_streams

    source = (FIXTURES / "cheats" / "review38_cuda_graph_hides_torch.py").read_text()
    assert "CUDA graph" in (check_streams(ast.parse(source)) or "")
    assert "make_graphed_callables" in (check_streams(ast.parse("from torch.cuda import make_graphed_callables")) or "")
    assert check_streams(ast.parse("graph = {}\nedges = graph.get(1)\n")) is None
