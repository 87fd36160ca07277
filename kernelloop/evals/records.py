"""What a bench run writes: one BenchRecord per problem per attempt (results.jsonl), one BenchSummary;
and reading results.jsonl back for resume.

Every record says where it was measured (device, GPU name, torch and triton versions), so a
results file mixed from several machines or resumed runs stays honest about its numbers.
Times are seconds (`*_s`) or milliseconds (`*_ms`); nothing is rounded here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, BaseModel, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from kernelloop.graph.usage import Usage
from kernelloop.problem import Problem, ProblemError
from kernelloop.records import Code, Status, TimingStats, Verdict, WorkloadResult
from kernelloop.safe_text import utf8

# Text from candidates and from the names of files in someone else's dir: a lone surrogate in it
# would make the record unwritable as JSON (and end a bench run), so it is replaced on the way in.
Text = Annotated[str, AfterValidator(utf8)]

EAGER = "eager"
COMPILE = "compile"


class Mode(str, Enum):
    """How the problems were worked on."""

    agent = "agent"  # the agent loop wrote the candidates, within a budget per problem
    candidates = "candidates"  # candidates written elsewhere, scored here
    baselines = "baselines"  # no candidate: eager, torch.compile and problem baselines timed alone


class Claim(BaseModel):
    """What the input said of a solution it listed (a leaderboard's own verdict and speedups), kept to compare."""

    id: str = Field(description="the solution's id in the input (the leaderboard's `file`)")
    model: str | None = Field(default=None, description="who wrote it, as the input names them")
    status: Status | None = Field(default=None, description="the input's verdict; None: it said none")
    speedups: dict[str, float] = Field(default_factory=dict, description="'eager', 'compile': as the input measured them")


class Disagreement(BaseModel):
    """One solution where our verdict or speedup and the input's differ."""

    id: str
    model: str | None = None
    problem: str
    level: int | None = None
    number: int | None = None
    kind: str = Field(description="'verdict' (correct on one side only) or 'speedup' (one says faster than eager, "
                      "the other slower)")
    claimed_status: Status | None = None
    status: Status | None = None
    code: Code = Code.unknown
    reason: str = ""
    claimed_speedup: float | None = None
    speedup: float | None = None


class ClaimCheck(BaseModel):
    """Our verdicts against the input's, over the solutions that carried one."""

    compared: int = Field(description="solutions judged here that carried a verdict or a speedup")
    agreed: int
    disagreements: list[Disagreement] = Field(default_factory=list)


class Attempt(BaseModel):
    """One attempt at one problem, as the work function for that problem returns it."""

    verdict: Verdict | None = Field(default=None, description="None when nothing was verified (baselines only)")
    timings: dict[str, TimingStats] = Field(default_factory=dict, description="for baselines only; else the verdict's")
    elapsed_s: float = Field(description="seconds from the start of the problem to this attempt's result")
    candidate_path: Path | None = None
    candidate_sha256: str | None = None
    note: str = Field(default="", description="why there is no verdict, when there is none")
    problem_error: str | None = Field(default=None, description="the problem itself failed (its reference or "
                                      "baselines could not be run), not the candidate: why, one line")
    tokens: Usage | None = Field(default=None, description="the model's tokens for the whole problem (its agent run), "
                                 "on the problem's first attempt only; None where no model was called")
    claim: Claim | None = Field(default=None, description="what the input list said of this solution")


class RunEnvironment(BaseModel):
    """Where a measurement was taken."""

    device: str = Field(description="'cpu' or 'cuda:N'")
    gpu_name: str | None = None
    torch_version: str
    triton_version: str | None = None
    kernelloop_version: str
    hostname: str = ""


class _WorkloadsWhereAny(BaseModel):
    """A record whose `workloads` and `slowest_workload` are written only where its problem has workloads:
    the records and summaries of problems without get_workloads read as they did before workloads existed
    (and a shipped report is made again from its raw files bit for bit)."""

    @model_serializer(mode="wrap")
    def _without_empty_workloads(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if not getattr(self, "workloads", None) and not getattr(self, "slowest_workload", None):
            data.pop("workloads", None)
            data.pop("slowest_workload", None)
        return data


class BenchRecord(_WorkloadsWhereAny):
    """One line of results.jsonl: one attempt at one problem."""

    suite: str
    mode: Mode
    job_key: Text = Field(description="identifies the work done (mode, problem, candidates, budget): resume skips known keys")
    problem: Text = Field(description="problem name (file stem)")
    problem_path: Text
    problem_sha256: str
    level: int | None = None
    number: int | None = None
    attempt: int = Field(description="0-based index of the attempt within this problem")
    attempts_in_job: int = Field(default=1, description="records written for this job: fewer found means a torn write")
    status: Status | None = Field(default=None, description="None when nothing was verified")
    reason: Text = ""
    code: Code = Field(default=Code.unknown, description="the verdict's reason code (unknown: no verdict, or an older file)")
    problem_error: Text | None = Field(default=None, description="set when the problem itself failed (its reference or "
                                      "baselines), not the candidate: no status, counts as unsolved, and a rerun into "
                                      "the same directory tries that problem again")
    speedups: dict[str, float] = Field(default_factory=dict, description="over each baseline timed: 'eager', 'compile', ...")
    timings: dict[str, TimingStats] = Field(default_factory=dict)
    max_abs_err: float | None = None
    rel_err: float | None = None
    suspicious: list[Text] = Field(default_factory=list, description="the verifier's signs the result is too good")
    elapsed_s: float = Field(description="seconds from the start of the problem to this attempt's result")
    candidate: Text | None = Field(default=None, description="path of the candidate file")
    candidate_sha256: str | None = None
    tokens: Usage | None = Field(default=None, description="the model's tokens for the whole job (every call of its "
                                 "agent run, as the server reported them), on the job's first record only, so a sum "
                                 "over records counts each call once; None where no model was called")
    claim: Claim | None = Field(default=None, description="a listed solution: its id and what the input said of it")
    workloads: dict[str, WorkloadResult] = Field(default_factory=dict, description="a problem with get_workloads: each "
                                                 "workload's status and speed (speedups then hold their geometric mean)")
    slowest_workload: str = ""
    environment: RunEnvironment
    finished_at: datetime = Field(default_factory=lambda: datetime.now(UTC))

    @property
    def correct(self) -> bool:
        return self.status is Status.correct


class BaselineMetrics(BaseModel):
    """KernelBench's metrics against one baseline, over all problems of the run."""

    fast_p: dict[str, float | None] = Field(description="threshold p -> share of problems correct with speedup > p; "
                                                        "null for p > 0 when no correct problem was timed")
    geomean_speedup: float | None = Field(description="over correct problems with a speedup; None when none")
    timed: int = Field(description="correct problems with a speedup over this baseline")


class ProblemSummary(_WorkloadsWhereAny):
    """One problem, from all its attempts: solved if any attempt is correct; speedups of the best."""

    problem: str
    solved: bool
    attempts: int = Field(description="verified attempts (records with a status)")
    best_status: Status | None = None
    reason: str = ""
    speedups: dict[str, float] = Field(default_factory=dict, description="best correct attempt per baseline")
    time_to_solve_s: float | None = Field(default=None, description="elapsed_s of the first correct attempt")
    time_spent_s: float = 0.0
    baseline_ms: dict[str, float] = Field(default_factory=dict, description="median ms of each baseline, when timed")
    suspicious: list[str] = Field(default_factory=list, description="from its correct attempts: check these by hand")
    tokens: Usage | None = Field(default=None, description="the model's tokens on this problem; None: no model call "
                                 "recorded")
    workloads: dict[str, WorkloadResult] = Field(default_factory=dict, description="the shown attempt's workloads "
                                                 "(its best correct one's), where the problem has get_workloads")
    slowest_workload: str = ""


class BenchSummary(BaseModel):
    """summary.json: the run's headline numbers. Rates are shares in [0, 1]."""

    suite: str
    mode: Mode
    problems: int
    attempts: int = Field(description="verified attempts over all problems")
    solved: int
    correctness_rate: float | None = Field(description="solved / problems; None for baselines only")
    fast_p: dict[str, float | None] = Field(default_factory=dict, description="against eager; null: not timed")
    geomean_speedup: float | None = Field(default=None, description="against eager")
    fast_p_compile: dict[str, float | None] = Field(default_factory=dict)
    geomean_speedup_compile: float | None = None
    by_baseline: dict[str, BaselineMetrics] = Field(default_factory=dict)
    per_problem: list[ProblemSummary] = Field(default_factory=list)
    tokens: Usage | None = Field(default=None, description="every model call of the run's problems, totalled "
                                 "(cost_usd when prices were given for all of them); None: see tokens_note")
    tokens_per_solved: float | None = Field(default=None, description="total tokens (prompt + completion, which "
                                            "includes reasoning) / problems solved; None: see tokens_note")
    tokens_note: str = Field(default="", description="why a token figure is missing: 'no model calls' (candidates or "
                             "baselines), 'not recorded' (agent results from before tokens were), 'no problem solved'")
    environments: list[RunEnvironment] = Field(default_factory=list, description="every distinct place measured")
    claims: ClaimCheck | None = Field(default=None, description="our verdicts against the input's; None: it carried none")
    notes: list[Text] = Field(default_factory=list)
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


# --------------------------------------------------------------------------- results.jsonl


def records_from_attempts(suite: str, mode: Mode, problem: Problem, job_key: str, attempts: Sequence[Attempt],
                          env: RunEnvironment) -> list[BenchRecord]:
    """One record per attempt; speedup over eager is filed under 'eager' with the other baselines."""
    records = []
    for index, attempt in enumerate(attempts):
        verdict = attempt.verdict
        speedups: dict[str, float] = dict(verdict.speedups) if verdict else {}
        if verdict is not None and verdict.speedup is not None:
            speedups.setdefault(EAGER, verdict.speedup)
        records.append(BenchRecord(
            suite=suite, mode=mode, job_key=job_key, problem=problem.name, problem_path=str(problem.path),
            problem_sha256=problem.sha256, level=problem.level, number=problem.number, attempt=index,
            attempts_in_job=len(attempts),
            status=verdict.status if verdict else None, reason=verdict.reason if verdict else attempt.note,
            code=verdict.code if verdict else Code.unknown,
            problem_error=attempt.problem_error,
            speedups=speedups, timings=verdict.timings if verdict else attempt.timings,
            suspicious=list(verdict.suspicious) if verdict else [],
            max_abs_err=verdict.max_abs_err if verdict else None, rel_err=verdict.rel_err if verdict else None,
            elapsed_s=attempt.elapsed_s, candidate=str(attempt.candidate_path) if attempt.candidate_path else None,
            candidate_sha256=attempt.candidate_sha256, tokens=attempt.tokens, claim=attempt.claim,
            workloads=dict(verdict.workloads) if verdict else {},
            slowest_workload=verdict.slowest_workload if verdict else "", environment=env))
    return records


def append_records(path: Path, records: Sequence[BenchRecord]) -> None:
    """Append one job's records in a single write: a crash leaves the file whole or torn at its end."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write("".join(record.model_dump_json() + "\n" for record in records))


def drop_jobs(path: Path, keys: set[str]) -> None:
    """Remove the records of the jobs in `keys` from a results file that read_records has read (so
    every line is a record), so those jobs can run and be appended again: one job's records must
    never appear twice. The other lines are kept as they are."""
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line).get("job_key") not in keys]
    if len(kept) < len(lines):
        path.write_text("".join(kept))


def read_records(path: Path) -> list[BenchRecord]:
    """Every whole job's records in a results file.

    A run killed mid-write leaves a torn last line, or a job with fewer records than it wrote
    (`attempts_in_job`); both are cut from the file so the rerun redoes that job. Any other
    line that is not a record is an error naming the line.
    """
    if not path.is_file():
        return []
    lines = path.read_text().splitlines(keepends=True)
    parsed: list[tuple[str, BenchRecord]] = []
    torn = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed.append((line, BenchRecord.model_validate_json(line)))
        except ValidationError:
            if number == len(lines) and not line.endswith("\n"):
                torn = True
                break
            raise ProblemError(f"{path}:{number}: not a bench record (a results file of another tool or version?)") from None
    counts = Counter(record.job_key for _, record in parsed)
    whole = [(line, record) for line, record in parsed if counts[record.job_key] == record.attempts_in_job]
    if torn or len(whole) < len(parsed):
        path.write_text("".join(line for line, _ in whole))
    return [record for _, record in whole]
