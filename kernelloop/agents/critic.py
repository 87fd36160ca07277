"""The critic: turns a round's verdicts and profiles into concrete next steps for the coders.

The rules below read what the verifier says in typed form (the verdict's status and code, where a
wrong output is wrong, the library ops left in torch, the timings, the Profile record of a timed
kernel) and the roofline facts, and name the fix: what failed and where, memory- vs compute-bound,
host-bound, grid, spills, occupancy, stalls. They never match words in a reason. They are instant
and deterministic. With `use_model`, the same findings also go to the model for advice in its own
words (one more call per round).
"""

from __future__ import annotations

import re

from kernelloop.agents.calls import ask
from kernelloop.agents.critic_facts import profile_lines, wrong_output_fixes
from kernelloop.agents.planner import ReferenceFacts, backward_line, workloads_line
from kernelloop.agents.prompts import render
from kernelloop.agents.records import (
    Attempt,
    Critique,  # noqa: F401  (re-exported)
)
from kernelloop.agents.turns import ChatClient, KeyedChatClient, Message, ModelTurn, ReplayExhausted, turn_key
from kernelloop.errors import error_line
from kernelloop.records import Code, Status, Verdict

_REJECTED_FIX = {
    Code.forbidden_import: "import only torch, triton, math, numpy, typing and functools",
    Code.forbidden_call: "drop eval/exec/open/getattr tricks: plain code only",
    Code.try_except: "remove the try/except: no fallback path",
    Code.reference_model: "don't subclass, name or call the reference `Model`",
    Code.monkeypatch: "don't assign attributes of torch, triton or any module",
    Code.stream_or_thread: "no extra streams, events or threads: launch on the current stream",
    Code.no_own_kernel: "launch your own kernel in forward (a @triton.jit kernel or the load_inline op)",
    Code.leaves_work_to_torch: "move the reference's compute ops into your kernel",
    Code.library_ops_strict: "replace the torch ops still running with your own kernels",
    Code.decoy_kernel: "compute the result in your own kernels, not in torch beside a kernel that does nothing",
    Code.writes_to_inputs: "write results into fresh output tensors, never into the inputs",
    Code.aliases_input: "return a new tensor, not a view of an input",
    Code.changes_precision: "leave torch's precision settings alone; choose TF32 in your own kernels (tl.dot)",
    Code.faster_than_possible: "do the real work on every call: no cached or skipped results",
    Code.timing_contradicted: "time nothing yourself and touch no timers",
}




def _first_error_line(verdict: Verdict) -> str:
    for text in (verdict.feedback, verdict.stderr_tail):
        for line in reversed(text.strip().splitlines()):
            if "error" in line.lower():
                return line.strip()[:300]
    return verdict.reason


def _failure_fixes(attempt: Attempt) -> list[str]:
    """What to change in an attempt that is not correct, read from its verdict."""
    if attempt.verdict is None:
        return [f"the model call failed ({attempt.model_error}): write the candidate again"]
    verdict, code = attempt.verdict, attempt.verdict.code
    fixes: list[str] = []
    if verdict.status is Status.compile_error:
        if code is Code.cut_off:
            fixes.append("the reply was cut off: write a shorter file (fewer autotune configs, no commentary)")
        elif code in (Code.no_modelnew, Code.modelnew_failed):
            fixes.append("define a top-level `class ModelNew(nn.Module)` whose constructor takes Model's arguments "
                         f"and works: {verdict.reason}")
        elif code is Code.syntax:
            fixes.append(f"fix the code so it parses: {verdict.reason}")
        else:
            fixes.append(f"the kernel did not compile: {_first_error_line(verdict)}; check tl.constexpr "
                         "arguments, power-of-two tl.arange sizes and tl.dot operand dtypes")
    elif verdict.status is Status.runtime_error:
        if code is Code.out_of_memory:
            fixes.append("out of memory: allocate only the outputs, check buffer sizes and the grid")
        elif code is Code.problem_error:
            fixes.append(f"the problem's reference failed, not the candidate: {verdict.reason}")
        elif code is Code.crashed:
            fixes.append("the process crashed (likely an illegal memory access): mask every load/store with "
                         "offsets < size and check the pointer arithmetic against the strides")
        else:
            fixes.append(f"it failed at run time: {_first_error_line(verdict)}")
    elif verdict.status is Status.incorrect:
        fixes += _workload_fixes(verdict) + _incorrect_fixes(verdict)
    elif verdict.status is Status.rejected:
        rule = _REJECTED_FIX.get(code)
        fixes.append(f"rejected ({verdict.reason}): {rule or 'follow the rules in the prompt'}")
        if verdict.profile:  # a rejection by the speed rules: what the profile saw
            fixes += profile_lines(verdict.profile, verdict)
    elif verdict.status is Status.timeout:
        fixes.append("it timed out: check loop bounds, the grid size and the number of autotune configs")
    return fixes


def _workload_fixes(verdict: Verdict) -> list[str]:
    """A problem with workloads: which workload it is wrong on, and which it is right on."""
    wrong = [name for name, result in verdict.workloads.items() if result.status is not Status.correct]
    right = [name for name, result in verdict.workloads.items() if result.status is Status.correct]
    if not wrong:
        return []
    names = lambda items: ", ".join(f"'{n}'" for n in items)  # noqa: E731
    return [f"wrong on workload {names(wrong)}" + (f" (right on {names(right)})" if right else "")
            + ": make it handle every workload's shapes (no sizes hard-coded; mask and loop over any extent)"]


def gradient_named(verdict: Verdict) -> str:
    """The gradient a BACKWARD verdict failed on, as its reason or localisation names it."""
    if verdict.localisation is not None and verdict.localisation.gradient:
        return f"the gradient of {verdict.localisation.gradient}"
    found = re.search(r"gradient of ([A-Za-z0-9_.]+(?: [0-9]+)?)", verdict.reason)
    return f"the gradient of {found.group(1)}" if found else "a gradient"


def _incorrect_fixes(verdict: Verdict) -> list[str]:
    """A wrong output: what the code and the localisation point at."""
    code, rel = verdict.code, verdict.rel_err
    fixes: list[str] = []
    if code in (Code.stale_on_fresh_inputs, Code.wrong_on_timed_call):
        fixes.append("the result depends on cached state: recompute everything on every call")
    elif code is Code.wrong_type:
        fixes.append(f"{verdict.reason}: return exactly the reference's shapes and dtypes as plain tensors")
    elif code is Code.no_gradient:
        fixes.append(f"{gradient_named(verdict)} is missing (the backward is judged): wrap each kernel in a "
                     "torch.autograd.Function whose backward returns the gradient of every input it takes, "
                     "return outputs that require grad (no .detach()), and name the parameters as the "
                     "reference's (named_parameters())")
    elif code is Code.wrong_gradient:
        fixes.append(f"the forward is right but {gradient_named(verdict)} is wrong: check the backward's "
                     "formula (derive it from the forward), which saved tensors it reads, and its reductions "
                     "over the broadcast dimensions")
    if verdict.localisation is not None:
        return fixes + wrong_output_fixes(verdict.localisation)
    if code in (Code.mismatch, Code.off_on_most, Code.biased) and rel is not None and rel >= 0.5:
        fixes.append(f"the result is wrong, not imprecise (rel_err {rel:.2g}): check indexing, strides, the "
                     "reduction axis and which elements each program writes")
    elif code in (Code.mismatch, Code.off_on_most, Code.biased):
        fixes.append(f"close but outside tolerance (max_abs_err {verdict.max_abs_err}, rel_err {rel}): "
                     "accumulate in float32 and keep the reference's order of operations")
    elif code is Code.nonfinite:
        fixes.append("NaNs in the output: every output element must be written, and masked loads need `other=`")
    elif not fixes:
        fixes.append(f"{verdict.reason}: compare with the reference element by element")
    return fixes


def _speed_fixes(attempt: Attempt, verdict: Verdict, facts: ReferenceFacts | None, target: float | None,
                 baseline: str) -> tuple[list[str], str | None]:
    """Where a correct attempt (whose verdict is `verdict`) spends its time and what would make it faster."""
    fixes: list[str] = []
    speedup = attempt.speedup_vs(baseline)
    if speedup is None:
        return ["correct; speed was not measured here (no GPU timing)", *profile_lines(None, verdict)], None
    profile = verdict.profile
    bound = profile.roofline.bound if profile is not None and profile.roofline is not None else \
        (facts.bound if facts else None)
    if target and speedup < target:
        fixes.append(f"{speedup:.3g}x over {baseline}, target {target:.3g}x")
    if speedup < 1:
        fixes.append("slower than the reference: fewer launches (fuse more) and coalesced, vectorized access")
    slowest = verdict.workloads.get(verdict.slowest_workload)
    if slowest is not None and slowest.speedup is not None and len(verdict.workloads) > 1:
        fixes.append(f"slowest on workload '{slowest.name}' ({slowest.speedup:.3g}x over eager; the speed is the "
                     "geometric mean over every workload): tune for its shapes too")
    fixes += profile_lines(profile, verdict)
    if verdict.library_ops:
        fixes.append(f"still runs {', '.join(verdict.library_ops)} in torch: move them into your kernels")
    return fixes, bound


def critique_round(attempts: list[Attempt], best: Attempt | None, facts: ReferenceFacts | None = None,
                 target: float | None = None, baseline: str = "eager") -> Critique:
    """The rule-based critique of one round's attempts."""
    round_ = max((a.round for a in attempts), default=0)
    critique = Critique(round=round_)
    for attempt in sorted(attempts, key=lambda a: a.index):
        if attempt.verdict is not None and attempt.verdict.status is Status.correct:
            fixes, bound = _speed_fixes(attempt, attempt.verdict, facts, target, baseline)
            critique.bound = critique.bound or bound
        else:
            fixes = _failure_fixes(attempt)
        critique.findings.append(f"{attempt.id}: {attempt.outcome(baseline)}")
        critique.per_attempt[attempt.id] = fixes
    if best is not None and best.verdict is not None and best.verdict.status is Status.correct:
        critique.next_steps.append(f"start from the best kernel ({best.id}, {best.outcome(baseline)}) and make "
                                   "it faster without breaking correctness")
    elif best is not None and best.code:
        critique.next_steps.append(f"no attempt is correct yet: get correctness first; {best.id} came closest")
    return critique


def advise(critique: Critique, client: ChatClient | KeyedChatClient, problem_name: str, problem_source: str,
           plan: str, best_code: str) -> tuple[Critique, ModelTurn | None]:
    """Ask the model to turn the findings into next steps; on endpoint failure keep the rules' critique."""
    text = render("critic.j2", problem_name=problem_name, problem_source=problem_source, plan=plan,
                  round=critique.round, best_code=best_code, workloads=workloads_line(problem_source),
                  backward=backward_line(problem_source),
                  findings=critique.findings + [f"{k}: {'; '.join(v)}" for k, v in critique.per_attempt.items()])
    try:
        turn = ask(client, turn_key("critic", f"r{critique.round}"), [Message(role="user", content=text)])
    except ReplayExhausted:
        raise
    except Exception as exc:  # any endpoint failure: the rules' critique stands, the error is kept
        return critique.model_copy(update={"model_error": error_line(exc)}), None
    return critique.model_copy(update={"advice": turn.content.strip(), "origin": "model"}), turn
