"""One verification: the parent's conversation with one candidate's child, made per call of
Verifier.verify and dropped after it. It owns what belongs to this candidate alone: its laps and
costs, its reference sets, its baseline-cache lookup; the Verifier it serves keeps only what lives
across verifications (the workers, the trusted job, caches, config).

The conversation: trials (saved by the child, compared here), the decoy runs on a trial set drawn
here after them, the rules on what the child says it ran (on every trial set), timing (outputs
right first; with the Verifier's `fresh_timing`, the default, every timed call on fresh values and
outputs of timed calls picked at random checked here: timed_checks.py), then fresh values in
buffers the candidate already knows.
Everything the child reports is a claim; what decides the verdict is computed or observed here.
"""

from __future__ import annotations

import dataclasses
import functools
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from kernelloop.errors import error_line
from kernelloop.problem import Candidate, Problem, ProblemError
from kernelloop.records import Code, Status, Verdict, rejected
from kernelloop.sandbox import redact
from kernelloop.sandbox.runner import JobOutcome, JobSession, new_job_dir, remove_job_dir
from kernelloop.sandbox.safe_io import JobDir, UnsafeFileError
from kernelloop.tools.profile.stopwatch import Stopwatch
from kernelloop.tools.verify import budget, interpreter_order, op_records, reruns, trusted_cache, verdicts
from kernelloop.tools.verify.claims import CHILD_COSTS, TIMING_SETUP_COSTS, claimed_names, claimed_seconds
from kernelloop.tools.verify.compare import (
    Comparison,
    compare_gradients,
    compare_outputs,
    degenerate_output_warnings,
    tolerance_for,
    tolerance_words,
)
from kernelloop.tools.verify.kept_baselines import KeptBaselines, with_cached_baselines
from kernelloop.tools.verify.op_records import SetOps
from kernelloop.tools.verify.output_watch import OutputWatch
from kernelloop.tools.verify.reference_server import Made, ReferenceServer
from kernelloop.tools.verify.shared_names import names_from_reference
from kernelloop.tools.verify.speed import SpeedJudgement
from kernelloop.tools.verify.tensor_files import load_sets
from kernelloop.tools.verify.timed_checks import TimedChecks, TimedFailure
from kernelloop.tools.verify.timing_driver import Rehearsed, drive_timing
from kernelloop.tools.verify.verdicts import VerdictBase
from kernelloop.tools.verify.workloads import Layout, combine, on_workload, slowest, speed_results, timed_failure_on

if TYPE_CHECKING:  # the Verifier makes this; only its type is named here
    from kernelloop.tools.verify.verifier import Verifier

OUTPUT_FILE_SLACK_BYTES = 1 << 20  # a saved tensor list is its data plus a little framing
CANDIDATE_MIN_FILE_BYTES = 512 << 20  # a kernel build's objects and caches; no file of a job outgrows it but its outputs
SCRUTINY_SETS = 4  # more fresh sets for a kernel under the reference's roofline
DONE_WAIT_S = 5.0  # for the candidate's last report once told it is done; then its process group is killed
CANDIDATE_PHASES = ("trials", "rerun", "timing", "fresh")  # "rerun": a failed set again, for the feedback only
PHASE_NAMES = {  # the phases of Verdict.cost_s ("phase_<name>_s"), in order, in words
    "precheck": "static rules",
    "workers": "waiting for the sandbox workers to start (imports, preloads)",
    "reference": "trusted reference job: problem import, inputs and reference outputs",
    "candidate": "candidate's child: import, compile and first call, trials, decoy runs, saving outputs",
    "compare": "parent: loading and comparing outputs",
    "rerun": "a failed set run twice more with other poisons, for the feedback (reruns.py)",
    "baselines": "trusted job: eager and torch.compile baselines set up (compile)",
    "rounds": "timing rounds on fresh values (the events), both children",
    "timing": "timing rounds and the back-to-back windows (with fresh values: the windows alone), both children",
    "profile": "candidate's profile",
    "fresh": "fresh inputs: made, run, compared",
    "finish": "candidate's last report and exit, clean-up",
    "cache": "trusted job: baselines timed alone for the cross-process cache",
}


def secret_seeds(count: int) -> list[int]:
    """Seeds nobody can know ahead: a candidate can't have memorised answers for their inputs."""
    return [secrets.randbelow(2**31 - 1) + 1 for _ in range(count)]


def output_specs(outputs: list[list]) -> list[list]:
    """Shapes and dtypes of each set's outputs (not their values): the child poisons blocks that size."""
    return [[[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in outs if isinstance(t, torch.Tensor)]
            for outs in outputs]


def _nbytes(outputs: list) -> int:
    return sum(t.numel() * t.element_size() for t in outputs if isinstance(t, torch.Tensor))


class Verification:
    """The parent's side of one candidate's verification against one problem."""

    def __init__(self, verifier: Verifier, candidate: Candidate, problem: Problem, prebuilt: dict | None = None,
                 time_left_s: float | None = None):
        self.verifier, self.candidate, self.problem = verifier, candidate, problem
        # The caller's budget for this verification (a run's time left): its job is cut there.
        self.time_left_s = time_left_s
        self.deadline = None if time_left_s is None else time.monotonic() + time_left_s
        self.prebuilt = prebuilt  # the compile stage's product for its job (build_stage.py), if any
        self.device, self.compare_on = verifier.device, verifier.compare_on
        self.clock = Stopwatch()  # its laps are the verdict's phase_*_s; from its start, total_s
        # The reference's and the timing's share of this verification, kept out of the fixed cost.
        self.parent_costs: dict[str, float] = {}
        self.overlapped: dict[str, float] = {}  # costs beside the critical path (not in fixed_s)
        self.timing_parts: dict[str, float] = {}  # where the timing's wall time went (timing_driver.TIMING_PARTS)
        self.kept = KeptBaselines()  # the baseline-cache lookup (key, record, what to store)
        # Fresh timing (opt-in, Verifier.fresh_timing), decided once per verification; its checks of
        # timed calls once timing begins.
        self.fresh = verifier.times_fresh()
        self.checks: TimedChecks | None = None
        self.taken_names: list[str] = []  # the reference's names it uses without defining them
        # A problem with get_workloads (workloads.py): which trial sets are whose, the trial sets'
        # comparisons, each workload's speed judgement, and a workload found wrong after the trials.
        self.layout = Layout()
        self.trial_comparisons: list[Comparison] = []
        self.workload_speeds: dict[str, SpeedJudgement] = {}
        self.failed_workload: tuple[str, str] | None = None
        self.all_checks: list[TimedChecks] = []
        self.decoy_check = True  # set with the job: off for multi-GB outputs

    def run(self) -> Verdict:
        verifier, problem, clock = self.verifier, self.problem, self.clock
        early = verdicts.precheck(self.candidate, self.device, verifier.static_checks)
        clock.lap("precheck")
        if early is not None:  # the same verdict the pool's pre-check gives, nothing added
            return early
        if self.time_left_s is not None and self.time_left_s <= 0:
            return verdicts.out_of_budget(self.device, self.time_left_s)
        verifier.start_workers(problem.trusted)  # both at once: the candidates' worker starts while the reference is made
        verifier.reference_zygote(problem).wait_ready()
        clock.lap("workers")
        server = verifier.server(problem)
        trials = verifier.trial_count(server)
        if self.fresh:  # donor sets for fresh values to be drawn from, where a problem gets one trial set
            made = server.make(secret_seeds(trials), variants=True, fresh=True,
                               donor_seeds=secret_seeds(verifier.donor_count(server, trials)))
        else:
            made = server.make(secret_seeds(trials), variants=True)
        self.layout = Layout.checked(made.workloads or None, server.workload_names, len(made.outputs), str(problem.path))
        clock.lap("reference")
        self.parent_costs = {"reference_s": clock.elapsed(), "timing_s": 0.0}
        verifier.zygote.wait_ready()
        clock.lap("workers")
        self.overlapped.update(verifier.worker_imports())
        job_dir = new_job_dir(verifier.root / "jobs", "cand-")
        candidate_path = job_dir / "candidate.py"
        candidate_path.write_text(self.candidate.source)
        output_bytes = sum(map(_nbytes, made.outputs))
        # The decoy check reruns a set twice and saves it too: not for multi-GB outputs (a lint, not the boundary).
        decoy_check = self.decoy_check = output_bytes <= budget.LARGE_OUTPUT_BYTES
        job = verifier.job("candidate", candidate_path=str(candidate_path),
                           inputs_path=str(_hand_over(made, job_dir)), decoy_check=decoy_check,
                           output_specs=output_specs(made.outputs), order_seed=secret_seeds(1)[0])
        if made.upstream_path is not None:  # BACKWARD: the upstream gradients go with the inputs, never the reference's
            job.update(upstream_path=str(_hand_over_upstream(made.upstream_path, job_dir)), gradients=made.grad_names)
        self.taken_names = names_from_reference(self.candidate.source, problem.source)
        if self.taken_names:  # KernelBench's one namespace for both: shared_names.py
            (job_dir / "reference.py").write_text(problem.source)
            job.update(reference_path=str(job_dir / "reference.py"), reference_names=self.taken_names)
        if self.prebuilt:
            job["prebuilt"] = self.prebuilt
        # What its files may hold: three sets of outputs, however small (a disk-filling job is killed).
        file_size = max(CANDIDATE_MIN_FILE_BYTES, 3 * output_bytes + OUTPUT_FILE_SLACK_BYTES * (3 + len(made.outputs)),
                        sum(map(_nbytes, made.grads)) + OUTPUT_FILE_SLACK_BYTES * (1 + len(made.grads)))
        session = verifier.zygote.start(job, job_dir, verifier.compile_timeout_s, verifier.run_timeout_s,
                                        CANDIDATE_PHASES, file_size_bytes=file_size, disk_budget=True)
        session.deadline = self.deadline
        # A job that prints without end is killed as it floods, not at its phase's limit.
        watch = OutputWatch(session.dir.fd, functools.partial(session.zygote._kill_group, session.pid)) \
            if session.pid is not None else None
        if verifier.time_it:
            # While the candidate compiles and runs its trials, the trusted job imports the compiler
            # and, on a problem's first verification, builds the baselines (torch.compile's first
            # call) unless their times are kept: not after the trials, on the critical path. Not
            # for multi-GB outputs: the baselines' memory would sit beside the candidate's.
            # Kept baseline times are one workload's: a problem with workloads times its baselines every time.
            if not self.layout.counts:
                self.kept = verifier.kept_baselines(problem, output_specs(made.outputs))
            server.send_ahead("warm_up", {"skip": self.kept.skip, "build": output_bytes <= budget.LARGE_OUTPUT_BYTES})
        try:
            verdict = self._converse(session, made, server)
        except ProblemError:  # the trusted side failed: the problem's error, not the candidate's verdict
            raise
        except Exception as exc:  # noqa: BLE001 - any error while judging becomes a verdict, never a crash
            verdict = verdicts.judging_failed(exc, self.device)
        finally:
            clock.lap({"compile": "candidate", "trials": "compare"}.get(session.phase, session.phase))
            if watch is not None:
                watch.stop()  # before the job's group is gone: no kill outlives it
            session.send({"done": {}})  # its last report (claims, costs), if it still follows the protocol
            outcome = session.finish(wait_s=DONE_WAIT_S)
        if session.refused is not None:  # a line built to break the parent's reader: judged, never a crash
            verdict = verdicts.judging_failed(session.refused, self.device)
        flood = watch.found() if watch is not None else None
        if flood is not None:  # however it would have ended otherwise
            verdict = verdicts.output_flood(flood, self.device)
        if verdict is None and session.cut_at_deadline:
            verdict = verdicts.out_of_budget(self.device, self.time_left_s or 0.0, outcome.phase)
        if verdict is None:
            verdict = verdicts.ended_early(outcome, self.device, verifier.compile_timeout_s, verifier.run_timeout_s)
        verdict = self._with_workloads(self._finished(verdict, made, outcome))
        if not verifier.keep_jobs:
            remove_job_dir(job_dir)
        clock.lap("finish")
        self.kept.store(verifier.baseline_cache, server)  # the candidate's process group is gone: timed alone
        clock.lap("cache")
        verdict.cost_s.update(clock.costs())
        verdict.cost_s["total_s"] = clock.elapsed()
        if verifier.time_it:
            verdict.cost_s.update(self.kept.costs())
        return verdict

    def _finished(self, verdict: Verdict, made: Made, outcome: JobOutcome) -> Verdict:
        """What every verdict of a job that ran gets: the job's output, warnings, its box, redaction, costs."""
        verdict.stdout_tail, verdict.stderr_tail = outcome.stdout_tail, outcome.stderr_tail
        if verdict.status != Status.correct and not verdict.feedback.count("stderr (end)"):
            verdict.feedback = verdicts.with_stderr(verdict.feedback or verdict.reason, outcome)
        verdict.warnings = [*made.warnings, *verdict.warnings, *self._interpreter_caveats(made, outcome)]
        if self.taken_names:
            verdict.warnings.append(f"uses the reference's {', '.join(self.taken_names)} without defining them: run, as "
                                    "KernelBench's eval runs a solution, with the reference's module names in scope")
        mode = self.verifier.zygote.mode
        verdict.isolation = mode
        held = redact.secrets()  # a backstop: nothing the parent holds secret in text the job wrote
        verdict.reason, verdict.feedback = redact.redact(verdict.reason, held), redact.redact(verdict.feedback, held)
        verdict.containment = outcome.box
        if not outcome.box.get("isolated"):
            verdict.warnings.append(f"not isolated: {outcome.box.get('why', 'no report of its box')}")
            if self.verifier.strict:  # --strict judges nothing it could not contain
                verdict = verdicts.not_isolated(verdict, outcome, mode)
        if self.verifier.strict_claims and verdict.ok and verdict.own_kernel_evidence == verdicts.IN_PROCESS_CLAIM:
            verdict = verdicts.claims_unverified(verdict)
        claims = outcome.result if isinstance(outcome.result, dict) else {}
        candidate_costs = claimed_seconds(claims.get("costs"), names=CHILD_COSTS)
        setup = {f"child_{name}": candidate_costs.pop(name) for name in TIMING_SETUP_COSTS if name in candidate_costs}
        verdict.cost_s = {**verdict.cost_s, **self.parent_costs, **self.overlapped, **setup,
                          **{f"timing_{part}": s for part, s in self.timing_parts.items()}, "child_s": outcome.elapsed_s,
                          **candidate_costs, "total_s": self.clock.elapsed()}
        written_at = claimed_seconds({"t": claims.get("written_at")}).get("t")  # a time.time() stamp
        if written_at is not None and written_at > 1e9:  # the child's exit after its result: CUDA context teardown
            verdict.cost_s["exit_s"] = max(0.0, outcome.ended_at - written_at)
        # What the verifier itself costs per candidate: everything but the candidate's own compile,
        # trials and timing, and the reference.
        verdict.cost_s["fixed_s"] = (verdict.cost_s["total_s"] - sum(self.parent_costs.values())
                                     - sum(candidate_costs.values()))
        return verdict

    # -- the conversation ------------------------------------------------------------------------
    def _converse(self, session: JobSession, made: Made, server: ReferenceServer) -> Verdict | None:
        """Drive the candidate's child; None when it ended before reporting its trials."""
        message = session.receive()
        trials = message.get("trials") if message else None
        if not isinstance(trials, dict):
            return None
        # Asked before anything is judged, as the decoy runs once came before this report
        decoy = self._decoy_runs(session, made.set_signatures, len(made.outputs))
        if decoy is None:
            return None
        launches = claimed_names(trials.get("launches"))
        each_set = op_claims(trials, made)
        library_ops = sorted({op for ref, cand in each_set for op in set(ref.counts) & set(cand.counts)})
        base: VerdictBase = {"device": self.device, "own_kernels": sorted(launches), "library_ops": library_ops}
        broken = op_rules(launches, each_set, self.verifier.strict, base)
        if broken is not None:
            return broken
        base["tolerance"] = tolerance_words(made.outputs[0] if made.outputs else [], server.tolerance)

        self.clock.lap("candidate")
        loaded = load_outputs(session.dir, "trials.sets", made.outputs, self.compare_on)
        if isinstance(loaded, str):
            return rejected(Code.unreadable_outputs, loaded, **base)
        outputs, _ = loaded
        refs = made.outputs
        # Every set is compared, not only up to the first wrong one: which sets fail is a fact too.
        # The tolerance as plain data from the trusted job: the problem is never imported here.
        tolerance = server.tolerance
        comparisons = [compare_outputs(out, ref, tolerance, self.compare_on, made.round_off)
                       for out, ref in zip(outputs, refs)]
        self.trial_comparisons = list(comparisons)
        failed = next((trial for trial, c in enumerate(comparisons) if not c.ok), None)
        if failed is not None:
            comparison = comparisons[failed]
            located = verdicts.localised(comparisons, outputs, refs, failed, tolerance, self.compare_on)
            if reruns.wanted(located, refs[failed]):  # run it twice more: what was never written, what moved
                load = functools.partial(load_output_sets, session.dir, like=[refs[failed]] * 2, device=self.compare_on)
                reruns.relate(located, refs[failed], reruns.rerun(session, failed, load), tolerance)
            reason = on_workload(self.layout.name_of(failed), f"{comparison.reason} (trial {failed + 1})")
            return verdicts.incorrect(comparison, reason, comparison.code, failed + 1, located, base)
        if made.grad_names:  # BACKWARD: once its forward outputs are right, the backward as the forward:
            # the rules on who did its work (its torch ops against the reference's backward), then every
            # trial set's gradients
            broken = backward_op_rules(launches, backward_op_claims(trials, made), base)
            if broken is not None:
                return broken
            wrong = self._gradients(session, made, tolerance, base)
            if wrong is not None:
                return wrong
        decoy_set, saved = decoy
        disturbed = load_output_sets(session.dir, "decoy.sets", [refs[decoy_set]] * saved, self.compare_on) \
            if saved else []
        if isinstance(disturbed, str):
            return rejected(Code.unreadable_outputs, disturbed, **base)
        if self._decoy(disturbed, made, decoy_set, tolerance):
            return rejected(Code.decoy_kernel, verdicts.DECOY_REASON, **base)
        compare_s = self.clock.lap("compare")

        judged = self._timed(session, server, refs, tolerance)
        if isinstance(judged, str):  # the child broke off while being timed
            return None
        if isinstance(judged, TimedFailure):
            return verdicts.timed_failure(judged, len(outputs), tolerance, self.compare_on, base)
        # A kernel faster than the reference's own work could be is judged on more sets (it may
        # exploit structure honestly, or skip work that the trial values happened not to need).
        extra = SCRUTINY_SETS if isinstance(judged, SpeedJudgement) and judged.less_work_than_reference else 0
        self.clock.lap("timing")
        fresh_made = self._fresh(session, server, made, comparisons, extra, base)
        if not isinstance(fresh_made, Made):  # wrong there, or the child broke off (None)
            return fresh_made
        worst_abs = max(c.max_abs_err for c in comparisons)
        worst_rel = max(c.rel_err for c in comparisons)
        for checks in self.all_checks:
            worst_abs, worst_rel = max(worst_abs, checks.worst_abs), max(worst_rel, checks.worst_rel)
        base["cost_s"] = {"compare_s": compare_s, **claimed_seconds(trials.get("overhead"))}
        return verdicts.correct(len(comparisons), worst_abs, worst_rel, comparisons,
                                {**made.round_off, **fresh_made.round_off}, judged, base,
                                timed_checked=sum(checks.checked for checks in self.all_checks))

    def _timed(self, session: JobSession, server: ReferenceServer, refs: list[list],
               tolerance: dict) -> SpeedJudgement | TimedFailure | Rehearsed | str | None:
        """The speed judgement (GPU, timing on), a TimedFailure where a timed call failed its check
        (fresh timing), a Rehearsed (the CPU's rehearsal), a string where the child broke off, else
        None. A problem with workloads: the timing phase once per workload, get_inputs' own first,
        both children switched to the next workload's sets between them (workloads.combine)."""
        verifier = self.verifier
        clock = Stopwatch()
        judged: SpeedJudgement | TimedFailure | Rehearsed | str | None = None
        rehearse = verifier.rehearse and self.fresh
        if verifier.time_it or rehearse:
            session.advance("timing")
            warm = server.answer("warm_up") or {}
            for name in ("import_s", "build_s"):  # in the trusted job, beside the candidate: not in fixed_s
                if isinstance(warm.get(name), (int, float)):
                    self.overlapped[f"baselines_{name}"] = float(warm[name])
            # NVML reads this worker's GPU: the one this process compares on, where it has one
            cuda_index = self.compare_on.index if self.compare_on.type == "cuda" else None
            each: dict[str, SpeedJudgement | Rehearsed] = {}
            ranges = self.layout.ranges() or {"": (0, 1)}
            for index, (name, (start, _)) in enumerate(ranges.items()):
                if index and not self._select_workload(session, server, name):
                    return "the candidate's process stopped answering when a workload's timing began"
                if self.fresh:  # its timed calls are checked against its own outputs' shapes
                    self.checks = TimedChecks(session, server, refs[start], tolerance, self.compare_on)
                    self.all_checks.append(self.checks)
                # no torch.compile on the CPU: its rehearsal's baselines need none
                skip = list(trusted_cache.CACHED_NAMES) if rehearse else self.kept.skip
                one = drive_timing(session, server, cuda_index, skip=skip, laps=self.clock,
                                   timed=self.kept.timed if not index else None, checks=self.checks, rehearse=rehearse,
                                   parts=self.timing_parts)
                if isinstance(one, TimedFailure):
                    self.failed_workload = (name, one.reason) if name else None
                    return timed_failure_on(name or None, one) if self.layout.counts else one
                if not isinstance(one, (SpeedJudgement, Rehearsed)):  # the child broke off
                    return one
                if self.kept.record is not None and isinstance(one, SpeedJudgement):
                    one = with_cached_baselines(one, self.kept.record)
                each[name] = one
            self.workload_speeds = {n: j for n, j in each.items() if n and isinstance(j, SpeedJudgement)}
            judged = combine(each)
        self.parent_costs["timing_s"] = clock.elapsed() if judged is not None else 0.0
        return judged

    def _select_workload(self, session: JobSession, server: ReferenceServer, name: str) -> bool:
        """Both children time workload `name` next (its sets, made with the trials); False where the
        candidate's child did not answer."""
        server.select_workload(name)
        if not session.send({"workload": {"name": name}}):
            return False
        answer = session.receive()
        return answer is not None and isinstance(answer.get("workload"), dict)

    def _with_workloads(self, verdict: Verdict) -> Verdict:
        """A problem with workloads: each workload's result (right on its sets; where timed, its speed)
        and the slowest one; a wrong set after the trials (fresh sets: get_inputs' own; a timed call:
        the workload timed) marks its workload."""
        if not self.layout.counts or not self.trial_comparisons:
            return verdict
        results = self.layout.results(self.trial_comparisons)
        if verdict.status in (Status.incorrect, Status.rejected) and verdict.code in (
                Code.stale_on_fresh_inputs, Code.wrong_on_extra_sets, Code.wrong_on_timed_call):
            name, why = self.failed_workload or (self.layout.names[0], verdict.reason)
            results[name].status, results[name].reason = Status.incorrect, why
        speed_results(self.workload_speeds, results)
        verdict.workloads = results
        verdict.slowest_workload = slowest(results)
        return verdict

    def _fresh(self, session: JobSession, server: ReferenceServer, made: Made, comparisons: list[Comparison],
               extra: int, base: VerdictBase) -> Verdict | Made | None:
        """One more call on fresh values in the buffers it was called with most, and `extra` more
        sets: the verdict where it fails there; the sets made where it is right on all of them
        (their comparisons appended to `comparisons`); None where the child broke off."""
        clock = Stopwatch()
        fresh_made = server.make(secret_seeds(1 + extra), variants=False)
        self.parent_costs["reference_s"] += clock.elapsed()
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
            return verdicts.fresh_check_failed(found, answer["fresh"].get("code"), len(made.outputs) + 1, base)
        loaded = load_outputs(session.dir, "fresh.sets", fresh_made.outputs, self.compare_on)
        if isinstance(loaded, str):
            return rejected(Code.unreadable_outputs, loaded, **base)
        fresh, _ = loaded
        tolerance = server.tolerance
        for index, (out, ref) in enumerate(zip(fresh, fresh_made.outputs)):
            checked = compare_outputs(out, ref, tolerance, self.compare_on, fresh_made.round_off)
            comparisons.append(checked)
            if not checked.ok:
                what = ("fresh inputs: right on the trial inputs but wrong on fresh inputs after timing (caching results?)"
                        if index == 0 else "extra input sets (it does less work than the reference): wrong on one")
                code = Code.stale_on_fresh_inputs if index == 0 else Code.wrong_on_extra_sets
                located = verdicts.localised([checked], [out], [ref], 0, tolerance, self.compare_on)
                if located is not None:  # None for a wrong type: then the verdict says so without a place
                    located.trial = len(comparisons)
                return verdicts.incorrect(checked, f"{what}: {checked.reason}", code, len(comparisons), located, base)
        return fresh_made

    def _gradients(self, session: JobSession, made: Made, tolerance: dict, base: VerdictBase) -> Verdict | None:
        """A BACKWARD problem: the gradients the child computed for every trial set (grads.sets: from
        the inputs and upstream gradients it was handed alone) against the reference's, which never
        left this process; the verdict where one is missing or wrong, its reason naming it."""
        loaded = load_outputs(session.dir, "grads.sets", made.grads, self.compare_on)
        if isinstance(loaded, str):
            return rejected(Code.unreadable_outputs, loaded, **base)
        grads, extra = loaded
        raw = extra.get("missing") if isinstance(extra, dict) else None
        # A claim that can only fail the candidate: names it says its ModelNew lacks
        missing = {n for n in raw if isinstance(n, str)} if isinstance(raw, list) else set()
        comparisons = [compare_gradients(out, ref, made.grad_names, missing, tolerance, self.compare_on)
                       for out, ref in zip(grads, made.grads)]
        failed = next((trial for trial, c in enumerate(comparisons) if not c.ok), None)
        if failed is None:
            return None
        # A set right forward but wrong backward is wrong: its workload says so (workloads.Layout.results)
        self.trial_comparisons = [g if c.ok and not g.ok else c for c, g in zip(self.trial_comparisons, comparisons)] \
            if len(self.trial_comparisons) == len(comparisons) else self.trial_comparisons
        comparison = comparisons[failed]
        out, ref = grads[failed], made.grads[failed]
        located = None
        at = comparison.output
        if comparison.code is Code.wrong_gradient and at < min(len(out), len(ref)) and type(out[at]) is torch.Tensor \
                and isinstance(ref[at], torch.Tensor) and out[at].shape == ref[at].shape and out[at].dtype == ref[at].dtype:
            located = verdicts.localised(comparisons, grads, made.grads, failed, tolerance, self.compare_on)
            if located is not None:
                located.gradient = made.grad_names[at]
        reason = on_workload(self.layout.name_of(failed), f"{comparison.reason} (trial {failed + 1})")
        return verdicts.incorrect(comparison, reason, comparison.code, failed + 1, located, base)

    def _decoy_runs(self, session: JobSession, signatures: list[int], sets: int) -> tuple[int, int] | None:
        """The decoy runs, asked for on a trial set drawn here once every trial forward ran (the
        candidate can't know it ahead, so can't be honest only there: review35): that set and how
        many disturbed outputs the child saved to decoy.sets; None where it broke off. None asked
        for multi-GB outputs (decoy_check off: the child waits for no request)."""
        if not self.decoy_check:
            return 0, 0
        choices = decoy_choices(signatures, sets)
        pick = choices[secrets.randbelow(len(choices))]
        if not session.send({"decoy": {"set": pick}}):
            return None
        answer = session.receive()
        got = answer.get("decoy") if answer else None
        if not isinstance(got, dict):
            return None
        saved = got.get("saved")
        return pick, saved if isinstance(saved, int) and not isinstance(saved, bool) and 0 <= saved <= 2 else 0

    def _decoy(self, disturbed: list[list], made: Made, index: int, tolerance: dict) -> bool:
        """A forward that is still right on set `index` with its own Triton kernels skipped, or with
        noise in everything they are given, left the work to something else (torch under other op
        names, numpy, a cached copy). Not judged where the reference is near zero or constant:
        unwritten memory can match those (the trusted job's warnings and round-off are its first
        set's; another set's reference is looked at here, every output within atol of zero skipped)."""
        ref = made.outputs[index]
        if made.warnings or made.round_off or degenerate_output_warnings(ref):
            return False
        if index and any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()
                         and float(t.detach().abs().amax()) <= tolerance_for(t.dtype, tolerance)["atol"] for t in ref):
            return False
        return any(compare_outputs(outputs, ref, tolerance, self.compare_on).ok for outputs in disturbed)

    def _interpreter_caveats(self, made: Made, outcome: JobOutcome) -> list[str]:
        """Known ways Triton's CPU interpreter differs from a GPU that a verdict here may reflect."""
        source = self.candidate.source
        if self.device != "cpu" or "triton" not in source:
            return []
        claims = outcome.result if isinstance(outcome.result, dict) else {}
        caveats = [interpreter_order.caveat(shuffled=claims.get("interpreter_shuffled") is True)]
        bf16 = any(isinstance(t, torch.Tensor) and t.dtype == torch.bfloat16 for outs in made.outputs for t in outs)
        if "tl.dot" in source and bf16:
            caveats.append("Triton's CPU interpreter computes bf16 tl.dot wrongly (triton-lang/triton#11584): "
                           "a mismatch here may be the interpreter's; check on a GPU")
        return caveats


def decoy_choices(signatures: list[int], sets: int) -> list[int]:
    """The sets the decoy runs may take: each with a later set of its input signature, so the forward's
    last call on those shapes was on other values, and an output buffer it keeps and writes every call
    holds another set's answer when its launches are skipped (relu_one_buffer_triton: picked, the last
    set read as a decoy). Set 0 where none has one, or the signatures are unknown (as before the pick)."""
    if len(signatures) != sets:
        return [0]
    return [i for i in range(sets) if signatures[i] in signatures[i + 1:]] or [0]


def op_claims(trials: dict, made: Made) -> list[tuple[SetOps, SetOps]]:
    """Each trial set's op record, the reference's beside the candidate's claim, the first set first;
    the first set's alone where either side has none of every set (its fields as before records per set)."""
    candidate = op_records.decode(trials, len(made.outputs))
    if candidate is None or len(made.set_ops) != len(made.outputs):
        return [(SetOps(made.op_counts, made.op_work), op_records.one(trials))]
    return list(zip(made.set_ops, candidate))


def op_rules(launches: list[str], each_set: list[tuple[SetOps, SetOps]], strict: bool, base: VerdictBase) -> Verdict | None:
    """The rules on what the candidate's process says it ran (verdicts.claimed_work) on every trial set,
    each against the reference's record on its own shapes, the first set first: a set where torch did
    the work fails as the first would (review35: a forward honest where it is recorded, torch elsewhere)."""
    for ref, cand in each_set:
        ops = sorted(ref.counts)
        broken = verdicts.claimed_work(launches, ops, set(cand.counts), sorted(set(ops) & set(cand.counts)), strict, base,
                                       reference_counts=ref.counts, candidate_counts=cand.counts,
                                       work=verdicts.Work(ref.work, cand.work, cand.own_used))
        if broken is not None:
            return broken
    return None


def backward_op_claims(trials: dict, made: Made) -> list[tuple[SetOps, SetOps]]:
    """A BACKWARD problem's backward op records, each trial set's, the reference's beside the
    candidate's claim; none where the trusted job has none of every set. A child that sends none
    claims its backward ran no torch op (claims: it can only lie its way out of these rules)."""
    if len(made.backward_ops) != len(made.outputs):
        return []
    raw = trials.get("backward_ops")
    candidate = op_records.decode(raw, len(made.outputs)) if isinstance(raw, dict) else None
    return list(zip(made.backward_ops, candidate or [SetOps()] * len(made.outputs)))


BACKWARD_WORDS = "its backward "


def backward_op_rules(launches: list[str], each_set: list[tuple[SetOps, SetOps]], base: VerdictBase) -> Verdict | None:
    """The forward's rules on who did the work (op_rules: verdicts.claimed_work, the same rule, not a
    second one) on each set's backward, against the reference's backward on its shapes; the reason
    says it is the backward. Autograd's own bookkeeping is in both records (each is autograd's call,
    recorded alike), and --strict's library ops are the forward's alone."""
    broken = op_rules(launches, each_set, False, base)
    if broken is None or broken.code is not Code.leaves_work_to_torch:
        return broken
    return dataclasses.replace(broken, reason=BACKWARD_WORDS + broken.reason,
                               feedback=BACKWARD_WORDS + broken.feedback)


def _hand_over(made: Made, job_dir: Path) -> Path:
    """The trial inputs into a fresh job dir, before any job code runs there."""
    with JobDir(job_dir) as held:
        return held.put(made.inputs_path, "inputs.sets")


def _hand_over_upstream(path: Path, job_dir: Path) -> Path:
    """A BACKWARD problem's upstream gradients into the job dir beside its inputs."""
    with JobDir(job_dir) as held:
        return held.put(path, "upstream.sets")


def load_outputs(held: JobDir, name: str, like: list[list], device: torch.device,
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


def load_output_sets(held: JobDir, name: str, like: list[list], device: torch.device) -> list[list] | str:
    """`load_outputs` without the file's extra dict (the reruns' sets)."""
    loaded = load_outputs(held, name, like, device)
    return loaded if isinstance(loaded, str) else loaded[0]

