"""What every entry point accepts: the request models, their fields' limits, and bad input as one line.

The CLI, the MCP server, the LangChain tools and the job manager validate through these
models, so a cap (candidates, budget, rounds, source size) is checked the same way everywhere;
the values themselves come from kernelloop.config.defaults.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_serializer

from kernelloop import safe_text
from kernelloop.config import defaults
from kernelloop.config.fields import (  # noqa: F401  (re-exported)
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
from kernelloop.config.settings import Settings
from kernelloop.config.units import Device
from kernelloop.problem import Candidate, Problem, check_source_size, sha256_text
from kernelloop.records import Code, Status, Verdict
from kernelloop.sandbox.redact import SETTINGS_FILES
from kernelloop.starts import StartRecord, resolve_start

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")



class RequestError(ValueError):
    """A request that can't be served (no problem given, a bad name). One line."""


def one_line(error: ValueError) -> str:
    """A bad-input error as the one line a caller reads (pydantic's: each field and what is wrong with it)."""
    if isinstance(error, ValidationError):
        line = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in error.errors())
    else:
        line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return safe_text.one_line(line, 4000)  # a problem's own error may be in it: bounded, no control characters


T = TypeVar("T")


def unknown_argument(tool: str, given: Iterable[str], known: Sequence[str]) -> str | None:
    """The one line for an argument a tool doesn't take (MCP and LangChain alike), naming it, never its value:
    "verify_kernel: unknown argument 'problem_pth'; did you mean 'problem_path'?"; None when all are known."""
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return None
    close = difflib.get_close_matches(unknown[0], list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; it takes {', '.join(known)}"
    return f"{tool}: unknown argument {unknown[0]!r}{hint}"


def tool_error_line(tool: str, error: ValueError) -> str:
    """Every tool error's one line, in every interface: the tool's name, then what to fix."""
    return f"{tool}: {one_line(error)}"


def validation_line(tool: str, known: Sequence[str]) -> Callable[[ValidationError], str]:
    """A LangChain tool's handle_validation_error: the same line the MCP server gives for the same arguments."""
    def line(error: ValidationError) -> str:
        extra = [str(e["loc"][0]) for e in error.errors() if e["type"] == "extra_forbidden" and e["loc"]]
        return unknown_argument(tool, extra, known) if extra else tool_error_line(tool, error)  # type: ignore[return-value]
    return line


def bad_input_as(error: type[Exception]) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a tool so bad input (a ValueError: ProblemError, RequestError, PoolError, ConfigError,
    ValidationError) reaches its caller as `error` (the framework's tool error) with one line, prefixed with
    the tool's name (tool_error_line); anything else stays a crash."""
    def decorate(tool: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(tool)
        def checked(*args: Any, **kwargs: Any) -> T:
            try:
                return tool(*args, **kwargs)
            except ValueError as exc:
                raise tool_error(error, tool.__name__, exc) from exc
        return checked
    return decorate


def tool_error(error: type[Exception], tool: str, exc: ValueError) -> Exception:
    """Bad input to `tool` as `error` with its one line (bad_input_as's, for a tool it can't decorate: an async one)."""
    raised = error(tool_error_line(tool, exc))
    raised.line = one_line(exc)  # type: ignore[attr-defined]  # for a server that names the tool itself
    return raised


ALTERNATIVES = (("problem_path", "problem_source"), ("candidate_path", "candidate_source"))


def require_alternatives(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's JSON schema with what it requires said in it: one of problem_path and problem_source (and of
    candidate_path and candidate_source, where it takes a candidate), as `allOf` of `oneOf` `required` lists,
    so an agent reading the schema sees that a call without them is refused."""
    properties = schema.get("properties", {})
    needed = [{"oneOf": [{"required": [name]} for name in pair]} for pair in ALTERNATIVES
              if all(name in properties for name in pair)]
    return {**schema, "allOf": needed} if needed else schema


class ProblemInput(BaseModel):
    """A problem by path, or by its text (written under WORKSPACE/jobs/inputs/)."""

    model_config = ConfigDict(extra="forbid",  # an agent's misspelt argument is an error, never dropped
                              json_schema_extra=lambda schema, cls: schema.update(require_alternatives(schema)))

    problem_path: str | None = Field(default=None,
                                     description="a problem file: class Model, get_inputs, get_init_inputs")
    problem_source: str | None = Field(default=None, description="the problem file's text, instead of a path")
    problem_name: str = Field(default="problem", description="file name (no .py) for a problem given as text")

    def load_problem(self, workspace: Path) -> Problem:
        """The problem, never imported in this process: a caller's problem is code we don't trust
        (it would run beside the API key, and could patch the comparison for every later call)."""
        path = _path_or_text(self.problem_path, self.problem_source, self.problem_name, "problem",
                             workspace / "jobs" / "inputs")
        return Problem.from_file(path, trusted=False)


class CandidateInput(ProblemInput):
    """A candidate kernel and the problem it claims to solve."""

    candidate_path: str | None = Field(default=None, description="a candidate file: class ModelNew")
    candidate_source: str | None = Field(default=None, description="the candidate's text, instead of a path")

    def load_candidate(self) -> Candidate:
        path, source = self.candidate_path, self.candidate_source
        if path is not None and source is None:
            return Candidate.from_file(path)
        if source is not None and path is None:
            check_source_size(len(source.encode()), "candidate_source", "candidate")
            return Candidate(source=source)
        raise RequestError("give exactly one of candidate_path and candidate_source")


class VerifyRequest(CandidateInput):
    """One candidate against one problem, on a device."""

    device: Device | None = Field(default=None, description="auto, cpu, cuda or cuda:N" + FROM_SETTINGS)
    strict: bool = Field(default=False, description="reject library ops kept beside the candidate's kernels")




class SolveKnobs(BaseModel):
    """How much a run may spend and when it stops: the knobs every entry point shares. A knob not given
    comes from the entry point's Settings (`flags()` are laid over them with settings.override)."""

    model_config = ConfigDict(extra="forbid")  # a misspelt knob is an error, never dropped

    budget_s: BudgetS | None = Field(default=None, description="wall-clock budget, s" + FROM_SETTINGS)
    candidates: Candidates | None = Field(default=None, description="kernels written in parallel per round"
                                                                    + FROM_SETTINGS)
    target_speedup: TargetChoice = None
    max_rounds: MaxRounds | None = Field(default=None, description="rounds at most" + FROM_SETTINGS)

    def flags(self) -> dict[str, Any]:
        """The knobs given, named as Settings names them."""
        return {"budget": self.budget_s, "candidates": self.candidates, "target": self.target_speedup,
                "max_rounds": self.max_rounds}


class SolveSettings(ProblemInput, SolveKnobs):
    """A problem to make a fast kernel for, and how much to spend on it."""

    hints: Hints = Field(default_factory=list)  # bounded: each goes into every coder prompt, on the server's key
    start: StartChoice = defaults.START
    start_source: StartSource = None

    def load_start(self, problem: Problem) -> StartRecord | None:
        """The kernel attempt 0 is (None: from scratch); a start file that can't be read is a one-line error."""
        if self.start is not None and self.start_source is not None:
            raise RequestError("give at most one of start and start_source")
        if self.start_source is not None:
            check_source_size(len(self.start_source.encode()), "start_source", "kernel")
            return resolve_start(Candidate(source=self.start_source), problem.name)
        return resolve_start(self.start, problem.name)


class SolveRequest(SolveSettings):
    """An optimization run. The endpoint's key is never a request field (it would sit in a model's
    transcript): it comes from the server's settings, KERNELLOOP_API_KEY."""

    backend: Backend | None = Field(default=None, description="triton, cuda or auto" + FROM_SETTINGS)
    device: Device | None = Field(default=None, description="auto, cpu, cuda or cuda:N" + FROM_SETTINGS)
    base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint" + FROM_SETTINGS)
    model: str | None = Field(default=None, description="model name at the endpoint" + FROM_SETTINGS)

    def flags(self) -> dict[str, Any]:
        return super().flags() | {"backend": self.backend, "device": self.device, "base_url": self.base_url,
                                  "model": self.model}


class VerdictBrief(BaseModel):
    """A verdict as an agent reads it by default: what happened and what to do (ask with detail=true for
    everything: timings, errors, costs, containment)."""

    status: Status
    code: Code
    speedup: float | None = Field(default=None, description="over eager, median of per-round ratios; null: not "
                                                            "timed (CPU, or not correct)")
    reason: str
    feedback: str = Field(default="", description="for the coder: what went wrong and where")
    workloads: dict[str, dict] = Field(default_factory=dict, description="a problem with get_workloads: each "
                                       "workload's status, speedups and times (speedup is then their geometric mean)")
    slowest_workload: str = Field(default="", description="the workload with the lowest speedup over eager, if timed")

    @classmethod
    def of(cls, verdict: Verdict) -> VerdictBrief:
        return cls(status=verdict.status, code=verdict.code, speedup=verdict.speedup, reason=verdict.reason,
                   feedback=verdict.feedback,
                   workloads={name: result.model_dump() for name, result in verdict.workloads.items()},
                   slowest_workload=verdict.slowest_workload)

    @model_serializer(mode="wrap")
    def _without_empty_workloads(self, handler):  # noqa: ANN001, ANN202 - pydantic's serializer hook
        """A problem without workloads answers with the brief it always had (no workload keys)."""
        data = handler(self)
        if not self.workloads and isinstance(data, dict):
            data.pop("workloads", None)
            data.pop("slowest_workload", None)
        return data


def _path_or_text(path: str | None, text: str | None, name: str, what: str, inbox: Path) -> Path:
    if path is not None and text is None:
        return Path(path).expanduser()
    if text is None or path is not None:
        raise RequestError(f"give exactly one of {what}_path and {what}_source")
    if not _NAME.match(name):
        raise RequestError(f"bad {what}_name {name!r}: letters, digits, '_', '-', '.' only")
    check_source_size(len(text.encode()), f"{what}_source", what)
    target = inbox / sha256_text(text)[:16] / f"{name}.py"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return target


# --------------------------------------------------------------------------- what a server's caller may choose
# A server's caller (an MCP client, an agent given the LangChain tools) is trusted with its own problem and
# kernels, never with the server's key or the server's files: the operator's settings say where it may
# name files (file_roots) and whether it may choose the endpoint (allow_caller_endpoints).

_FILE_FIELDS = ("problem_path", "candidate_path", "start")
_SETTINGS_NAMES = frozenset(name.casefold() for name in SETTINGS_FILES)
RequestT = TypeVar("RequestT", bound=BaseModel)


def confined(request: RequestT, settings: Settings) -> RequestT:
    """`request` with each file it names resolved (links followed) and checked to lie in one of the
    settings' caller_file_roots and outside the server's workspace; else a one-line RequestError."""
    roots, workspace = settings.caller_file_roots, settings.workspace.root
    updates: dict[str, str] = {}
    for name in _FILE_FIELDS:
        value = getattr(request, name, None)
        if value is None or (name == "start" and value == defaults.START_AUTO):
            continue
        try:
            resolved = Path(value).expanduser().resolve()
        except (OSError, RuntimeError, ValueError):  # a loop of links, a NUL in the name
            raise RequestError(f"{name} {safe_text.one_line(str(value), 300)!r}: can't be resolved") from None
        if resolved == Path(resolved.anchor) or not any(resolved.is_relative_to(root) and root != Path(root.anchor)
                                                        for root in roots):
            raise RequestError(f"{name} {safe_text.one_line(str(value), 300)!r} is outside the dirs this server "
                               f"lets a caller name ({os.pathsep.join(map(str, roots))}; the operator's file_roots "
                               f"setting); give its text instead ({name.removesuffix('_path')}_source)")
        if resolved.is_relative_to(workspace):
            raise RequestError(f"{name} {safe_text.one_line(str(value), 300)!r} is in the server's workspace, "
                               "which a caller may not read; give its text instead")
        # the operator's settings (its key among them) are never a caller's file; casefolded, as a case-insensitive
        # filesystem opens `.ENV` as `.env` (and Windows drops a trailing dot or space)
        if resolved.name.rstrip(". ").casefold() in _SETTINGS_NAMES:
            raise RequestError(f"{name} {safe_text.one_line(str(value), 300)!r} is a settings file, which a caller "
                               "may not name")
        updates[name] = str(resolved)
    return request.model_copy(update=updates)


def caller_endpoint(server: Settings, chosen: Settings, base_url: str | None) -> Settings:
    """`chosen` (the server's settings with a call's knobs over them) where the call named `base_url`:
    the server's own endpoint gets the server's key; another is refused unless the operator allows
    callers' endpoints (allow_caller_endpoints), and then it gets no key at all."""
    if base_url is None or base_url == server.base_url:
        return chosen
    if not server.allow_caller_endpoints:
        raise RequestError("base_url: this server's endpoint is its operator's (allow_caller_endpoints is off); "
                           "leave base_url out")
    no_key = Settings.model_fields["api_key"].default
    return chosen.model_copy(update={"api_key": no_key if isinstance(no_key, SecretStr) else SecretStr("not-needed")})
