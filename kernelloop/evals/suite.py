"""Run a suite: resolve its problems, match candidates, skip finished work, run the rest in parallel.

The work on one problem is injected, so one loop serves all three ways to run a bench:
scoring candidates (`scoring_work`: a Verifier per device), timing baselines alone
(`baselines_work`), and the agent loop (`agent_work`: a SolveFn per problem). A WorkFactory
opens the work for one device; the loop runs one worker thread per device slot (one per GPU,
or several sharing a GPU for correctness alone, or one on the CPU), each pulling jobs from a
shared queue. Threads suffice: the work waits on sandboxed child processes and on the model
endpoint, not on Python. A job is one problem with its candidates, or one solution of a list
file (`plan_listed`: levels interleaved, so a run stopped at its time cap has some of each).

Results are appended to results.jsonl one job at a time (all its attempts together), and
each record carries a job key; a rerun into the same directory skips the jobs whose key
is already there, so an interrupted or capped run resumes where it stopped. A problem that failed itself
(its reference or baselines could not be run: a ProblemError) is recorded as such, without a
verdict, and tried again by the next run; it never ends the run.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Protocol

import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import kernelloop
from kernelloop.evals import metrics
from kernelloop.evals.attention import attention_problems
from kernelloop.evals.kernelbench import kernelbench_problems, parse_candidate_name, read_eval_results
from kernelloop.evals.listed import ListedSolution
from kernelloop.evals.pace import LOG_EVERY_S, pace
from kernelloop.evals.records import (
    Attempt,
    BenchRecord,
    BenchSummary,
    Claim,
    Mode,
    RunEnvironment,
    append_records,
    drop_jobs,
    read_records,
    records_from_attempts,
)
from kernelloop.evals.report import ReportFiles, write_report
from kernelloop.graph.usage import Usage
from kernelloop.problem import Candidate, Problem, ProblemError, load_dir, parse_subset
from kernelloop.records import TimingStats, Verdict
from kernelloop.safe_text import one_line
from kernelloop.source_file import SourceFileError, read_source_bytes
from kernelloop.tools.verify.pool import PoolError, local_devices, split_device

RESULTS_JSONL = "results.jsonl"
TRAINING_DIR = Path(__file__).parent / "problems" / "training"


# --------------------------------------------------------------------------- suites


@dataclass(frozen=True)
class Suite:
    name: str  # 'attention', 'training', 'kernelbench-level1', or the directory's name
    kind: str  # 'attention' | 'training' | 'kernelbench' | 'directory'
    problems: list[Problem]
    subset: str | None = None  # --problems, when only some were chosen
    skipped: list[str] = field(default_factory=list)  # entries of its dir that are no file to read, one line each


def resolve_suite(suite: str, root: Path | None = None, level: int | None = None,
                  subset: str | None = None) -> Suite:
    """SUITE -> its problems: 'attention', 'training', 'kernelbench' (with root and level), or a directory. In
    a directory, an entry that is no file to read (a pipe, a symlink, a device) is skipped, one line each."""
    skipped: list[str] = []
    if suite == "attention":
        found = Suite("attention", "attention", attention_problems(subset))
    elif suite == "training":  # forward and backward, on workloads (kernelloop/evals/problems/training)
        found = Suite("training", "training", load_dir(TRAINING_DIR, subset))
    elif suite == "kernelbench":
        if root is None or level is None:
            raise ProblemError("the kernelbench suite needs --root (the KernelBench checkout) and --level")
        found = Suite(f"kernelbench-level{level}", "kernelbench",
                      kernelbench_problems(root, level, subset, skipped, trusted=False))
    elif Path(suite).is_dir():  # a directory someone else may have written: its problems run only in the sandbox
        found = Suite(Path(suite).resolve().name, "directory", load_dir(suite, subset, skipped, trusted=False))
    else:
        raise ProblemError(f"unknown suite {suite!r}: use attention, training, kernelbench or a directory of problem files")
    if not found.problems:
        raise ProblemError(f"suite {suite!r} has no problems" + (f" in subset {subset!r}" if subset else "")
                           + (f" ({skipped[0]})" if skipped else ""))
    return Suite(found.name, found.kind, found.problems, subset, skipped)


@dataclass
class CandidateMatch:
    """Candidate files per problem name (exact name first, then KernelBench samples in order)."""

    by_problem: dict[str, list[Path]]
    unmatched: list[Path] = field(default_factory=list)
    claims: dict[Path, Claim] = field(default_factory=dict)  # from the directory's eval_results.json, if any


def match_candidates(problems: Sequence[Problem], directory: Path) -> CandidateMatch:
    """Pair each problem with its candidates in `directory`: `NAME.py` like the problem file, or
    KernelBench's `level_L_problem_N_sample_S_kernel.py` (level checked when the problem has one);
    with KernelBench's eval_results.json beside them, each sample's verdict there is its claim."""
    if not directory.is_dir():
        raise ProblemError(f"{directory}: no such candidates directory")
    by_name = {p.name: p for p in problems}
    ranked: dict[str, list[tuple[int, Path]]] = {p.name: [] for p in problems}
    unmatched: list[Path] = []
    for path in sorted(directory.glob("*.py")):
        kb = parse_candidate_name(path.name)
        if kb is None:
            target = by_name.get(path.stem)
            rank = -1
        else:
            target = next((p for p in problems if p.number == kb.problem and p.level in (None, kb.level)), None)
            rank = kb.sample
        if target is None:
            unmatched.append(path)
        else:
            ranked[target.name].append((rank, path))
    said = read_eval_results(directory)
    claims = {path: said[(kb.problem, kb.sample)].model_copy(update={"id": path.name}) for path in directory.glob("*.py")
              if (kb := parse_candidate_name(path.name)) is not None and (kb.problem, kb.sample) in said}
    return CandidateMatch({name: [path for _, path in sorted(found)] for name, found in ranked.items()}, unmatched,
                          claims)


# --------------------------------------------------------------------------- the work on one problem


@dataclass(frozen=True)
class Job:
    problem: Problem
    key: str
    candidates: tuple[Path, ...] = ()
    claims: tuple[Claim | None, ...] = ()  # what the input said of each candidate (a list's entry, eval_results.json)


ProblemWork = Callable[[Job], list[Attempt]]
WorkFactory = Callable[[str], AbstractContextManager[ProblemWork]]  # device ('cpu', 'cuda:N') -> work there
TimeBaselinesFn = Callable[[Problem, str], dict[str, TimingStats]]  # (problem, device) -> timings by name


class VerifierLike(Protocol):
    def verify(self, candidate: Candidate, problem: Problem) -> Verdict: ...

    def close(self) -> None: ...


class SolvedAttempt(Protocol):
    """One verified attempt of the agent loop."""

    @property
    def verdict(self) -> Verdict: ...

    @property
    def elapsed_s(self) -> float: ...  # seconds from the start of the solve to this verdict

    @property
    def kernel_path(self) -> Path | None: ...


class SolveOutcome(Protocol):
    @property
    def attempts(self) -> Sequence[SolvedAttempt]: ...

    @property
    def tokens(self) -> Usage | None: ...  # every model call of the run, as the server reported them


class SolveFn(Protocol):
    """The agent loop on one problem, on one device, within budget_s seconds."""

    def __call__(self, problem: Problem, budget_s: float, device: str) -> SolveOutcome: ...


def scoring_work(make_verifier: Callable[[str], VerifierLike]) -> WorkFactory:
    """Verify each job's candidates with one verifier per device (its warm worker and reference cache)."""

    @contextmanager
    def open_work(device: str) -> Iterator[ProblemWork]:
        verifier = make_verifier(device)
        try:
            yield lambda job: _score(verifier, job)
        finally:
            verifier.close()

    return open_work


def _score(verifier: VerifierLike, job: Job) -> list[Attempt]:
    if not job.candidates:
        return [Attempt(elapsed_s=0.0, note="no candidate file for this problem")]
    started = time.perf_counter()
    attempts = []
    for number, path in enumerate(job.candidates, start=1):
        try:  # a pipe, a link, a device or a huge file in the candidates dir: this item's error, one line
            candidate = Candidate.from_file(path)
        except ProblemError as exc:
            attempts.append(Attempt(elapsed_s=time.perf_counter() - started, candidate_path=path,
                                    note=f"candidate file not read: {exc}"))
            continue
        try:
            verdict = verifier.verify(candidate, job.problem)
        except (RecursionError, MemoryError) as exc:  # a parse that got past its bounds: this item's, not the run's
            attempts.append(Attempt(elapsed_s=time.perf_counter() - started, candidate_path=path,
                                    candidate_sha256=candidate.sha256,
                                    note=f"candidate not judged: {type(exc).__name__} in the verifier"))
            continue
        except ProblemError as exc:
            # The problem's own failure (its reference could not be made): the verdicts so far
            # stay, and the candidates left would only fail the same way, so they are not run.
            left = len(job.candidates) - number
            attempts.append(problem_failed(exc, time.perf_counter() - started, path, candidate.sha256,
                                           f"; its {left} other candidate(s) were not run" if left else ""))
            break
        attempts.append(Attempt(verdict=verdict, elapsed_s=time.perf_counter() - started,
                                candidate_path=path, candidate_sha256=candidate.sha256))
    for attempt, claim in zip(attempts, job.claims):  # one attempt per candidate tried, in order
        attempt.claim = claim
    return attempts


def problem_failed(exc: ProblemError, elapsed_s: float, path: Path | None = None, sha256: str | None = None,
                   more: str = "") -> Attempt:
    """The attempt that records a problem's own failure: no verdict (the candidate was not judged),
    counted as unsolved, and retried by the next run into the same directory."""
    return Attempt(elapsed_s=elapsed_s, candidate_path=path, candidate_sha256=sha256,
                   note=f"problem error: {exc}{more}", problem_error=str(exc))


def baselines_work(time_baselines: TimeBaselinesFn) -> WorkFactory:
    """Time eager, torch.compile and the problem's own baselines; no candidate, no model."""

    @contextmanager
    def open_work(device: str) -> Iterator[ProblemWork]:
        def work(job: Job) -> list[Attempt]:
            started = time.perf_counter()
            try:
                timings = time_baselines(job.problem, device)
            except ProblemError as exc:  # this problem's baselines failed: the others are still timed
                return [problem_failed(exc, time.perf_counter() - started)]
            return [Attempt(timings=timings, elapsed_s=time.perf_counter() - started, note="baselines timed")]

        yield work

    return open_work


def agent_work(solve: SolveFn, budget_s: float) -> WorkFactory:
    """Run the agent loop on each problem within budget_s; every verified attempt becomes a record."""

    @contextmanager
    def open_work(device: str) -> Iterator[ProblemWork]:
        def work(job: Job) -> list[Attempt]:
            outcome = solve(job.problem, budget_s, device)
            attempts = [Attempt(verdict=a.verdict, elapsed_s=a.elapsed_s, candidate_path=a.kernel_path,
                                candidate_sha256=_file_sha256(a.kernel_path)) for a in outcome.attempts]
            attempts = attempts or [Attempt(elapsed_s=budget_s, note="the agent loop verified no attempt")]
            attempts[0].tokens = outcome.tokens  # the run's tokens, once per problem: a sum over records counts each call once
            return attempts

        yield work

    return open_work


def _file_sha256(path: Path | None, what: str = "kernel") -> str | None:
    """The file's hash, read the careful way (source_file.py); None when it can't be read."""
    if path is None:
        return None
    try:
        return hashlib.sha256(read_source_bytes(path, what)).hexdigest()
    except SourceFileError:
        return None


# --------------------------------------------------------------------------- devices and environment


def resolve_devices(device: str = "auto") -> list[str]:
    """The pool's device rule ('auto' -> every GPU or ['cpu'], 'cuda' -> every GPU, 'cuda:N', 'cpu');
    a bad device is a ProblemError here, so bench reports it as bad usage."""
    try:
        return local_devices(device)
    except PoolError as exc:
        raise ProblemError(str(exc)) from None


def _package_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def capture_environment(device: str) -> RunEnvironment:
    kind, index = split_device(device)
    gpu_name = torch.cuda.get_device_name(index or 0) if kind == "cuda" else None
    return RunEnvironment(device=device, gpu_name=gpu_name, torch_version=torch.__version__,
                          triton_version=_package_version("triton"), kernelloop_version=kernelloop.__version__,
                          hostname=socket.gethostname())


# --------------------------------------------------------------------------- resume


def job_key(mode: Mode, problem: Problem, candidates: Sequence[Path] = (), budget_s: float | None = None,
            solution: str | None = None) -> str:
    """Same mode, problem source, candidate sources and budget (and listed solution id) -> same key: the work is done."""
    # An unreadable candidate (a pipe, a link) counts by its name: reading it would block or follow it.
    parts = [mode.value, problem.sha256, [_file_sha256(p, "candidate") or f"unreadable {p.name}" for p in candidates],
             budget_s if mode is Mode.agent else None]
    if solution is not None:  # two listed solutions with the same code are two jobs, each with its own claim
        parts.append(solution)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


# --------------------------------------------------------------------------- the run loop


class BenchStopped(RuntimeError):
    """A worker failed outside any one candidate's verdict (the sandbox, the verifier itself): the
    bench stops; what was written stays, and a rerun with the same --out goes on from there."""


@dataclass
class _Finished:
    job: Job | None
    records: list[BenchRecord] = field(default_factory=list)  # empty when `error` is set
    error: BaseException | None = None


def _worker(device: str, open_work: WorkFactory, suite: str, mode: Mode, jobs: queue.Queue,
            finished: queue.Queue, stop: threading.Event) -> None:
    """Work through the queue on one device; puts one _Finished per job, then None when it stops."""
    job = None
    try:
        env = capture_environment(device)
        with open_work(device) as work:
            while not stop.is_set():
                try:
                    job = jobs.get_nowait()
                except queue.Empty:
                    return
                started = time.perf_counter()
                try:
                    attempts = work(job)
                except ProblemError as exc:  # a broken problem fails alone, not the run
                    attempts = [problem_failed(exc, time.perf_counter() - started)]
                finished.put(_Finished(job, records_from_attempts(suite, mode, job.problem, job.key, attempts, env)))
                job = None
    except BaseException as exc:  # carried to the main thread, which re-raises it
        finished.put(_Finished(job, error=exc))
    finally:
        finished.put(None)


def job_units(job: Job) -> int:
    """What a job counts for in the progress: its candidates (a job with none still takes a turn)."""
    return max(1, len(job.candidates))


@dataclass
class JobsRun:
    records: list[BenchRecord]  # appended to results.jsonl as each job finished
    left: int = 0  # jobs not finished: the time cap (stop_after_s) came first, or an interrupt
    interrupted: bool = False  # Ctrl-C: the running jobs were abandoned, what finished is kept


def run_jobs(jobs: Sequence[Job], open_work: WorkFactory, devices: Sequence[str], results_path: Path,
             suite: str, mode: Mode, show_progress: bool = True, already_done: int = 0,
             stop_after_s: float | None = None) -> JobsRun:
    """Run the jobs over one worker per device slot; append each problem's records as it finishes.

    already_done: candidates found done at the start (the progress counts candidates). After
    stop_after_s seconds no job starts; those running finish and are written, the rest are left
    for a rerun. Ctrl-C (KeyboardInterrupt) stops it at once: what finished is kept, the running
    jobs are abandoned for a rerun. An error other than a ProblemError stops the run and is raised
    here; what finished before it is already in results.jsonl, so a rerun resumes after it.
    """
    if not jobs:
        return JobsRun([])
    pending: queue.Queue = queue.Queue()
    for job in jobs:
        pending.put(job)
    finished: queue.Queue = queue.Queue()
    stop = threading.Event()
    workers = [threading.Thread(target=_worker, name=f"bench-{device}-{index}", daemon=True,
                                args=(device, open_work, suite, mode, pending, finished, stop))
               for index, device in enumerate(devices[: len(jobs)])]
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               TimeElapsedColumn(), TextColumn("{task.fields[eta]}")]
    total = already_done + sum(job_units(job) for job in jobs)
    stderr = Console(stderr=True)
    log_lines = show_progress and not stderr.is_terminal  # a log file: a plain pace line now and then
    new_records: list[BenchRecord] = []
    started = time.monotonic()
    deadline = None if stop_after_s is None else started + stop_after_s
    with Progress(*columns, console=stderr, disable=not show_progress or log_lines) as progress:
        task = progress.add_task(escape(f"{suite} ({mode.value})"), total=total, completed=already_done,
                                 rate="-/min", eta="eta -")
        for worker in workers:
            worker.start()
        last_line = started
        alive, done, units = len(workers), 0, 0
        interrupted = False
        try:
            try:
                while done < len(jobs):
                    if deadline is not None and not stop.is_set() and time.monotonic() >= deadline:
                        stop.set()  # no job starts now; the running ones finish and are written
                    try:
                        item: _Finished | None = finished.get(timeout=1.0)
                    except queue.Empty:
                        continue
                    if item is None:
                        alive -= 1
                        if alive == 0:
                            if stop.is_set():
                                break
                            raise BenchStopped(f"bench workers stopped with {len(jobs) - done} problem(s) left")
                        continue
                    if item.error is not None:
                        where = f" on {item.job.problem.name}" if item.job else ""
                        raise BenchStopped(f"bench stopped{where}: {type(item.error).__name__}: {item.error}") from item.error
                    append_records(results_path, item.records)
                    new_records.extend(item.records)
                    done += 1
                    units += job_units(item.job) if item.job else 1
                    now = time.monotonic()
                    state = pace(units, already_done, total, now - started)
                    last = item.records[-1]
                    outcome = last.status.value if last.status else one_line(last.reason, 40)
                    # The bar's text is read as markup: a name or a reason from elsewhere goes in escaped.
                    progress.update(task, completed=state.done, rate=state.rate_text, eta=state.eta_text,
                                    description=escape(one_line(f"{suite}: {last.problem} {outcome}", 200)))
                    if log_lines and now - last_line >= LOG_EVERY_S:
                        stderr.print(escape(f"{suite}: {state.line()}"), highlight=False)
                        last_line = now
            except KeyboardInterrupt:  # Ctrl-C: what finished is written; the running jobs are abandoned
                interrupted = True
            if log_lines:  # the last word, also when the time cap ended the run
                state = pace(units, already_done, total, time.monotonic() - started)
                stopped = ", interrupted" if interrupted else ", stopped at the time cap" if done < len(jobs) else ""
                stderr.print(escape(f"{suite}: {state.line()}{stopped}"), highlight=False)
        finally:
            stop.set()
    return JobsRun(new_records, left=len(jobs) - done, interrupted=interrupted)


# --------------------------------------------------------------------------- one bench, end to end


@dataclass
class BenchResult:
    summary: BenchSummary
    files: ReportFiles
    results_path: Path
    ran: int  # jobs run now (problems; listed solutions one each)
    skipped: int  # jobs found finished in results.jsonl
    left: int = 0  # jobs not run: the time cap came first, or an interrupt; a rerun goes on with them
    interrupted: bool = False  # Ctrl-C stopped it


def plan_jobs(problems: Sequence[Problem], mode: Mode, candidates: CandidateMatch | None = None,
              budget_s: float | None = None) -> list[Job]:
    jobs = []
    claims = candidates.claims if candidates else {}
    for problem in problems:
        files = tuple(candidates.by_problem.get(problem.name, [])) if candidates else ()
        jobs.append(Job(problem, job_key(mode, problem, files, budget_s), files, tuple(claims.get(f) for f in files)))
    return jobs


@dataclass(frozen=True)
class Listed:
    """A list file's solutions, their problems and where bench wrote their code."""

    solutions: list[ListedSolution]
    problems: dict[tuple[int, int], Problem]
    files: dict[str, Path]  # solution id -> its candidate file


def plan_listed(listed: Listed, mode: Mode) -> list[Job]:
    """One job per listed solution whose problem was found, levels interleaved (level 1's first
    problem, level 2's, level 3's, then each level's second ...) so a run cut short by its time
    cap has judged some of every level."""
    by_level: dict[int, list[ListedSolution]] = {}
    for solution in sorted(listed.solutions, key=lambda s: (s.level, s.number, s.claim.id)):
        if (solution.level, solution.number) in listed.problems:
            by_level.setdefault(solution.level, []).append(solution)
    order = [s for row in itertools.zip_longest(*by_level.values()) for s in row if s is not None]
    jobs = []
    for solution in order:
        problem, path = listed.problems[(solution.level, solution.number)], listed.files[solution.claim.id]
        jobs.append(Job(problem, job_key(mode, problem, (path,), solution=solution.claim.id), (path,), (solution.claim,)))
    return jobs


def run_bench(suite: Suite, mode: Mode, open_work: WorkFactory, devices: Sequence[str], out_dir: Path,
              candidates_dir: Path | None = None, budget_s: float | None = None,
              show_progress: bool = True, listed: Listed | None = None,
              stop_after_s: float | None = None) -> BenchResult:
    """Plan, skip what results.jsonl already holds, run the rest, then write summary, report and plots.
    With `listed`, the jobs are its solutions (candidates_dir is not read); stop_after_s: run_jobs."""
    match = match_candidates(suite.problems, candidates_dir) if candidates_dir is not None and listed is None else None
    jobs = plan_listed(listed, mode) if listed is not None else plan_jobs(suite.problems, mode, match, budget_s)
    results_path = out_dir / RESULTS_JSONL
    previous = read_records(results_path)
    # A problem that failed itself (its reference, say, on a machine or verifier that could not
    # make it) is tried again: its old records go, so its new ones are its only ones.
    retried = {record.job_key for record in previous if record.problem_error} & {job.key for job in jobs}
    if retried:
        drop_jobs(results_path, retried)
        previous = [record for record in previous if record.job_key not in retried]
    done_keys = {record.job_key for record in previous}
    todo = [job for job in jobs if job.key not in done_keys]
    run = run_jobs(todo, open_work, devices, results_path, suite.name, mode, show_progress,
                   already_done=sum(job_units(job) for job in jobs if job.key in done_keys),
                   stop_after_s=stop_after_s)
    keys = {job.key for job in jobs}
    # Interrupted, a record may be in results.jsonl that the run did not get to count: the file says what finished.
    finished = read_records(results_path) if run.interrupted else [*previous, *run.records]
    records = [r for r in finished if r.job_key in keys]
    notes = [*_notes(records, match, len(jobs) - len(todo), suite.subset),
             *(f"problem file not read: {line}" for line in suite.skipped)]
    if run.left:
        why = "it was interrupted (Ctrl-C)" if run.interrupted else "the time cap came first"
        notes.append(f"{run.left} of {len(jobs)} job(s) not run yet: {why}; a rerun into "
                     "the same directory goes on with them")
    names = [p.name for p in suite.problems]
    if run.left:  # a partial run is scored over the problems it has judged, not counted unsolved for the rest
        judged = {r.problem for r in records}
        names = [name for name in names if name in judged] or names
    summary = metrics.summarize(suite.name, mode, names, records, notes=notes)
    files = write_report(out_dir, summary, attention=suite.kind == "attention")
    ran = len(todo) - run.left
    return BenchResult(summary, files, results_path, ran=ran, skipped=len(jobs) - len(todo), left=run.left,
                       interrupted=run.interrupted)


def _problem_number(path: Path) -> int | None:
    """The problem number a candidate file names: KernelBench's sample name, or a leading 'N_'."""
    kb = parse_candidate_name(path.name)
    if kb is not None:
        return kb.problem
    head = path.stem.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def _notes(records: Sequence[BenchRecord], match: CandidateMatch | None, skipped: int,
           subset: str | None = None) -> list[str]:
    notes = []
    if skipped:
        notes.append(f"{skipped} problem(s) resumed from an earlier run into the same directory")
    if any(r.environment.device == "cpu" for r in records):
        notes.append("some results are from the CPU (Triton interpreter): correctness only, no speed measured")
    if match is not None and match.unmatched:
        # With --problems, a candidate for a problem left out is outside the selection, not a stray file.
        chosen = parse_subset(subset) if subset else None
        outside = [p for p in match.unmatched if chosen is not None and _problem_number(p) not in (None, *chosen)]
        stray = [p for p in match.unmatched if p not in outside]
        if outside:
            notes.append(f"{len(outside)} candidate file(s) outside the selection (--problems {subset}), not scored")
        if stray:
            names = ", ".join(p.name for p in stray[:10])
            notes.append(f"{len(stray)} candidate file(s) matched no problem: {names}")
    # candidates mode with no candidate path and no problem error: no file was found for it
    missing = sorted({r.problem for r in records if r.mode is Mode.candidates and r.status is None
                      and r.candidate is None and r.problem_error is None})
    if missing:
        notes.append(f"{len(missing)} problem(s) had no candidate file (counted as unsolved)")
    failed = sorted({r.problem for r in records if r.problem_error})
    if failed:
        notes.append(f"{len(failed)} problem(s) could not be judged: the problem itself failed (its reference or "
                     f"baselines), not a candidate; counted as unsolved, tried again on a rerun: "
                     f"{', '.join(failed[:10])}")
    return notes
