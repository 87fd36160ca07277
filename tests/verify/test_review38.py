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


@pytest.mark.xfail(strict=True, reason="open: SolveRequest.hints has no bound on count or size (problem_source, "
                                       "candidate_source and start_source are capped at MAX_SOURCE_BYTES); every "
                                       "hint goes into every coder's prompt of every round, on the operator's key")
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


@pytest.mark.xfail(strict=True, reason="open: RunSummary.base_url (in every job_status and list_jobs answer, brief "
                                       "or detailed) is the operator's endpoint verbatim, credentials in its URL included")
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


class _LoggingTimer:
    """A CallTimer that logs when each call's timed region opens and closes."""

    def __init__(self, log: list[str]):
        self.log = log

    def start(self) -> None:
        self.log.append("start")

    def stop(self) -> None:
        self.log.append("stop")

    def collect_ms(self) -> list[float]:
        return [1.0]  # one call a round here

    def sync(self) -> None:
        pass

    def hold(self, ms: float) -> None:
        pass


def test_a_lazy_output_list_runs_its_kernel_after_the_calls_stop_event(monkeypatch):
    """review38_lazy_output_list.py under Triton's interpreter, in the timing loop the candidate's child runs
    (timing.Rounds with the harness's `after`: Kept.keep of the flattened output): its forward launches nothing,
    and the kernel runs when `after` flattens the list, once the stop event is recorded. The events of a GPU
    would time an empty call; the kept output is right, so every digest and checked call is too."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from kernelloop.tools.profile.timing import Rounds
    from kernelloop.tools.verify.compare import flatten_outputs
    from kernelloop.tools.verify.kept_outputs import Kept

    module = _fixture_module("review38_lazy_output_list")
    original = module.relu_kernel.run

    def counted(*args, **kwargs):
        log.append("kernel")
        return original(*args, **kwargs)

    monkeypatch.setattr(module.relu_kernel, "run", counted)
    log: list[str] = []
    x = torch.randn(37, 129)
    model = module.ModelNew()
    kept = Kept([[list(x.shape), "float32"]], 2, "cpu")
    timer = _LoggingTimer(log)
    rounds = Rounds({"candidate": lambda i: model(x)}, 1, timer, lambda: 0.0,
                    after=lambda name, output: kept.keep(flatten_outputs(output)))
    rounds.block(1)
    assert log == ["start", "stop", "kernel"], log  # the work ran after its call's timed region closed
    assert torch.equal(kept.raw(0).view(torch.float32).view(x.shape), torch.relu(x))  # and what was kept is right
