"""The verifier: the part everything else trusts.

verify(candidate, problem) -> Verdict. Static rules first (a cheap lint: nothing runs for a broken
rule). Then, for every verification, fresh secret seeds: the trusted reference job (its own
sandbox worker, no candidate code) makes the inputs and the reference's outputs on them, and
only the inputs reach the candidate's child. The parent drives that child over a channel it owns:
trials, a compare here, timing only for outputs that were right (the baselines timed in the
trusted job, the candidate's own event times checked against this process's clock; every timed
call on fresh values, and outputs of timed calls picked at random checked here), then one more
call on fresh values written into buffers the candidate already knows, compared here too.
Everything the candidate's process reports (its kernels, ops, launches, event times, input
checks) is a claim; what decides a verdict is what this process computed or observed.
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import TypedDict

import torch

from kernelloop.errors import error_line
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.results import STATUS_OF, Code, InputSet, Status, TimingStats, Verdict, code_of, rejected
from kernelloop.sandbox import redact
from kernelloop.sandbox.runner import JobOutcome, JobSession, Zygote, new_job_dir, remove_job_dir
from kernelloop.sandbox.safe_io import JobDir, UnsafeFileError
from kernelloop.tools.profile.timing import speedup_from_rounds
from kernelloop.tools.verify import budget, interpreter_order, trusted_cache, workers
from kernelloop.tools.verify.compare import Comparison, compare_device, compare_outputs, tolerance_for
from kernelloop.tools.verify.localise import describe, irregular, localise
from kernelloop.tools.verify.output_watch import FLOOD_BYTES, OutputWatch
from kernelloop.tools.verify.reference_server import Made, ReferenceServer, problem_file
from kernelloop.tools.verify.speed import SpeedJudgement, summarize_all
from kernelloop.tools.verify.static_check import first_broken_rule
from kernelloop.tools.verify.tensor_files import load_sets
from kernelloop.tools.verify.timed_checks import TimedChecks, TimedFailure
from kernelloop.tools.verify.timing_driver import Rehearsed, drive_timing
from kernelloop.workspace import workspace_dir

DEFAULT_TRIALS = 3
CPU_MEMORY_LIMIT_BYTES = 16 << 30
OUTPUT_FILE_SLACK_BYTES = 1 << 20  # a saved tensor list is its data plus a little framing
CANDIDATE_MIN_FILE_BYTES = 512 << 20  # a kernel build's objects and caches; no file of a job outgrows it but its outputs
SCRUTINY_SETS = 4  # more fresh sets for a kernel under the reference's roofline
DONE_WAIT_S = 5.0  # for the candidate's last report once told it is done; then its process group is killed
CANDIDATE_PHASES = ("trials", "timing", "fresh")


class _VerdictBase(TypedDict, total=False):
    """The Verdict fields shared by every verdict of one verification (splatted into Verdict and rejected)."""

    device: str
    own_kernels: list[str]
    library_ops: list[str]
    cost_s: dict[str, float]


class _Timeouts(TypedDict, total=False):
    """The Verifier's time limits, where a caller sets them."""

    compile_timeout_s: float
    run_timeout_s: float


def split_device(device: str) -> tuple[str, int | None]:
    """'cuda:1' -> ('cuda', 1); 'cpu' -> ('cpu', None): a Verifier's (device, gpu_index)."""
    kind, _, index = device.partition(":")
    return kind, int(index) if index else None


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use cpu, cuda or auto")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but torch sees no CUDA GPU here")
    return device


MAX_CLAIMED_SECONDS = 1e10  # a number the child reports above this (or not finite) is dropped, not believed
MAX_CLAIMED_KEYS = 64  # seconds a child may report; the rest are dropped (thousands would bloat every verdict)
# cost_s entries the parent measures (with phase_*): a child's claim of one is dropped, never believed
PARENT_COSTS = frozenset({"compare_s", "reference_s", "timing_s", "baselines_import_s", "baselines_build_s", "child_s",
                          "total_s", "exit_s", "fixed_s", "baselines_cached_at", "baselines_cache_stored",
                          "trusted_worker_import_s", "candidate_worker_import_s"})
CHILD_COSTS = ("first_call_s", "trials_s", "timing_setup_s")  # the child's own work, left out of fixed_s


def claimed_seconds(raw: object, names: Collection[str] | None = None) -> dict[str, float]:
    """The {name: seconds} a child reports (its costs), keeping only finite, plausible numbers, at most
    MAX_CLAIMED_KEYS of them; `names`: only these. Never one the parent measures itself (PARENT_COSTS,
    phase_*): a claim may add to the verdict's cost report, never overwrite it."""
    if not isinstance(raw, dict):
        return {}
    kept: dict[str, float] = {}
    for key, value in raw.items():
        name = str(key)[:64]
        if (names is None or name in names) and name not in PARENT_COSTS and not name.startswith("phase_") \
                and isinstance(value, (int, float)) and not isinstance(value, bool) \
                and 0 <= value < MAX_CLAIMED_SECONDS:  # NaN fails too
            kept[name] = float(value)
            if len(kept) == MAX_CLAIMED_KEYS:
                break
    return kept


def claimed_names(raw: object) -> list[str]:
    """Names the child reports (ops, kernels): a list of strings, or the keys of a dict; else none."""
    items = raw.keys() if isinstance(raw, dict) else raw if isinstance(raw, list) else []
    return [item[:200] for item in items if isinstance(item, str)][:10_000]


def secret_seeds(count: int) -> list[int]:
    """Seeds nobody can know ahead: a candidate can't have memorised answers for their inputs."""
    return [secrets.randbelow(2**31 - 1) + 1 for _ in range(count)]


def output_specs(outputs: list[list]) -> list[list]:
    """Shapes and dtypes of each set's outputs (not their values): the child poisons blocks that size."""
    return [[[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in outs if isinstance(t, torch.Tensor)]
            for outs in outputs]


def _nbytes(outputs: list) -> int:
    return sum(t.numel() * t.element_size() for t in outputs if isinstance(t, torch.Tensor))


def precheck(candidate: Candidate, device: str, static_checks: bool = True) -> Verdict | None:
    """The verdict a candidate gets before anything runs (it does not parse, or it breaks a static
    rule), else None. Cheap: the pool runs it on CPU workers before a GPU is taken."""
    found = candidate.syntax_problem()
    if found:
        code, problem_error = found
        kind = "syntax" if code is Code.syntax else "modelnew"
        return Verdict(status=Status.compile_error, reason=f"{kind}: {problem_error}", code=code, device=device,
                       feedback=f"The candidate did not parse: {problem_error}.")
    broken = first_broken_rule(candidate.source) if static_checks else None
    return rejected(*broken, device=device) if broken else None


PHASE_WORDS = {"compile": "loading, compiling and making its first call", "trials": "running the trials",
               "timing": "being timed", "fresh": "running on fresh inputs"}


def _while(phase: str) -> str:
    return PHASE_WORDS.get(phase, phase)


LIMIT_SIGNALS = {"SIGXCPU": "the CPU-time limit", "SIGXFSZ": "the file-size limit"}


def _signal_name(code: int) -> str:
    try:
        name = signal.Signals(-code).name
        return f"{name}: hit {LIMIT_SIGNALS[name]}" if name in LIMIT_SIGNALS else name
    except ValueError:
        return f"signal {-code}"


class Laps:
    """Where one verification's wall time goes, phase by phase: each `lap(name)` adds the time since
    the last lap to `name`, so the phases add up to the whole."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.s: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.s[name] = self.s.get(name, 0.0) + now - self.last
        self.last = now

    def costs(self) -> dict[str, float]:
        return {f"phase_{name}_s": value for name, value in self.s.items()}


PHASE_NAMES = {  # the phases of Verdict.cost_s ("phase_<name>_s"), in order, in words
    "precheck": "static rules",
    "workers": "waiting for the sandbox workers to start (imports, preloads)",
    "reference": "trusted reference job: problem import, inputs and reference outputs",
    "candidate": "candidate's child: import, compile and first call, trials, decoy runs, saving outputs",
    "compare": "parent: loading and comparing outputs",
    "baselines": "trusted job: eager and torch.compile baselines set up (compile)",
    "timing": "timing rounds and the back-to-back check, both children",
    "profile": "candidate's profile",
    "fresh": "fresh inputs: made, run, compared",
    "finish": "candidate's last report and exit, clean-up",
    "cache": "trusted job: baselines timed alone for the cross-process cache",
}
CACHE_ROUNDS = 50  # rounds of the baselines alone, timed for a cache record


class Verifier:
    """Verifies candidates one at a time on one device: a warm sandbox worker for candidates, and
    another for the trusted reference job of the problem at hand."""

    def __init__(self, device: str = "auto", workspace: Path | None = None, strict: bool = False,
                 time_it: bool = True, compile_timeout_s: float = 180.0, run_timeout_s: float = 300.0,
                 trials: int = DEFAULT_TRIALS, gpu_index: int | None = None, keep_jobs: bool = False,
                 full_baselines: bool = False, static_checks: bool = True, standby: bool = True,
                 gpu_compare: bool = True, fresh_timing: bool = True, rehearse_timing: bool = False):
        self.device = resolve_device(device)
        self.strict = strict
        self.time_it = time_it and self.device == "cuda"
        # Every timed call on fresh values, outputs of calls picked at random checked (fresh_values.py,
        # timed_checks.py); off only in benchmarks/fresh_values.py, to time as before them.
        self.fresh_timing = fresh_timing
        # The CPU, for tests: the timing phase's conversation (fresh values, kept outputs, checks of
        # calls picked at random) on host clocks; no speed comes of it.
        self.rehearse = rehearse_timing and self.device == "cpu"
        self.compile_timeout_s = compile_timeout_s
        self.run_timeout_s = run_timeout_s
        self.trials = trials
        self.gpu_index = gpu_index
        self.keep_jobs = keep_jobs
        self.full_baselines = full_baselines  # adds torch.compile max-autotune (minutes of tuning)
        self.static_checks = static_checks  # off only in tests that prove the dynamic checks stand alone
        self.standby = standby  # off only to measure what a prepared child saves (benchmarks/verifier_bench.py)
        self.workspace = workspace_dir(workspace)
        # Where its files go, and its two workers' specs (workers.py: dirs, caches, preloads by role).
        self.layout = workers.layout(self.device, self.workspace, gpu_index, standby, self.time_it)
        self.root, self.trusted_root = self.layout.root, self.layout.trusted_root
        self.trusted_cache_dir = self.layout.trusted_cache_dir
        # Baseline timings kept across processes (trusted_cache.py): only where no candidate can write them.
        self.baseline_cache = (trusted_cache.BaselineCache(self.layout.cache_root)
                               if self.layout.cache_root is not None else None)
        self.compare_on = compare_device(self.device, gpu_index, gpu_compare)
        self._zygote: Zygote | None = None
        self._trusted_zygote: Zygote | None = None
        self._problems_zygote: Zygote | None = None  # reference jobs of problems from outside (workers.py)
        self._server: ReferenceServer | None = None
        self._parent_costs: dict[str, float] = {}
        self._overlapped: dict[str, float] = {}  # costs beside the critical path (not in fixed_s)
        self._workers_noted: set[Zygote] = set()
        self._laps = Laps()
        self._cache_state: dict = {}  # this verification's baseline-cache lookup (key, record, what to store)
        self._conditions: dict | None = None  # what the cache key holds of this machine (GPU, driver, versions)

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._server is not None:
            self._server.close(self.keep_jobs)
            self._server = None
        for wait in (False, True):  # both told first, so they stop at once
            for zygote in (self._zygote, self._trusted_zygote, self._problems_zygote):
                if zygote is not None:
                    zygote.close(wait=wait)
        self._zygote = self._trusted_zygote = self._problems_zygote = None

    @staticmethod
    def _worker(existing: Zygote | None, spec: workers.WorkerSpec, wait: bool = True) -> Zygote:
        if existing is not None and existing.alive():
            if wait:
                existing.wait_ready()
            return existing
        if existing is not None:
            existing.close()
        # The workspace (checkpoint DB, run dirs, the trusted job's files) is hidden from jobs where bubblewrap runs.
        return workers.take(spec, wait=wait)

    def start_workers(self, trusted: bool = True) -> float:
        """Start both sandbox workers at once (the candidates', and the reference jobs' for the
        user's own problems or, `trusted` False, for problems from outside), waiting for neither
        (the first use waits); returns the seconds this took (a prestarted worker is taken as it
        is). This process's own CUDA context, which it compares on, is made meanwhile (a fraction
        of a second, in a thread)."""
        started = time.perf_counter()
        if self.compare_on.type == "cuda" and not torch.cuda.is_initialized():
            threading.Thread(target=torch.zeros, args=(1,), kwargs={"device": self.compare_on}, daemon=True).start()
        if trusted:
            self._trusted_zygote = self._worker(self._trusted_zygote, self.layout.trusted, wait=False)
        else:
            self._problems_zygote = self._worker(self._problems_zygote, self.layout.problems, wait=False)
        self._zygote = self._worker(self._zygote, self.layout.candidate, wait=False)
        return time.perf_counter() - started

    @property
    def zygote(self) -> Zygote:
        """The candidates' sandbox worker."""
        self._zygote = self._worker(self._zygote, self.layout.candidate)
        return self._zygote

    @property
    def trusted_zygote(self) -> Zygote:
        """The sandbox worker of the reference jobs and baselines: no candidate code runs in it."""
        self._trusted_zygote = self._worker(self._trusted_zygote, self.layout.trusted)
        return self._trusted_zygote

    def reference_zygote(self, problem: Problem) -> Zygote:
        """The worker of `problem`'s reference jobs: the trusted one for the user's own problems;
        for a problem from outside, one that can write nothing a later job or this process loads."""
        if problem.trusted:
            return self.trusted_zygote
        self._problems_zygote = self._worker(self._problems_zygote, self.layout.problems)
        return self._problems_zygote

    def _reference_root(self, problem: Problem) -> Path:
        return self.trusted_root if problem.trusted else self.layout.problems.work_dir

    def _note_worker_imports(self) -> None:
        """Each worker's own import time (its modules and preloads, as it said when ready), in the
        cost of the first verification it serves: what a cold start waits for beside this process."""
        for role, zygote in (("trusted", self._trusted_zygote), ("trusted", self._problems_zygote),
                             ("candidate", self._zygote)):
            if zygote is not None and zygote not in self._workers_noted:
                self._workers_noted.add(zygote)
                self._overlapped[f"{role}_worker_import_s"] = zygote.import_s

    def _job(self, kind: str, **fields) -> dict:
        job = {"kind": kind, "device": self.device, "full_baselines": self.full_baselines, **fields}
        if self.device == "cpu":
            job["memory_limit_bytes"] = CPU_MEMORY_LIMIT_BYTES
        return job

    # -- reference --------------------------------------------------------------------------
    def server(self, problem: Problem) -> ReferenceServer:
        """The trusted job for `problem`, kept while the problems asked for stay the same."""
        if self._server is not None and (self._server.problem.sha256 != problem.sha256 or not self._server.alive()
                                         or self._server.problem.trusted != problem.trusted):
            self._server.close(self.keep_jobs)
            self._server = None
        if self._server is None:
            self._server = ReferenceServer(self.reference_zygote(problem), problem, self._reference_root(problem),
                                           self._job("reference"),
                                           self.run_timeout_s, outputs_device=self.compare_on)
        return self._server

    def trial_count(self, server: ReferenceServer) -> int:
        """`trials`, or fewer where the problem's sets are huge (one trial set for an output over
        1 GiB); a problem whose sets can't fit even so is a one-line ProblemError saying why."""
        output_bytes, input_bytes = server.output_bytes or 0, server.input_bytes or 0
        device_total = torch.cuda.get_device_properties(self.compare_on).total_memory \
            if self.compare_on.type == "cuda" else None
        host_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        budget_bytes = int(min(device_total or host_total, host_total) * budget.DEVICE_SHARE / 2)
        trials = budget.trial_sets_for(output_bytes, self.trials, budget_bytes, input_bytes)
        too_big = budget.check_fits(output_bytes, trials + budget.FRESH_SETS, device_total, host_total, input_bytes)
        if too_big:
            raise ProblemError(f"{server.problem.path}: {too_big}")
        return trials

    def donor_count(self, server: ReferenceServer, trials: int) -> int:
        """Input sets made only for fresh values to be drawn from (fresh_values.py): one where a
        problem gets a single trial set and one more set of its inputs still fits, else none."""
        if trials >= 2:
            return 0
        device_total = torch.cuda.get_device_properties(self.compare_on).total_memory \
            if self.compare_on.type == "cuda" else None
        host_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        fits = budget.check_fits(server.output_bytes or 0, trials + budget.FRESH_SETS, device_total, host_total,
                                 server.input_bytes or 0, donor_sets=1) is None
        return 1 if fits else 0

    # -- candidate --------------------------------------------------------------------------
    def verify(self, candidate: Candidate, problem: Problem) -> Verdict:
        started = time.perf_counter()
        laps = self._laps = Laps()
        self._cache_state = {}
        early = precheck(candidate, self.device, self.static_checks)
        laps.lap("precheck")
        if early is not None:  # the same verdict the pool's pre-check gives, nothing added
            return early
        self.start_workers(problem.trusted)  # both at once: the candidates' worker starts while the reference is made
        self.reference_zygote(problem).wait_ready()
        laps.lap("workers")
        server = self.server(problem)
        trials = self.trial_count(server)
        made = server.make(secret_seeds(trials), variants=True, donor_seeds=secret_seeds(self.donor_count(server, trials)))
        laps.lap("reference")
        # The reference's and the timing's share of this verification, kept out of the fixed cost.
        self._parent_costs = {"reference_s": time.perf_counter() - started, "timing_s": 0.0}
        self._overlapped = {}
        self.zygote.wait_ready()
        laps.lap("workers")
        self._note_worker_imports()
        job_dir = new_job_dir(self.root / "jobs", "cand-")
        candidate_path = job_dir / "candidate.py"
        candidate_path.write_text(candidate.source)
        output_bytes = sum(map(_nbytes, made.outputs))
        # The decoy check reruns a set twice and saves it too: not for multi-GB outputs (a lint, not the boundary).
        decoy_check = output_bytes <= budget.LARGE_OUTPUT_BYTES
        job = self._job("candidate", candidate_path=str(candidate_path),
                        inputs_path=str(self._hand_over(made, job_dir)), decoy_check=decoy_check,
                        output_specs=output_specs(made.outputs), order_seed=secret_seeds(1)[0])
        # What its files may hold: three sets of outputs, however small (a disk-filling job is killed).
        file_size = max(CANDIDATE_MIN_FILE_BYTES, 3 * output_bytes + OUTPUT_FILE_SLACK_BYTES * (3 + len(made.outputs)))
        session = self.zygote.start(job, job_dir, self.compile_timeout_s, self.run_timeout_s, CANDIDATE_PHASES,
                                    file_size_bytes=file_size, disk_budget=True)
        # A job that prints without end is killed as it floods, not at its phase's limit.
        watch = OutputWatch(session.dir.fd, functools.partial(session.zygote._kill_group, session.pid)) \
            if session.pid is not None else None
        if self.time_it:
            # While the candidate compiles and runs its trials, the trusted job imports the compiler
            # and, on a problem's first verification, builds the baselines (torch.compile's first
            # call) unless their times are kept: not after the trials, on the critical path. Not
            # for multi-GB outputs: the baselines' memory would sit beside the candidate's.
            server.send_ahead("warm_up", {"skip": self._baseline_lookup(problem, made),
                                          "build": output_bytes <= budget.LARGE_OUTPUT_BYTES})
        try:
            verdict = self._converse(session, made, problem, server)
        except ProblemError:  # the trusted side failed: the problem's error, not the candidate's verdict
            raise
        except Exception as exc:  # noqa: BLE001 - any error while judging becomes a verdict, never a crash
            verdict = rejected(Code.judging_failed,
                               f"judging failed on what the candidate's process sent: {error_line(exc)[:300]}",
                               device=self.device)
        finally:
            laps.lap({"compile": "candidate", "trials": "compare"}.get(session.phase, session.phase))
            if watch is not None:
                watch.stop()  # before the job's group is gone: no kill outlives it
            session.send({"done": {}})  # its last report (claims, costs), if it still follows the protocol
            outcome = session.finish(wait_s=DONE_WAIT_S)
        flood = watch.found() if watch is not None else None
        if flood is not None:  # however it would have ended otherwise
            verdict = Verdict(status=Status.runtime_error, code=Code.output_flood, device=self.device,
                              reason=f"output flood: {flood} printed, over the {FLOOD_BYTES >> 20} MiB a job may "
                                     f"print (killed as it crossed it)")
        if verdict is None:
            verdict = self._ended_early(outcome)
        verdict.stdout_tail, verdict.stderr_tail = outcome.stdout_tail, outcome.stderr_tail
        if verdict.status != Status.correct and not verdict.feedback.count("stderr (end)"):
            verdict.feedback = _feedback(verdict.feedback or verdict.reason, outcome)
        verdict.warnings = [*made.warnings, *verdict.warnings, *self._interpreter_caveats(candidate, made, outcome)]
        verdict.isolation = self.zygote.mode
        secrets = redact.secrets()  # a backstop: nothing the parent holds secret in text the job wrote
        verdict.reason, verdict.feedback = redact.redact(verdict.reason, secrets), redact.redact(verdict.feedback, secrets)
        verdict.containment = outcome.box
        if not outcome.box.get("isolated"):
            verdict.warnings.append(f"not isolated: {outcome.box.get('why', 'no report of its box')}")
            if self.strict:  # --strict judges nothing it could not contain
                verdict = rejected(Code.not_isolated, "not judged: --strict, and the candidate's job was not "
                                   f"isolated ({outcome.box.get('why', 'no report of its box')})",
                                   device=self.device, isolation=self.zygote.mode, containment=outcome.box,
                                   stdout_tail=verdict.stdout_tail, stderr_tail=verdict.stderr_tail)
        claims = outcome.result if isinstance(outcome.result, dict) else {}
        candidate_costs = claimed_seconds(claims.get("costs"), names=CHILD_COSTS)
        candidate_costs.pop("timing_setup_s", None)  # inside the parent's timing_s
        verdict.cost_s = {**verdict.cost_s, **self._parent_costs, **self._overlapped, "child_s": outcome.elapsed_s,
                          **candidate_costs, "total_s": time.perf_counter() - started}
        written_at = claimed_seconds({"t": claims.get("written_at")}).get("t")  # a time.time() stamp
        if written_at is not None and written_at > 1e9:  # the child's exit after its result: CUDA context teardown
            verdict.cost_s["exit_s"] = max(0.0, outcome.ended_at - written_at)
        # What the verifier itself costs per candidate: everything but the candidate's own compile,
        # trials and timing, and the reference.
        verdict.cost_s["fixed_s"] = (verdict.cost_s["total_s"] - sum(self._parent_costs.values())
                                     - sum(candidate_costs.values()))
        if not self.keep_jobs:
            remove_job_dir(job_dir)
        laps.lap("finish")
        self._store_baselines(server)  # the candidate's process group is gone: the baselines are timed alone
        laps.lap("cache")
        verdict.cost_s.update(laps.costs())
        verdict.cost_s["total_s"] = time.perf_counter() - started
        if self.time_it:
            verdict.cost_s.update(self._cache_costs())
        return verdict

    # -- baselines kept across processes (trusted_cache.py) ----------------------------------
    def cached_baselines(self, problem: Problem, specs: list) -> tuple[str | None, list[str], dict | None]:
        """(the cache key of this problem's torch.compile baselines here, the baselines asked for,
        their record if one was kept); no key where the trusted cache is off. `specs`: the shapes
        and dtypes of the reference's outputs (output_specs)."""
        asked = list(trusted_cache.CACHED_NAMES[:2 if self.full_baselines else 1])
        if self.baseline_cache is None:
            return None, asked, None
        if self._conditions is None:  # once per Verifier: NVML and the versions don't change under it
            gpu = (trusted_cache.gpu_conditions(self.compare_on.index or 0) if self.compare_on.type == "cuda"
                   else {"gpu": self.device})
            self._conditions = {**trusted_cache.versions(), **gpu, "full_baselines": self.full_baselines}
        key = trusted_cache.baseline_key(problem.sha256, specs, self._conditions, asked)
        record = self.baseline_cache.load(key)
        complete = record is not None and all(isinstance((record.get("timings") or {}).get(n), dict) for n in asked)
        return key, asked, record if complete else None

    def _baseline_lookup(self, problem: Problem, made: Made) -> list[str]:
        """The baselines this verification's timing skips as cached (kept, with their record, in
        `_cache_state` for the timing phase)."""
        key, asked, record = self.cached_baselines(problem, output_specs(made.outputs))
        skip = list(asked) if record is not None else []
        self._cache_state = {"key": key, "record": record, "asked": asked, "skip": skip, "note": self.layout.cache_note}
        return skip

    def _store_baselines(self, server: ReferenceServer) -> None:
        """After a verification that compiled and timed the baselines with no cached record: time
        them once more, alone (no candidate process exists now), and keep that record."""
        state = self._cache_state
        timed = state.get("timed") or []
        if self.baseline_cache is None or not state.get("key") or state.get("record") is not None or \
                not set(state.get("asked", [])) <= set(timed) or not server.alive():
            return
        try:
            samples = server.ask("block", {"rounds": CACHE_ROUNDS}).get("samples_ms") or {}
            eager = samples["eager"]
            record = {"timings": {name: {**summarize_all({name: samples[name]})[name].model_dump(),
                                         "over_eager": speedup_from_rounds(samples[name], eager)}
                                  for name in state["asked"]},
                      "eager": summarize_all({"eager": eager})["eager"].model_dump(),
                      "compile_s": {k: v for k, v in (state.get("compile_s") or {}).items() if k in state["asked"]},
                      "rounds": CACHE_ROUNDS, "measured_at": time.time()}
            self.baseline_cache.store(state["key"], record)
            state["stored"] = True
        except (ProblemError, KeyError, TypeError, ValueError, OSError):  # no record this time; the verdict stands
            return

    def _cache_costs(self) -> dict[str, float]:
        state = self._cache_state
        record = state.get("record")
        if record is not None:
            return {"baselines_cached_at": float(record.get("measured_at", 0.0))}
        return {"baselines_cache_stored": 1.0} if state.get("stored") else {}

    @staticmethod
    def _hand_over(made: Made, job_dir: Path) -> Path:
        """The trial inputs into a fresh job dir, before any job code runs there."""
        with JobDir(job_dir) as held:
            return held.put(made.inputs_path, "inputs.sets")

    def _ended_early(self, outcome: JobOutcome) -> Verdict:
        """The verdict of a job that ended before the parent had what it needed."""
        base: _VerdictBase = {"device": self.device}
        if outcome.timed_out:
            limit = self.compile_timeout_s if outcome.phase == "compile" else self.run_timeout_s
            reason = f"timed out after {limit:g}s while {_while(outcome.phase)} (killed with its process group)"
            return Verdict(status=Status.timeout, reason=reason, code=Code.timed_out, **base)
        result = outcome.result if isinstance(outcome.result, dict) else {}
        status = result.get("status")
        if status in {s.value for s in Status} - {"correct"} and isinstance(result.get("reason"), str):
            # The child's code is a claim: kept only where it belongs to the status it reports.
            code = code_of(result.get("code"))
            code = code if STATUS_OF.get(code) is Status(status) else Code.unknown
            verdict = Verdict(status=Status(status), reason=result["reason"][:500], code=code, **base)
            verdict.own_kernels = sorted(claimed_names(result.get("launches")))
            return verdict
        return Verdict(status=Status.runtime_error, reason=_failure_reason(outcome), code=_failure_code(outcome), **base)

    def _converse(self, session: JobSession, made: Made, problem: Problem, server: ReferenceServer) -> Verdict | None:
        """Drive the candidate's child; None when it ended before reporting its trials."""
        message = session.receive()
        trials = message.get("trials") if message else None
        if not isinstance(trials, dict):
            return None
        launches = claimed_names(trials.get("launches"))
        cand_ops = set(claimed_names(trials.get("ops")))
        library_ops = sorted(set(made.ops) & cand_ops)
        base: _VerdictBase = {"device": self.device, "own_kernels": sorted(launches), "library_ops": library_ops}
        # Rules on what the candidate's process says it ran. Claims: it can only lie its way out
        # of these, never into a speed it doesn't have (speed and correctness are decided here).
        if not launches:
            return rejected(Code.no_own_kernel,
                            "no kernel of its own ran: forward launched no Triton kernel and no load_inline function",
                            **base)
        if made.ops and set(made.ops) <= cand_ops:
            return rejected(Code.leaves_work_to_torch,
                            f"leaves the work to torch: every compute op of the reference ({', '.join(made.ops)}) "
                            "still runs through torch beside its own kernels", **base)
        if self.strict and library_ops:
            return rejected(Code.library_ops_strict, f"library ops kept with --strict: {', '.join(library_ops)}", **base)

        self._laps.lap("candidate")
        compare_started = time.perf_counter()
        loaded = _load_outputs(session.dir, "trials.sets", made.outputs, self.compare_on, extra_sets=2)
        if isinstance(loaded, str):
            return rejected(Code.unreadable_outputs, loaded, **base)
        outputs, saved = loaded
        disturbed, outputs = outputs[len(made.outputs):], outputs[:len(made.outputs)]
        refs = made.outputs
        # Every set is compared, not only up to the first wrong one: which sets fail is a fact too.
        # The tolerance as plain data from the trusted job: the problem is never imported here.
        tolerance = server.tolerance
        comparisons = [compare_outputs(out, ref, tolerance, self.compare_on, made.round_off)
                       for out, ref in zip(outputs, refs)]
        failed = next((trial for trial, c in enumerate(comparisons) if not c.ok), None)
        if failed is not None:
            comparison = comparisons[failed]
            return _incorrect(comparison, f"{comparison.reason} (trial {failed + 1})", comparison.code, failed + 1,
                              _localised(comparisons, outputs, refs, failed, tolerance, self.compare_on), base)
        worst_abs = max(c.max_abs_err for c in comparisons)
        worst_rel = max(c.rel_err for c in comparisons)
        decoy = self._decoy(disturbed, made, refs[0], tolerance)
        if decoy:
            return rejected(Code.decoy_kernel, decoy, **base)
        compare_s = time.perf_counter() - compare_started
        self._laps.lap("compare")

        timing_started = time.perf_counter()
        judged: SpeedJudgement | TimedFailure | Rehearsed | str | None = None
        checks = TimedChecks(session, server, refs[0], tolerance, self.compare_on) \
            if self.rehearse or (self.time_it and self.fresh_timing) else None
        if self.time_it or self.rehearse:
            session.advance("timing")
            warm = server.answer("warm_up") or {}
            record, skip = self._cache_state.get("record"), self._cache_state.get("skip", [])
            if self.rehearse:  # no torch.compile on the CPU: its baselines need none
                skip = list(trusted_cache.CACHED_NAMES)
            # NVML reads this worker's GPU: the one this process compares on, where it has one
            cuda_index = self.compare_on.index if self.compare_on.type == "cuda" else None
            judged = drive_timing(session, server, cuda_index, skip=skip, laps=self._laps, timed=self._cache_state,
                                  checks=checks, rehearse=self.rehearse)
            for name in ("import_s", "build_s"):  # in the trusted job, beside the candidate: not in fixed_s
                if isinstance(warm.get(name), (int, float)):
                    self._overlapped[f"baselines_{name}"] = float(warm[name])
            if record is not None and isinstance(judged, SpeedJudgement):
                judged = with_cached_baselines(judged, record)
        self._parent_costs["timing_s"] = time.perf_counter() - timing_started if judged is not None else 0.0
        if isinstance(judged, str):  # the child broke off while being timed
            return None
        if isinstance(judged, TimedFailure):
            return self._timed_failure(judged, len(outputs), tolerance, base)
        if checks is not None:
            worst_abs, worst_rel = max(worst_abs, checks.worst_abs), max(worst_rel, checks.worst_rel)

        # A kernel faster than the reference's own work could be is judged on more sets (it may
        # exploit structure honestly, or skip work that the trial values happened not to need).
        extra = SCRUTINY_SETS if isinstance(judged, SpeedJudgement) and judged.less_work_than_reference else 0
        self._laps.lap("timing")
        fresh_started = time.perf_counter()
        fresh_made = server.make(secret_seeds(1 + extra), variants=False)
        self._parent_costs["reference_s"] += time.perf_counter() - fresh_started
        try:
            fresh_path = session.dir.put(fresh_made.inputs_path, "fresh_inputs.sets")
        except UnsafeFileError as exc:
            fresh_made.inputs_path.unlink(missing_ok=True)
            return rejected(Code.tampered_job_dir,
                            f"tampered job dir: {exc}; the candidate's process may not touch the parent's files", **base)
        session.advance("fresh")
        if not session.send({"fresh": {"inputs_path": str(fresh_path)}}):
            return None
        answer = session.receive()
        if not answer or not isinstance(answer.get("fresh"), dict):
            return None
        found = answer["fresh"].get("found")
        if isinstance(found, str) and found:
            code = code_of(answer["fresh"].get("code"))  # a claim: only the child's own checks' codes stand
            if code is Code.wrong_type:
                return Verdict(status=Status.incorrect, reason=found[:300], code=code, trials=len(outputs) + 1, **base)
            return rejected(code if code in (Code.writes_to_inputs, Code.aliases_input) else Code.unknown,
                            found[:300], **base)
        loaded = _load_outputs(session.dir, "fresh.sets", fresh_made.outputs, self.compare_on)
        if isinstance(loaded, str):
            return rejected(Code.unreadable_outputs, loaded, **base)
        fresh, _ = loaded
        trials_run = len(outputs)
        for index, (out, ref) in enumerate(zip(fresh, fresh_made.outputs)):
            checked = compare_outputs(out, ref, tolerance, self.compare_on, fresh_made.round_off)
            comparisons.append(checked)
            trials_run += 1
            if not checked.ok:
                what = ("fresh inputs: right on the trial inputs but wrong on fresh inputs after timing (caching results?)"
                        if index == 0 else "extra input sets (it does less work than the reference): wrong on one")
                code = Code.stale_on_fresh_inputs if index == 0 else Code.wrong_on_extra_sets
                located = _localised([checked], [out], [ref], 0, tolerance, self.compare_on)
                located.trial = trials_run
                return _incorrect(checked, f"{what}: {checked.reason}", code, trials_run, located, base)
            worst_abs, worst_rel = max(worst_abs, checked.max_abs_err), max(worst_rel, checked.rel_err)
        base["cost_s"] = {"compare_s": compare_s, **claimed_seconds(trials.get("overhead"))}
        verdict = Verdict(status=Status.correct, reason=f"correct on {trials_run} input sets", code=Code.correct,
                          trials=trials_run,
                          max_abs_err=worst_abs, rel_err=worst_rel, **base)
        if library_ops:
            verdict.warnings.append(f"library ops still run through torch: {', '.join(library_ops)}")
        verdict.degenerate_outputs = sorted({index for c in comparisons for index in c.degenerate})
        if verdict.degenerate_outputs:
            verdict.warnings.append(_degenerate_note(verdict.degenerate_outputs, {**made.round_off, **fresh_made.round_off}))
        if self.device == "cpu":
            verdict.warnings.append("CPU (Triton interpreter): correctness only, no speed measured")
        if isinstance(judged, Rehearsed):
            verdict.warnings.append(f"CPU: the timing protocol ran on host clocks ({judged.checked} timed calls on "
                                    "fresh values checked); nothing it timed is a speed")
        timed_calls = f" and {checks.checked} timed calls picked at random" if checks is not None and checks.checked else ""
        verdict.feedback = (f"Correct on {trials_run} input sets{timed_calls} "
                            f"(max_abs_err={verdict.max_abs_err:.3g}, rel_err={verdict.rel_err:.3g}).")
        if isinstance(judged, SpeedJudgement):
            verdict = _with_speed(verdict, judged)
            if verdict.degenerate_outputs and verdict.win:
                verdict.win = False  # as fast as it likes: zeros would be as right
        return verdict

    def _timed_failure(self, failed: TimedFailure, trials: int, tolerance: dict, base: _VerdictBase) -> Verdict:
        """The verdict of a timed call that failed its check: wrong (where it is wrong, as for any
        wrong output), or rejected (its kept output contradicts its digest, or can't be read)."""
        if failed.code is not Code.wrong_on_timed_call or failed.comparison is None:
            return rejected(failed.code, failed.reason[:300], **base)
        located = _localised([failed.comparison], [failed.outputs], [failed.refs], 0, tolerance, self.compare_on)
        return _incorrect(failed.comparison, failed.reason, failed.code, trials + 1, located, base)

    def _decoy(self, disturbed: list[list], made: Made, ref: list, tolerance: dict) -> str | None:
        """A forward that is still right with its own Triton kernels skipped, or with noise in
        everything they are given, left the work to something else (torch under other op names,
        numpy, a cached copy). Not judged where the reference is near zero or constant: unwritten
        memory can match those."""
        if made.warnings or made.round_off:
            return None
        for outputs in disturbed:
            if compare_outputs(outputs, ref, tolerance, self.compare_on).ok:
                return ("decoy kernel: with its own Triton kernels skipped or given noise the output is still right, "
                        "so the work is done elsewhere (torch, numpy or a copy); compute the result in your own kernels")
        return None

    def _interpreter_caveats(self, candidate: Candidate, made: Made, outcome: JobOutcome) -> list[str]:
        """Known ways Triton's CPU interpreter differs from a GPU that a verdict here may reflect."""
        if self.device != "cpu" or "triton" not in candidate.source:
            return []
        claims = outcome.result if isinstance(outcome.result, dict) else {}
        caveats = [interpreter_order.caveat(shuffled=claims.get("interpreter_shuffled") is True)]
        bf16 = any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for outs in made.outputs for t in outs)
        if "tl.dot" in candidate.source and bf16:
            caveats.append("Triton's CPU interpreter computes bf16 tl.dot wrongly (triton-lang/triton#11584): "
                           "a mismatch here may be the interpreter's; check on a GPU")
        return caveats

    # -- baselines alone ----------------------------------------------------------------------
    def time_baselines(self, problem: Problem) -> dict:
        """Eager, torch.compile and the problem's own baselines, timed in one sandboxed child (GPU only).
        Returns {"timings": {name: TimingStats}, "compile_s": {...}, "profile": {...}}."""
        if self.device != "cuda":
            raise ValueError("timing baselines needs a CUDA GPU (--device cuda)")
        job_dir = new_job_dir(self._reference_root(problem) / "jobs", "base-")
        outcome = self.reference_zygote(problem).run(self._job("baselines", problem_path=str(problem_file(problem, job_dir)),
                                                     seeds=list(range(1, self.trials + 1))),
                                           job_dir, self.compile_timeout_s, self.run_timeout_s, phases=("timing",))
        result = outcome.result or {}
        if result.get("status") != "ran":
            raise ProblemError(f"{problem.path}: timing the baselines failed: "
                               f"{result.get('reason') or _failure_reason(outcome)}")
        measured = result["timing"]
        if not self.keep_jobs:
            remove_job_dir(job_dir)
        return {"timings": summarize_all(measured["samples_ms"]), "compile_s": measured["compile_s"],
                "roofline": measured["roofline"], "gpu": measured["gpu"], "device_name": measured["device_name"]}


def with_cached_baselines(judged: SpeedJudgement, record: dict) -> SpeedJudgement:
    """A judgement whose torch.compile baselines were not run here: their times from the record,
    and the speedup over each this run's speedup over eager (paired rounds) times the record's
    baseline/eager ratio (its own paired rounds), labelled as cached."""
    when = trusted_cache.describe(record)
    for name, stats in (record.get("timings") or {}).items():
        if name in judged.timings or not isinstance(stats, dict):
            continue
        fields = {k: v for k, v in stats.items() if k in TimingStats.__dataclass_fields__}
        judged.timings[name] = TimingStats.model_validate(fields)
        ratio = stats.get("over_eager")
        if judged.speedup is not None and isinstance(ratio, (int, float)) and ratio > 0:
            judged.speedups[name] = judged.speedup * float(ratio)
        judged.warnings.append(f"{name} baseline: {when} on the same problem source, GPU, driver, torch and triton "
                               f"(not compiled in this verification; its speedup is this run's speedup over eager times "
                               f"the recorded {name}/eager ratio)")
    return judged


def _degenerate_note(outputs: list[int], round_off: dict[int, float]) -> str:
    """The warning of a verdict judged on a degenerate reference (compare.py)."""
    why = "; ".join(f"output {i}: " + (f"its error against float64 is {round_off[i]:.2g} of its norm" if i in round_off
                                         else "all zeros") for i in outputs)
    return (f"degenerate reference ({why}): judged by the absolute tolerance only; a kernel returning zeros "
            "passes too, so this is no win")


def _with_speed(verdict: Verdict, judged: SpeedJudgement) -> Verdict:
    """Attach timings and cross-checks to a correct verdict; a failed cross-check rejects it."""
    verdict.timings, verdict.speedups, verdict.speedup = judged.timings, judged.speedups, judged.speedup
    verdict.noise_floor, verdict.win, verdict.gpu = judged.noise_floor, judged.win, judged.gpu
    verdict.profile = judged.profile.model_dump() if judged.profile is not None else None
    verdict.speed_source = judged.speed_source
    verdict.suspicious += judged.suspicious
    verdict.warnings += judged.warnings
    if judged.rejection:
        return verdict.model_copy(update={"status": Status.rejected, "reason": judged.rejection,
                                          "code": judged.rejection_code or Code.unknown,
                                          "feedback": judged.rejection, "speedup": None, "win": None})
    verdict.feedback += f" Speedup over eager {judged.speedup:.3f}x (noise floor {judged.noise_floor:.3f})."
    return verdict


def _load_outputs(held: JobDir, name: str, like: list[list], device: torch.device,
                  extra_sets: int = 0) -> tuple[list[list], dict] | str:
    """The output sets the child saved (as many as the reference's `like`, plus up to `extra_sets`)
    and the file's extra dict, on `device`; or why they can't be judged. The candidate's process
    wrote this file and may still be running, so anything may be in it: it is opened without
    following links, a regular file of bounded size, its header checked before anything is
    allocated (tensor_files.py), and read into this process, never mapped."""
    limit = (1 + extra_sets) * (sum(map(_nbytes, like)) + OUTPUT_FILE_SLACK_BYTES * (1 + len(like)))
    try:
        with held.open_bounded(name, limit) as handle:
            sets, extra = load_sets(handle, limit, device)
        if not len(like) <= len(sets) <= len(like) + extra_sets:
            raise ValueError(f"{len(sets)} output sets for {len(like)} input sets")
    except FileNotFoundError:
        return f"unreadable outputs: the candidate's process left no {name}"
    except (OSError, ValueError) as exc:  # TensorFileError, UnsafeFileError: the verdict, never a crash here
        detail = error_line(exc)[:200]
        return f"unreadable outputs: the candidate's process left an outputs file that cannot be judged ({detail})"
    return sets, extra


def _incorrect(comparison: Comparison, reason: str, code: Code, trials: int, located, base: _VerdictBase) -> Verdict:
    """An incorrect verdict with where it is wrong: its facts go to the coder in the feedback."""
    facts = describe(located) if located is not None else []
    feedback = reason + ("\n\nWhere it is wrong:\n" + "\n".join(f"- {line}" for line in facts) if facts else "")
    return Verdict(status=Status.incorrect, reason=reason, code=code, max_abs_err=comparison.max_abs_err,
                   rel_err=comparison.rel_err, trials=trials, localisation=located, feedback=feedback, **base)


def _localised(comparisons: list[Comparison], outputs: list[list], refs: list[list], failed: int, tolerance: dict,
               device: torch.device):
    """Where set `failed` is wrong (its first wrong output), and which sets pass: computed here,
    from the outputs, never from anything the candidate's process says. None for a wrong type."""
    comparison = comparisons[failed]
    out, ref = outputs[failed], refs[failed]
    if comparison.code is Code.wrong_type or comparison.output >= min(len(out), len(ref)):
        return None
    out_t, ref_t = out[comparison.output], ref[comparison.output]
    located = localise(out_t, ref_t, tolerance_for(ref_t.dtype, tolerance), comparison.output, device)
    located.trial = failed + 1
    located.sets = [InputSet(trial=i + 1, shape=list(r[comparison.output].shape) if comparison.output < len(r) else [],
                             ok=c.ok, code=c.code) for i, (c, r) in enumerate(zip(comparisons, refs))]
    bad = [s for s in located.sets if not s.ok]
    located.irregular_only = len(bad) < len(located.sets) and all(irregular(s.shape) for s in bad) and \
        not any(irregular(s.shape) for s in located.sets if s.ok)
    return located


def _failure_code(outcome: JobOutcome) -> Code:
    if outcome.notes:
        return Code.worker_died
    return Code.crashed if outcome.exit_code is not None and outcome.exit_code < 0 else Code.exited


def _failure_reason(outcome: JobOutcome) -> str:
    code = outcome.exit_code
    if outcome.notes:
        hint = " (did it signal its parent?)" if any("worker died" in note for note in outcome.notes) else ""
        return f"crashed: {'; '.join(outcome.notes)} while {_while(outcome.phase)}{hint}"
    if code is not None and code < 0:
        return f"crashed ({_signal_name(code)}) while {_while(outcome.phase)}"
    return f"exited with code {code} while {_while(outcome.phase)} before reporting (sys.exit, os._exit or a fatal error)"


def _feedback(reason: str, outcome: JobOutcome) -> str:
    """Text for the coder: the reason (and where it is wrong), then the end of what the candidate
    printed to stderr."""
    stderr = "\n".join(outcome.stderr_tail.strip().splitlines()[-25:])
    return reason + (f"\n\nstderr (end):\n{stderr}" if stderr else "")


def verify(candidate: Candidate, problem: Problem, *, device: str = "auto", strict: bool = False,
           time_it: bool = True, timeout_s: float | None = None, workspace: Path | None = None) -> Verdict:
    """Verify one candidate. For many, keep one Verifier: it keeps a warm worker and cached references."""
    limits: _Timeouts = {} if timeout_s is None else {"compile_timeout_s": timeout_s, "run_timeout_s": timeout_s}
    with Verifier(device=device, strict=strict, time_it=time_it, workspace=workspace, **limits) as verifier:
        return verifier.verify(candidate, problem)


def time_baselines(problem: Problem, device: str = "cuda") -> dict[str, TimingStats]:
    """Baseline timings alone (bench --baselines-only). `device` is "cuda" or "cuda:N"."""
    kind, index = split_device(device)
    with Verifier(device=kind, gpu_index=index) as verifier:
        return verifier.time_baselines(problem)["timings"]
