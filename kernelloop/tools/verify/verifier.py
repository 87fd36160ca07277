"""The verifier: the part everything else trusts.

verify(candidate, problem) -> Verdict. Static rules first (a cheap lint: nothing runs for a broken
rule). Then, for every verification, fresh secret seeds: the trusted reference job (its own
sandbox worker, no candidate code) makes the inputs and the reference's outputs on them, and
only the inputs reach the candidate's child. The parent drives that child over a channel it owns:
trials, a compare here, timing only for outputs that were right (the baselines timed in the
trusted job, the candidate's own event times checked against this process's clock; with
`fresh_timing`, every timed call on fresh values and outputs of timed calls picked at random
checked here), then one more call on fresh values written into buffers the candidate already
knows, compared here too.
Everything the candidate's process reports (its kernels, ops, launches, event times, input
checks) is a claim; what decides a verdict is what this process computed or observed.

This module keeps what lives across verifications (config, the sandbox workers, the trusted job
of the problem at hand, the baseline cache); one verification's conversation is a Verification
(verification.py), its verdicts are built in verdicts.py.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TypedDict

import torch

from kernelloop.config import defaults
from kernelloop.config.workspace import workspace_dir
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.records import TimingStats, Verdict
from kernelloop.sandbox.runner import Zygote, new_job_dir, remove_job_dir
from kernelloop.tools.profile.stopwatch import Stopwatch
from kernelloop.tools.verify import budget, trusted_cache, workers
from kernelloop.tools.verify.claims import (  # noqa: F401 - public here too (tests, callers)
    CHILD_COSTS,
    MAX_CLAIMED_KEYS,
    MAX_CLAIMED_SECONDS,
    PARENT_COSTS,
    claimed_names,
    claimed_seconds,
)
from kernelloop.tools.verify.compare import compare_device
from kernelloop.tools.verify.kept_baselines import CACHE_ROUNDS, KeptBaselines, with_cached_baselines  # noqa: F401
from kernelloop.tools.verify.reference_server import ReferenceServer, problem_file
from kernelloop.tools.verify.speed import summarize_all
from kernelloop.tools.verify.verdicts import failure_reason, precheck  # noqa: F401 - precheck: public here too
from kernelloop.tools.verify.verification import PHASE_NAMES, Verification, output_specs, secret_seeds  # noqa: F401

DEFAULT_TRIALS = 3
CPU_MEMORY_LIMIT_BYTES = 16 << 30


class VerifierOptions(TypedDict, total=False):
    """What a pool passes to each of its Verifiers (their settings, not where they run)."""

    strict: bool
    strict_claims: bool
    time_it: bool
    compile_timeout_s: float
    run_timeout_s: float
    trials: int
    keep_jobs: bool
    full_baselines: bool
    static_checks: bool
    standby: bool
    gpu_compare: bool
    fresh_timing: bool
    rehearse_timing: bool


class _Timeouts(TypedDict, total=False):
    """The Verifier's time limits, where a caller sets them."""

    compile_timeout_s: float
    run_timeout_s: float


def split_device(device: str) -> tuple[str, int | None]:
    """'cuda:1' -> ('cuda', 1); 'cpu' -> ('cpu', None): a Verifier's (device, gpu_index), of a device
    string already checked where it entered (config.units.Device)."""
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


class Verifier:
    """Verifies candidates one at a time on one device: a warm sandbox worker for candidates, and
    another for the trusted reference job of the problem at hand. It holds only what outlives one
    verification (config, workers, the trusted job, the baseline cache); each call of `verify`
    makes a Verification that holds the rest."""

    def __init__(self, device: str = "auto", workspace: Path | None = None, strict: bool = False,
                 time_it: bool = True, compile_timeout_s: float = defaults.COMPILE_TIMEOUT_S,
                 run_timeout_s: float = defaults.RUN_TIMEOUT_S,
                 trials: int = DEFAULT_TRIALS, gpu_index: int | None = None, keep_jobs: bool = False,
                 full_baselines: bool = False, static_checks: bool = True, standby: bool = True,
                 gpu_compare: bool = True, lane: int = 0, fresh_timing: bool = True, rehearse_timing: bool = False,
                 strict_claims: bool = False):
        self.device = resolve_device(device)
        self.strict = strict
        # Refuse a correct verdict whose own kernels doing the work is only the candidate's process's word
        # (Verdict.own_kernel_evidence): every CPU verdict, and a GPU one that is not a parent-timed win.
        self.strict_claims = strict_claims
        self.time_it = time_it and self.device == "cuda"
        # Every timed call on fresh values, outputs of calls picked at random checked (fresh_values.py,
        # timed_checks.py), so no memo of inputs seen before can make a kernel look fast. Off (an
        # explicit choice), the trial sets are timed in turn.
        self.fresh_timing = fresh_timing
        if rehearse_timing and not fresh_timing:
            raise ValueError("rehearse_timing runs the fresh-values timing on the CPU: it needs fresh_timing=True")
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
        # lane: which of several Verifiers sharing this device (correctness only: LocalPool refuses to time on a shared one)
        self.layout = workers.layout(self.device, self.workspace, gpu_index, standby, self.time_it, lane=lane)
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
        self._workers_noted: set[Zygote] = set()
        self._conditions: dict | None = None  # what the cache key holds of this machine (GPU, driver, versions)

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._close_server()
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
        clock = Stopwatch()
        if self.compare_on.type == "cuda" and not torch.cuda.is_initialized():
            threading.Thread(target=torch.zeros, args=(1,), kwargs={"device": self.compare_on}, daemon=True).start()
        if trusted:
            self._trusted_zygote = self._worker(self._trusted_zygote, self.layout.trusted, wait=False)
        else:
            self._problems_zygote = self._worker(self._problems_zygote, self.layout.problems, wait=False)
        self._zygote = self._worker(self._zygote, self.layout.candidate, wait=False)
        return clock.elapsed()

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

    def worker_imports(self) -> dict[str, float]:
        """Each worker's own import time (its modules and preloads, as it said when ready), for the
        cost of the first verification it serves: what a cold start waits for beside this process."""
        costs = {}
        for role, zygote in (("trusted", self._trusted_zygote), ("trusted", self._problems_zygote),
                             ("candidate", self._zygote)):
            if zygote is not None and zygote not in self._workers_noted:
                self._workers_noted.add(zygote)
                costs[f"{role}_worker_import_s"] = zygote.import_s
        return costs

    def job(self, kind: str, **fields) -> dict:
        """A job for one of this Verifier's workers."""
        job = {"kind": kind, "device": self.device, "full_baselines": self.full_baselines, **fields}
        if self.device == "cpu":
            job["memory_limit_bytes"] = CPU_MEMORY_LIMIT_BYTES
        return job

    # -- reference --------------------------------------------------------------------------
    def server(self, problem: Problem) -> ReferenceServer:
        """The trusted job for `problem`, kept while the problems asked for stay the same."""
        if self._server is not None and (self._server.problem.sha256 != problem.sha256 or not self._server.alive()
                                         or self._server.problem.trusted != problem.trusted):
            self._close_server()
        if self._server is None:
            self._server = ReferenceServer(self.reference_zygote(problem), problem, self._reference_root(problem),
                                           self.job("reference"),
                                           self.run_timeout_s, outputs_device=self.compare_on)
        return self._server

    def _close_server(self) -> None:
        if self._server is not None:
            self._server.close(self.keep_jobs)
            self._server = None

    def trial_count(self, server: ReferenceServer) -> int:
        """`trials`, or fewer where the problem's sets are huge (one trial set for an output over
        1 GiB); a problem whose sets can't fit even so is a one-line ProblemError saying why."""
        output_bytes, input_bytes = server.output_bytes or 0, server.input_bytes or 0
        device_total = torch.cuda.get_device_properties(self.compare_on).total_memory \
            if self.compare_on.type == "cuda" else None
        host_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        budget_bytes = int(min(device_total or host_total, host_total) * budget.DEVICE_SHARE / 2)
        trials = budget.trial_sets_for(output_bytes, self.trials, budget_bytes, input_bytes)
        too_big = budget.check_fits(output_bytes, trials + budget.FRESH_SETS, device_total, host_total, input_bytes,
                                    fresh=self.times_fresh())
        if too_big:
            raise ProblemError(f"{server.problem.path}: {too_big}")
        return trials

    def times_fresh(self) -> bool:
        """Whether this verification's timing runs on fresh values (fresh_timing on, and timing at all:
        a GPU with time_it, or the CPU's rehearsal). Read per verification: benchmarks toggle it."""
        return self.fresh_timing and (self.time_it or self.rehearse)

    def donor_count(self, server: ReferenceServer, trials: int) -> int:
        """Input sets made only for fresh values to be drawn from (fresh_values.py): one where a
        problem gets a single trial set and one more set of its inputs still fits, else none (and
        none without fresh timing)."""
        if trials >= 2 or not self.times_fresh():
            return 0
        device_total = torch.cuda.get_device_properties(self.compare_on).total_memory \
            if self.compare_on.type == "cuda" else None
        host_total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        fits = budget.check_fits(server.output_bytes or 0, trials + budget.FRESH_SETS, device_total, host_total,
                                 server.input_bytes or 0, donor_sets=1, fresh=True) is None
        return 1 if fits else 0

    # -- candidate --------------------------------------------------------------------------
    def verify(self, candidate: Candidate, problem: Problem, prebuilt: dict | None = None,
               time_left_s: float | None = None) -> Verdict:
        """One candidate's verdict: a Verification of its own, served by this Verifier's workers.
        `prebuilt`: its extensions as the pool's compile stage built them (build_stage.py,
        Product.job_field), served to its job instead of building there. `time_left_s`: the
        caller's budget (a run's time left); its job is cut there, and none starts once it is spent."""
        return Verification(self, candidate, problem, prebuilt, time_left_s).run()

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

    def kept_baselines(self, problem: Problem, specs: list) -> KeptBaselines:
        """One verification's lookup: the baselines its timing skips as cached, with their record."""
        key, asked, record = self.cached_baselines(problem, specs)
        return KeptBaselines(key=key, asked=asked, record=record)

    # -- baselines alone ----------------------------------------------------------------------
    def time_baselines(self, problem: Problem) -> dict:
        """Eager, torch.compile and the problem's own baselines, timed in one sandboxed child (GPU only).
        Returns {"timings": {name: TimingStats}, "compile_s": {...}, "profile": {...}}."""
        if self.device != "cuda":
            raise ValueError("timing baselines needs a CUDA GPU (--device cuda)")
        # The worker runs one job at a time: a reference server kept open from an earlier verification
        # would hold it, and this job would wait past its fork's limit.
        self._close_server()
        job_dir = new_job_dir(self._reference_root(problem) / "jobs", "base-")
        outcome = self.reference_zygote(problem).run(self.job("baselines", problem_path=str(problem_file(problem, job_dir)),
                                                              seeds=list(range(1, self.trials + 1))),
                                                     job_dir, self.compile_timeout_s, self.run_timeout_s,
                                                     phases=("timing",))
        result = outcome.result or {}
        if result.get("status") != "ran":
            raise ProblemError(f"{problem.path}: timing the baselines failed: "
                               f"{result.get('reason') or failure_reason(outcome)}")
        measured = result["timing"]
        if not self.keep_jobs:
            remove_job_dir(job_dir)
        return {"timings": summarize_all(measured["samples_ms"]), "compile_s": measured["compile_s"],
                "roofline": measured["roofline"], "gpu": measured["gpu"], "device_name": measured["device_name"]}


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
