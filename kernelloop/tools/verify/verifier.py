"""The verifier: the part everything else trusts.

verify(candidate, problem) -> Verdict. Static rules first (nothing runs for a broken rule),
then the reference's outputs from one sandboxed child (cached per problem, device and seeds),
then the candidate in another child, then the judgement here in the parent, from files the
candidate's process wrote but cannot reinterpret: outputs are compared, ops and launches
checked, timings taken only for outputs that were already right.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelloop.errors import error_line
from kernelloop.workspace import workspace_dir
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.results import Status, TimingStats, Verdict, rejected
from kernelloop.sandbox.runner import JobOutcome, Zygote, new_job_dir, remove_job_dir
from kernelloop.tools.verify.compare import compare_outputs
from kernelloop.tools.verify.reference_outputs import ReferenceOutputs, compare_device
from kernelloop.tools.verify.speed import SpeedJudgement, judge_speed, summarize_all
from kernelloop.tools.verify.static_check import first_violation

TRIAL_SEEDS = (1, 2, 3)
FRESH_SEED = 1009  # inputs the candidate first sees after timing: catches caching by pointer or id
CPU_MEMORY_LIMIT_BYTES = 16 << 30
# The code that writes references: stored references from another version of it are not reused.
HARNESS_SHA256 = hashlib.sha256(Path(__file__).with_name("harness.py").read_bytes()).hexdigest()


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


@dataclass(frozen=True)
class Reference:
    path: Path
    ops: list[str]
    warnings: list[str]
    trials: int


def precheck(candidate: Candidate, device: str, static_checks: bool = True) -> Verdict | None:
    """The verdict a candidate gets before anything runs (it does not parse, or it breaks a static
    rule), else None. Cheap: the pool runs it on CPU workers before a GPU is taken."""
    problem_error = candidate.syntax_error()
    if problem_error:
        kind = "modelnew" if "ModelNew" in problem_error else "syntax"
        return Verdict(status=Status.compile_error, reason=f"{kind}: {problem_error}", device=device,
                       feedback=f"The candidate did not parse: {problem_error}.")
    violation = first_violation(candidate.source) if static_checks else None
    return rejected(violation, device=device) if violation else None


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


class Verifier:
    """Verifies candidates one at a time on one device, reusing a warm sandbox worker."""

    def __init__(self, device: str = "auto", workspace: Path | None = None, strict: bool = False,
                 time_it: bool = True, compile_timeout_s: float = 180.0, run_timeout_s: float = 300.0,
                 trials: int = len(TRIAL_SEEDS), gpu_index: int | None = None, keep_jobs: bool = False,
                 full_baselines: bool = False, static_checks: bool = True, standby: bool = True,
                 gpu_compare: bool = True):
        self.device = resolve_device(device)
        self.strict = strict
        self.time_it = time_it and self.device == "cuda"
        self.compile_timeout_s = compile_timeout_s
        self.run_timeout_s = run_timeout_s
        self.seeds = [*range(1, trials + 1), FRESH_SEED]
        self.gpu_index = gpu_index
        self.keep_jobs = keep_jobs
        self.full_baselines = full_baselines  # adds torch.compile max-autotune (minutes of tuning)
        self.static_checks = static_checks  # off only in tests that prove the dynamic checks stand alone
        self.standby = standby  # off only to measure what a prepared child saves (benchmarks/verifier_bench.py)
        self.gpu_compare = gpu_compare  # likewise: off only to measure the CPU compare
        self.workspace = workspace_dir(workspace)
        self.root = self.workspace / "verifier" / f"{self.device}{'' if gpu_index is None else gpu_index}"
        # Shared by every worker of this device kind in the workspace (one per GPU): a reference
        # computed, or a kernel compiled, by one worker is there for the others. Jobs read the
        # references but never write them (read-only where bubblewrap runs; the parent moves each
        # in once its job is done).
        self.references_dir = self.workspace / "verifier" / f"references-{self.device}"
        self.cache_dir = self.workspace / "verifier" / f"cache-{self.device}"
        self._zygote: Zygote | None = None
        self._references: dict[str, Reference] = {}
        self._reference_outputs: ReferenceOutputs | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def __enter__(self) -> Verifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    @property
    def zygote(self) -> Zygote:
        if self._zygote is None or not self._zygote.alive():
            # The workspace (checkpoint DB, run dirs) is hidden from candidates where bubblewrap runs.
            self._zygote = Zygote("kernelloop.tools.verify.harness", self.device, self.root, self.gpu_index,
                                  hide=[self.workspace], standby=self.standby, cache_dir=self.cache_dir,
                                  read_only=[self.references_dir])
        return self._zygote

    def _job(self, kind: str, **fields) -> dict:
        job = {"kind": kind, "device": self.device, "seeds": self.seeds, "full_baselines": self.full_baselines, **fields}
        if self.device == "cpu":
            job["memory_limit_bytes"] = CPU_MEMORY_LIMIT_BYTES
        return job

    # -- reference --------------------------------------------------------------------------
    def reference(self, problem: Problem) -> tuple[Reference, float]:
        """The problem's outputs on the trial inputs, computed once in its own child and kept in the
        shared references dir. Returns the reference and the seconds spent on it now (0 when
        this worker or another had it already)."""
        key = hashlib.sha256(f"{problem.sha256}|{self.device}|{self.seeds}|{torch.__version__}|{HARNESS_SHA256}"
                             .encode()).hexdigest()[:24]
        if key in self._references:
            return self._references[key], 0.0
        started = time.perf_counter()
        out_path, meta_path = self.references_dir / f"{key}.pt", self.references_dir / f"{key}.json"
        if meta_path.is_file() and out_path.is_file():  # another worker (or an earlier run) made it
            meta = json.loads(meta_path.read_text())
            reference = Reference(out_path, meta["ops"], meta["warnings"], meta["trials"])
            self._references[key] = reference
            return reference, time.perf_counter() - started
        job_dir = new_job_dir(self.root / "jobs", "ref-")
        outcome = self.zygote.run(self._job("reference", problem_path=str(problem.path),
                                            out_path=str(job_dir / "reference.pt")),
                                  job_dir, self.run_timeout_s, self.run_timeout_s)
        result = outcome.result or {}
        if not result.get("ok"):
            detail = result.get("reason") or _failure_reason(outcome) or "no result"
            raise ProblemError(f"{problem.path}: the reference failed to run on {self.device}: {detail}")
        reference = Reference(out_path, result["ops"], result["warnings"], result["trials"])
        # The outputs first, then the metadata that says they are complete; each by an atomic
        # rename, so a worker computing the same reference at once leaves the same files.
        self.references_dir.mkdir(parents=True, exist_ok=True)
        (job_dir / "reference.pt").chmod(0o444)
        os.replace(job_dir / "reference.pt", out_path)
        meta_tmp = job_dir / "reference.json"
        meta_tmp.write_text(json.dumps({"ops": reference.ops, "warnings": reference.warnings,
                                        "trials": reference.trials, "problem": str(problem.path)}))
        os.replace(meta_tmp, meta_path)
        if not self.keep_jobs:
            remove_job_dir(job_dir)
        self._references[key] = reference
        return reference, time.perf_counter() - started

    # -- candidate --------------------------------------------------------------------------
    def verify(self, candidate: Candidate, problem: Problem) -> Verdict:
        started = time.perf_counter()
        early = precheck(candidate, self.device, self.static_checks)
        if early is not None:
            return early
        reference, reference_s = self.reference(problem)
        job_dir = new_job_dir(self.root / "jobs", "cand-")
        candidate_path = job_dir / "candidate.py"
        candidate_path.write_text(candidate.source)
        job = self._job("candidate", problem_path=str(problem.path), candidate_path=str(candidate_path),
                        ref_path=str(reference.path), tolerance=problem.tolerance, time_it=self.time_it)
        outcome = self.zygote.run(job, job_dir, self.compile_timeout_s, self.run_timeout_s)
        verdict = self._judge(outcome, reference, problem)
        verdict.warnings = [*reference.warnings, *verdict.warnings, *self._interpreter_caveats(candidate, reference)]
        candidate_costs = (outcome.result or {}).get("costs") or {}
        verdict.cost_s = {**verdict.cost_s, "reference_s": reference_s, "child_s": outcome.elapsed_s,
                          **candidate_costs, "total_s": time.perf_counter() - started}
        written_at = (outcome.result or {}).get("written_at")
        if isinstance(written_at, (int, float)):  # the child's exit after its result: CUDA context teardown
            verdict.cost_s["exit_s"] = max(0.0, outcome.ended_at - written_at)
        # What the verifier itself costs per candidate: everything but the candidate's own compile,
        # trials and timing, and the reference (computed once per problem).
        verdict.cost_s["fixed_s"] = verdict.cost_s["total_s"] - reference_s - sum(candidate_costs.values())
        if not self.keep_jobs:
            remove_job_dir(job_dir)
        return verdict

    def _judge(self, outcome: JobOutcome, reference: Reference, problem: Problem) -> Verdict:
        base = {"device": self.device, "stdout_tail": outcome.stdout_tail, "stderr_tail": outcome.stderr_tail}
        if outcome.timed_out:
            limit = self.compile_timeout_s if outcome.phase == "compile" else self.run_timeout_s
            reason = f"timed out after {limit:g}s while {_while(outcome.phase)} (killed with its process group)"
            return Verdict(status=Status.timeout, reason=reason, feedback=_feedback(reason, outcome), **base)
        result = outcome.result
        if result is None:
            reason = _failure_reason(outcome)
            return Verdict(status=Status.runtime_error, reason=reason, feedback=_feedback(reason, outcome), **base)
        status = result["status"]
        if status != "ran":
            return Verdict(status=Status(status), reason=result["reason"],
                           feedback=_feedback(result["reason"], outcome), **base)

        launches = result.get("launches") or {}
        own = sorted(launches)
        cand_ops = set(result.get("ops") or [])
        library_ops = sorted(set(reference.ops) & cand_ops)
        base.update(own_kernels=own, library_ops=library_ops)
        if not launches:
            reason = "no kernel of its own ran: forward launched no Triton kernel and no load_inline function"
            return rejected(reason, **base)
        if reference.ops and set(reference.ops) <= cand_ops:
            reason = (f"leaves the work to torch: every compute op of the reference "
                      f"({', '.join(reference.ops)}) still runs through torch beside its own kernels")
            return rejected(reason, **base)
        if self.strict and library_ops:
            return rejected(f"library ops kept with --strict: {', '.join(library_ops)}", **base)

        compare_started = time.perf_counter()
        outputs = _load_outputs(outcome.job_dir / "outputs.pt")
        if isinstance(outputs, str):
            return rejected(outputs, **base)
        store = self.reference_outputs
        refs = store.for_compare(reference.path)
        worst_abs = worst_rel = 0.0
        for trial, (out, ref) in enumerate(zip(outputs["trials"], refs[:-1])):
            comparison = compare_outputs(out, ref, problem.tolerance, store.device)
            if not comparison.ok:
                reason = f"{comparison.reason} (trial {trial + 1})"
                return Verdict(status=Status.incorrect, reason=reason, max_abs_err=comparison.max_abs_err,
                               rel_err=comparison.rel_err, trials=trial + 1, feedback=_feedback(reason, outcome), **base)
            worst_abs, worst_rel = max(worst_abs, comparison.max_abs_err), max(worst_rel, comparison.rel_err)
        fresh = compare_outputs(outputs["fresh"], refs[-1], problem.tolerance, store.device)
        trials = len(outputs["trials"]) + 1
        if not fresh.ok:
            reason = (f"fresh inputs: right on the trial inputs but wrong on fresh inputs after timing "
                      f"(caching results?): {fresh.reason}")
            return Verdict(status=Status.incorrect, reason=reason, max_abs_err=fresh.max_abs_err,
                           rel_err=fresh.rel_err, trials=trials, feedback=_feedback(reason, outcome), **base)
        base["cost_s"] = {"compare_s": time.perf_counter() - compare_started, **(result.get("overhead") or {})}
        verdict = Verdict(status=Status.correct, reason=f"correct on {trials} input sets", trials=trials,
                          max_abs_err=max(worst_abs, fresh.max_abs_err), rel_err=max(worst_rel, fresh.rel_err), **base)
        if library_ops:
            verdict.warnings.append(f"library ops still run through torch: {', '.join(library_ops)}")
        if self.device == "cpu":
            verdict.warnings.append("CPU (Triton interpreter): correctness only, no speed measured")
        verdict.feedback = f"Correct on {trials} input sets (max_abs_err={verdict.max_abs_err:.3g}, rel_err={verdict.rel_err:.3g})."
        if result.get("timing"):
            return _with_speed(verdict, judge_speed(result["timing"]))
        return verdict

    def _interpreter_caveats(self, candidate: Candidate, reference: Reference) -> list[str]:
        """Known ways Triton's CPU interpreter differs from a GPU that a verdict here may reflect."""
        if self.device != "cpu" or "tl.dot" not in candidate.source:
            return []
        outputs = [t for trial in self.reference_outputs.mapped(reference.path) for t in trial
                   if isinstance(t, torch.Tensor)]
        if not any(t.dtype == torch.bfloat16 for t in outputs):
            return []
        return ["Triton's CPU interpreter computes bf16 tl.dot wrongly (triton-lang/triton#11584): "
                "a mismatch here may be the interpreter's; check on a GPU"]

    @property
    def reference_outputs(self) -> ReferenceOutputs:
        """Reference outputs, loaded once per problem and kept; on this worker's GPU when it has one."""
        if self._reference_outputs is None:
            self._reference_outputs = ReferenceOutputs(compare_device(self.device, self.gpu_index, self.gpu_compare))
        return self._reference_outputs

    # -- baselines alone ----------------------------------------------------------------------
    def time_baselines(self, problem: Problem) -> dict:
        """Eager, torch.compile and the problem's own baselines, timed in one sandboxed child (GPU only).
        Returns {"timings": {name: TimingStats}, "compile_s": {...}, "profile": {...}}."""
        if self.device != "cuda":
            raise ValueError("timing baselines needs a CUDA GPU (--device cuda)")
        job_dir = new_job_dir(self.root / "jobs", "base-")
        outcome = self.zygote.run(self._job("baselines", problem_path=str(problem.path)), job_dir,
                                  self.compile_timeout_s, self.run_timeout_s)
        result = outcome.result or {}
        if result.get("status") != "ran":
            raise ProblemError(f"{problem.path}: timing the baselines failed: "
                               f"{result.get('reason') or _failure_reason(outcome)}")
        measured = result["timing"]
        if not self.keep_jobs:
            remove_job_dir(job_dir)
        return {"timings": summarize_all(measured["samples_ms"]), "compile_s": measured["compile_s"],
                "roofline": measured["roofline"], "gpu": measured["gpu"], "device_name": measured["device_name"]}


def _with_speed(verdict: Verdict, judged: SpeedJudgement) -> Verdict:
    """Attach timings and cross-checks to a correct verdict; a failed cross-check rejects it."""
    verdict.timings, verdict.speedups, verdict.speedup = judged.timings, judged.speedups, judged.speedup
    verdict.noise_floor, verdict.win, verdict.gpu, verdict.profile = judged.noise_floor, judged.win, judged.gpu, judged.profile
    verdict.suspicious += judged.suspicious
    verdict.warnings += judged.warnings
    if judged.rejection:
        return verdict.model_copy(update={"status": Status.rejected, "reason": judged.rejection,
                                          "feedback": judged.rejection, "speedup": None, "win": None})
    verdict.feedback += f" Speedup over eager {judged.speedup:.3f}x (noise floor {judged.noise_floor:.3f})."
    return verdict


def _load_outputs(path: Path) -> dict | str:
    """The outputs the child saved, memory-mapped (each chunk is read once, straight to where it is
    compared; nothing of the job still runs: the sandbox ends it all before reporting its exit), or
    why they can't be judged. The candidate's process wrote this file, so anything may be in it."""
    try:
        outputs = torch.load(path, weights_only=True, mmap=True)
        if not (isinstance(outputs, dict) and isinstance(outputs.get("trials"), list)
                and all(isinstance(o, list) for o in outputs["trials"]) and isinstance(outputs.get("fresh"), list)):
            raise ValueError("not the {trials, fresh} lists the harness saves")
    except Exception as exc:  # noqa: BLE001 - any failure to read them is the verdict, never a crash here
        detail = error_line(exc)[:200]
        return f"unreadable outputs: the candidate's process left an outputs file that cannot be judged ({detail})"
    return outputs


def _failure_reason(outcome: JobOutcome) -> str:
    code = outcome.exit_code
    if outcome.notes:
        return f"crashed: {'; '.join(outcome.notes)} while {_while(outcome.phase)} (did it signal its parent?)"
    if code is not None and code < 0:
        return f"crashed ({_signal_name(code)}) while {_while(outcome.phase)}"
    return f"exited with code {code} while {_while(outcome.phase)} before reporting (sys.exit, os._exit or a fatal error)"


def _feedback(reason: str, outcome: JobOutcome) -> str:
    """Text for the coder: the reason, then the end of what the candidate printed to stderr."""
    stderr = "\n".join(outcome.stderr_tail.strip().splitlines()[-25:])
    return reason + (f"\n\nstderr (end):\n{stderr}" if stderr else "")


def verify(candidate: Candidate, problem: Problem, *, device: str = "auto", strict: bool = False,
           time_it: bool = True, timeout_s: float | None = None, workspace: Path | None = None) -> Verdict:
    """Verify one candidate. For many, keep one Verifier: it keeps a warm worker and cached references."""
    limits = {} if timeout_s is None else {"compile_timeout_s": timeout_s, "run_timeout_s": timeout_s}
    with Verifier(device=device, strict=strict, time_it=time_it, workspace=workspace, **limits) as verifier:
        return verifier.verify(candidate, problem)


def time_baselines(problem: Problem, device: str = "cuda") -> dict[str, TimingStats]:
    """Baseline timings alone (bench --baselines-only). `device` is "cuda" or "cuda:N"."""
    kind, index = split_device(device)
    with Verifier(device=kind, gpu_index=index) as verifier:
        return verifier.time_baselines(problem)["timings"]
