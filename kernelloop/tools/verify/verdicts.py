"""The verdict builders: one Verdict per way a verification ends, its reason, code and feedback.

Each takes what the parent computed or observed (comparisons, the job's outcome, the speed
judgement) and the fields every verdict of one verification shares (`VerdictBase`); none reads
anything of the candidate's process but through those.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import TypedDict

import torch

from kernelloop.errors import error_line
from kernelloop.problem import Candidate
from kernelloop.records import STATUS_OF, Code, InputSet, Localisation, Status, Verdict, code_of, rejected
from kernelloop.sandbox.runner import JobOutcome
from kernelloop.tools.verify.claims import claimed_names
from kernelloop.tools.verify.compare import Comparison, tolerance_for
from kernelloop.tools.verify.localise import describe, irregular, localise
from kernelloop.tools.verify.output_watch import FLOOD_BYTES
from kernelloop.tools.verify.speed import SpeedJudgement
from kernelloop.tools.verify.static_check import first_broken_rule
from kernelloop.tools.verify.timed_checks import TimedFailure
from kernelloop.tools.verify.timing_driver import Rehearsed


class VerdictBase(TypedDict, total=False):
    """The Verdict fields shared by every verdict of one verification (splatted into Verdict and rejected)."""

    device: str
    own_kernels: list[str]
    library_ops: list[str]
    cost_s: dict[str, float]
    tolerance: str  # the tolerance outputs are compared with, once they are (compare.tolerance_words)


PHASE_WORDS = {"compile": "loading, compiling and making its first call", "trials": "running the trials",
               "rerun": "running a failed set again with other poisons",
               "timing": "being timed", "fresh": "running on fresh inputs"}
LIMIT_SIGNALS = {"SIGXCPU": "the CPU-time limit", "SIGXFSZ": "the file-size limit"}


def phase_words(phase: str) -> str:
    return PHASE_WORDS.get(phase, phase)


def signal_name(code: int) -> str:
    try:
        name = signal.Signals(-code).name
        return f"{name}: hit {LIMIT_SIGNALS[name]}" if name in LIMIT_SIGNALS else name
    except ValueError:
        return f"signal {-code}"


# -- before anything runs -------------------------------------------------------------------------
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


# -- on what the candidate's process says it ran (claims) ------------------------------------------
COPY = "copy"  # _runtime.COPY: the elements the forward's copies moved (clone, copy_, _to_copy)


@dataclass(frozen=True)
class Work:
    """What each side's torch ops did, op by op, on one input set (_runtime.OpRecorder; each trial set
    is judged, against the reference's record on its shapes: verification.op_rules):
    elements of each op's inputs, the copies' elements as COPY; and, for the candidate, the elements of
    its own kernels' outputs that its forward consumed or returned (what a copy it dropped may have
    become). Empty where a side did not report it: the counts decide then."""

    reference: dict[str, int] = field(default_factory=dict)
    candidate: dict[str, int] = field(default_factory=dict)
    own_used: int = 0

    def left_to_torch(self, reference_counts: dict[str, int], candidate_counts: dict[str, int]) -> list[str] | None:
        """The reference's ops torch still does in the candidate, or None where its own kernels took
        at least one over. An op is taken over where torch runs it on fewer elements than the
        reference does, and either at most half of them (a row sum whose own kernel leaves 5 partials
        a row for torch.sum; a scan whose torch.cumsum scans 8 tile totals a row; a full reduction
        beside a trivial kernel is not, nor one that leaves the kernel a row's last element) or in
        fewer calls (a ResNet whose residual adds are its own still runs BatchNorm's add_; the count
        rule before this one). A copy is taken over where its own kernels' outputs that the forward
        used hold at least the elements torch no longer copies: a copy dropped for a view, beside a
        kernel that only sets a flag, is still torch's (redteam3)."""
        taken = []
        for op, elements in self.reference.items():
            done = self.candidate.get(op, 0)
            if done >= elements:
                continue
            if op == COPY:
                if self.own_used >= elements - done:
                    taken.append(op)
            elif 2 * done <= elements or candidate_counts.get(op, 0) < reference_counts.get(op, 0):
                taken.append(op)
        return None if taken else sorted(self.reference)


def claimed_work(launches: list[str], reference_ops: list[str], candidate_ops: set[str], library_ops: list[str],
                 strict: bool, base: VerdictBase, reference_counts: dict[str, int] | None = None,
                 candidate_counts: dict[str, int] | None = None, work: Work | None = None) -> Verdict | None:
    """Rules on what the candidate's process says it ran. Claims: it can only lie its way out of
    these, never into a speed it doesn't have (speed and correctness are decided by the parent).
    It leaves the work to torch when torch still does the reference's work: where each op's work is
    known (Work: elements, on the shapes each side ran), no op (or copy) of the reference taken over
    (Work.left_to_torch); else, where counts are known, every compute op at least as many times (a
    ResNet whose 8 residual adds are its own still runs BatchNorm's add_); else every op by name.
    Its op-agnostic companion: it also leaves the work to torch when its torch ops, whatever their
    names, do at least as much in all as the reference's: elements where work is known (a copy
    kernel, then clamp_min on every element for the reference's relu), else calls (issue 35: a gate
    kernel beside torch's softmax)."""
    if not launches:
        return rejected(Code.no_own_kernel,
                        "no kernel of its own ran: forward launched no Triton kernel and no load_inline function",
                        **base)
    ref_counts, cand_counts = reference_counts or {}, candidate_counts or {}
    by_work = work is not None and bool(work.reference) and bool(work.candidate or work.own_used)
    if work is not None and by_work:
        left = work.left_to_torch(ref_counts, cand_counts)
        if left is not None:
            return rejected(Code.leaves_work_to_torch,
                            f"leaves the work to torch: torch still does the reference's work "
                            f"({', '.join(f'{op} {work.reference[op]:,} elements' for op in left)}) beside its own "
                            "kernels", **base)
    elif reference_ops and set(reference_ops) <= candidate_ops and (
            not (ref_counts and cand_counts) or all(cand_counts.get(op, 0) >= count for op, count in ref_counts.items())):
        return rejected(Code.leaves_work_to_torch,
                        f"leaves the work to torch: every compute op of the reference ({', '.join(reference_ops)}) "
                        "still runs through torch beside its own kernels", **base)
    if work is not None and by_work:
        reference_work, candidate_work = sum(work.reference.values()), sum(work.candidate.values())
        if candidate_work >= reference_work:
            return rejected(Code.leaves_work_to_torch,
                            f"leaves the work to torch: torch still runs its ops ({', '.join(sorted(work.candidate))}) "
                            f"on {candidate_work:,} elements beside its own kernels, as many as the reference's "
                            f"{reference_work:,}: its own kernels take none of the reference's work over", **base)
        reference_total = candidate_total = 0  # elements decided: calls say less
    else:
        reference_total, candidate_total = sum(ref_counts.values()), sum(cand_counts.values())
    if reference_total and candidate_total >= reference_total:
        return rejected(Code.leaves_work_to_torch,
                        f"leaves the work to torch: torch still runs {candidate_total} compute op call(s) "
                        f"({', '.join(sorted(cand_counts))}) beside its own kernels, as many as the reference's "
                        f"{reference_total}: its own kernels take none of the reference's work over", **base)
    if strict and library_ops:
        return rejected(Code.library_ops_strict, f"library ops kept with --strict: {', '.join(library_ops)}", **base)
    return None


DECOY_REASON = ("decoy kernel: with its own Triton kernels skipped or given noise the output is still right, "
                "so the work is done elsewhere (torch, numpy or a copy); compute the result in your own kernels")


def fresh_check_failed(found: str, claimed_code: object, trials: int, base: VerdictBase) -> Verdict:
    """The child's own input checks failed on the fresh inputs: its code is a claim, and only the
    codes of those checks stand."""
    code = code_of(claimed_code)
    if code is Code.wrong_type:
        return Verdict(status=Status.incorrect, reason=found[:300], code=code, trials=trials, **base)
    kept = (Code.writes_to_inputs, Code.aliases_input, Code.changes_precision)
    return rejected(code if code in kept else Code.unknown, found[:300], **base)


# -- on the outputs, compared by the parent ---------------------------------------------------------
def incorrect(comparison: Comparison, reason: str, code: Code, trials: int, located: Localisation | None,
              base: VerdictBase) -> Verdict:
    """An incorrect verdict with where it is wrong: its facts go to the coder in the feedback."""
    facts = describe(located) if located is not None else []
    feedback = reason + ("\n\nWhere it is wrong:\n" + "\n".join(f"- {line}" for line in facts) if facts else "")
    return Verdict(status=Status.incorrect, reason=reason, code=code, max_abs_err=comparison.max_abs_err,
                   rel_err=comparison.rel_err, trials=trials, localisation=located, feedback=feedback,
                   tolerance_would_pass=list(comparison.would_pass), **base)


def localised(comparisons: list[Comparison], outputs: list[list], refs: list[list], failed: int, tolerance: dict,
              device: torch.device) -> Localisation | None:
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


def timed_failure(failed: TimedFailure, trials: int, tolerance: dict, device: torch.device,
                  base: VerdictBase) -> Verdict:
    """A timed call that failed its check (fresh timing): wrong (where it is wrong, as for any wrong
    output), or rejected (its kept output contradicts its digest, or can't be read)."""
    if failed.code is not Code.wrong_on_timed_call or failed.comparison is None:
        return rejected(failed.code, failed.reason[:300], **base)
    located = localised([failed.comparison], [failed.outputs], [failed.refs], 0, tolerance, device)
    return incorrect(failed.comparison, failed.reason, failed.code, trials + 1, located, base)


def correct(trials: int, worst_abs: float, worst_rel: float, comparisons: list[Comparison],
            round_off: dict[int, float], judged: SpeedJudgement | Rehearsed | None, base: VerdictBase,
            timed_checked: int = 0) -> Verdict:
    """Right on every set (and on `timed_checked` timed calls picked at random, with fresh timing):
    its warnings (library ops, a degenerate reference, the CPU) and, where it was timed, its speed."""
    verdict = Verdict(status=Status.correct, reason=f"correct on {trials} input sets", code=Code.correct,
                      trials=trials, max_abs_err=worst_abs, rel_err=worst_rel, **base)
    library_ops = base.get("library_ops") or []
    if library_ops:
        verdict.warnings.append(f"library ops still run through torch: {', '.join(library_ops)}")
    verdict.degenerate_outputs = sorted({index for c in comparisons for index in c.degenerate})
    if verdict.degenerate_outputs:
        verdict.warnings.append(degenerate_note(verdict.degenerate_outputs, round_off))
    if verdict.device == "cpu":
        verdict.warnings.append("CPU (Triton interpreter): correctness only, no speed measured")
    if isinstance(judged, Rehearsed):
        verdict.warnings.append(f"CPU: the timing protocol ran on host clocks ({judged.checked} timed calls on "
                                "fresh values checked); nothing it timed is a speed")
    timed_calls = f" and {timed_checked} timed calls picked at random" if timed_checked else ""
    verdict.feedback = (f"Correct on {trials} input sets{timed_calls} "
                        f"(max_abs_err={verdict.max_abs_err:.3g}, rel_err={verdict.rel_err:.3g}).")
    if isinstance(judged, SpeedJudgement):
        verdict = with_speed(verdict, judged)
        if verdict.degenerate_outputs and verdict.win:
            verdict.win = False  # as fast as it likes: zeros would be as right
    verdict.own_kernel_evidence = PARENT_TIMED_WIN if verdict.win else IN_PROCESS_CLAIM
    if not verdict.win:
        verdict.warnings.append(UNVERIFIED_NOTE)
    return verdict


IN_PROCESS_CLAIM, PARENT_TIMED_WIN = "in-process claim", "parent-timed win"
UNVERIFIED_NOTE = ("own kernels unverified: only the candidate's own process says its kernels ran and did the work "
                   "(launches, ops, the decoy check: an in-process claim); no faster-than-eager time from the parent "
                   "bears it out")


def claims_unverified(verdict: Verdict) -> Verdict:
    """--strict-claims: a correct verdict whose own-kernel evidence is only an in-process claim is refused."""
    return rejected(Code.claims_unverified, "not judged correct: --strict-claims, and its own kernels doing the work "
                    "is only an in-process claim (no faster-than-eager time from the parent bears it out)",
                    device=verdict.device, own_kernels=verdict.own_kernels, library_ops=verdict.library_ops,
                    own_kernel_evidence=verdict.own_kernel_evidence, isolation=verdict.isolation,
                    containment=verdict.containment, warnings=verdict.warnings, stdout_tail=verdict.stdout_tail,
                    stderr_tail=verdict.stderr_tail, cost_s=verdict.cost_s)


def degenerate_note(outputs: list[int], round_off: dict[int, float]) -> str:
    """The warning of a verdict judged on a degenerate reference (compare.py)."""
    why = "; ".join(f"output {i}: " + (f"its error against float64 is {round_off[i]:.2g} of its norm" if i in round_off
                                         else "all zeros") for i in outputs)
    return (f"degenerate reference ({why}): judged by the absolute tolerance only; a kernel returning zeros "
            "passes too, so this is no win")


def with_speed(verdict: Verdict, judged: SpeedJudgement) -> Verdict:
    """Attach timings and cross-checks to a correct verdict; a failed cross-check rejects it."""
    verdict.timings, verdict.speedups, verdict.speedup = judged.timings, judged.speedups, judged.speedup
    verdict.noise_floor, verdict.win, verdict.gpu = judged.noise_floor, judged.win, judged.gpu
    verdict.profile = judged.profile
    verdict.speed_source = judged.speed_source
    verdict.suspicious += judged.suspicious
    verdict.warnings += judged.warnings
    if judged.rejection:
        return verdict.model_copy(update={"status": Status.rejected, "reason": judged.rejection,
                                          "code": judged.rejection_code or Code.unknown,
                                          "feedback": judged.rejection, "speedup": None, "win": None})
    verdict.feedback += f" Speedup over eager {judged.speedup:.3f}x (noise floor {judged.noise_floor:.3f})."
    return verdict


# -- on how the candidate's job ended ---------------------------------------------------------------
def judging_failed(exc: Exception, device: str) -> Verdict:
    """Any error while judging what the candidate's process sent becomes a verdict, never a crash."""
    return rejected(Code.judging_failed, f"judging failed on what the candidate's process sent: {error_line(exc)[:300]}",
                    device=device)


def output_flood(flood: str, device: str) -> Verdict:
    """The job printed past what a job may (however it would have ended otherwise)."""
    return Verdict(status=Status.runtime_error, code=Code.output_flood, device=device,
                   reason=f"output flood: {flood} printed, over the {FLOOD_BYTES >> 20} MiB a job may "
                          f"print (killed as it crossed it)")


def out_of_budget(device: str, time_left_s: float, phase: str | None = None) -> Verdict:
    """A verification the caller's budget (a run's) ended: before its job started (`phase` None),
    or while it was `phase`."""
    where = "before its job started" if phase is None else f"while {phase_words(phase)} (killed with its process group)"
    return Verdict(status=Status.timeout, code=Code.timed_out, device=device,
                   reason=f"cut at the run's budget ({max(0.0, time_left_s):.0f}s were left when it began) {where}")


def ended_early(outcome: JobOutcome, device: str, compile_timeout_s: float, run_timeout_s: float) -> Verdict:
    """The verdict of a job that ended before the parent had what it needed."""
    base: VerdictBase = {"device": device}
    if outcome.timed_out:
        limit = compile_timeout_s if outcome.phase == "compile" else run_timeout_s
        # The real time too: a limit counts the parent's waits and walks, the job's wall clock all of it.
        reason = (f"timed out after {limit:g}s while {phase_words(outcome.phase)} (killed with its process group "
                  f"{outcome.elapsed_s:.0f}s after the job started)")
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
    return Verdict(status=Status.runtime_error, reason=failure_reason(outcome), code=failure_code(outcome), **base)


def not_isolated(verdict: Verdict, outcome: JobOutcome, isolation: str) -> Verdict:
    """--strict judges nothing it could not contain."""
    return rejected(Code.not_isolated, "not judged: --strict, and the candidate's job was not "
                    f"isolated ({outcome.box.get('why', 'no report of its box')})",
                    device=verdict.device, isolation=isolation, containment=outcome.box,
                    stdout_tail=verdict.stdout_tail, stderr_tail=verdict.stderr_tail)


def failure_code(outcome: JobOutcome) -> Code:
    if outcome.notes:
        return Code.worker_died
    return Code.crashed if outcome.exit_code is not None and outcome.exit_code < 0 else Code.exited


def failure_reason(outcome: JobOutcome) -> str:
    code = outcome.exit_code
    if outcome.notes:
        hint = " (did it signal its parent?)" if any("worker died" in note for note in outcome.notes) else ""
        return f"crashed: {'; '.join(outcome.notes)} while {phase_words(outcome.phase)}{hint}"
    if code is not None and code < 0:
        return f"crashed ({signal_name(code)}) while {phase_words(outcome.phase)}"
    return (f"exited with code {code} while {phase_words(outcome.phase)} before reporting "
            "(sys.exit, os._exit or a fatal error)")


def with_stderr(reason: str, outcome: JobOutcome) -> str:
    """Text for the coder: the reason (and where it is wrong), then the end of what the candidate
    printed to stderr."""
    stderr = "\n".join(outcome.stderr_tail.strip().splitlines()[-25:])
    return reason + (f"\n\nstderr (end):\n{stderr}" if stderr else "")
