"""The critic: turns a round's verdicts and profiles into concrete next steps for the coders.

The rules below read what the verifier already says (status, reason vocabulary, errors,
library ops left in torch, timings, profile) and the roofline facts, and name the fix: what
failed and where, memory- vs compute-bound, occupancy, stalls. They are instant and
deterministic. With `use_model`, the same findings also go to the model for advice in its
own words (one more call per round).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kernelloop.agents.coder import Attempt
from kernelloop.agents.planner import ReferenceFacts
from kernelloop.agents.prompts import render
from kernelloop.agents.turns import ChatClient, KeyedChatClient, Message, ModelTurn, ReplayExhausted, ask, turn_key
from kernelloop.errors import error_line
from kernelloop.results import Status

_REJECTED_FIX = {
    "forbidden import": "import only torch, triton, math, numpy, typing and functools",
    "forbidden call": "drop eval/exec/open/getattr tricks: plain code only",
    "try/except": "remove the try/except: no fallback path",
    "reference model": "don't subclass, name or call the reference `Model`",
    "monkeypatch": "don't assign attributes of torch, triton or any module",
    "stream or thread": "no extra streams, events or threads: launch on the current stream",
    "no kernel of its own": "launch your own kernel in forward (a @triton.jit kernel or the load_inline op)",
    "leaves the work to torch": "move the reference's compute ops into your kernel",
    "library ops": "replace the torch ops still running with your own kernels",
    "writes to its inputs": "write results into fresh output tensors, never into the inputs",
    "aliases an input": "return a new tensor, not a view of an input",
}


class Critique(BaseModel):
    """The review of one round: facts, then what to do."""

    round: int
    findings: list[str] = Field(default_factory=list, description="what happened, one line per attempt")
    per_attempt: dict[str, list[str]] = Field(default_factory=dict, description="fixes for each attempt's lineage")
    next_steps: list[str] = Field(default_factory=list, description="what every coder should do next")
    bound: str | None = Field(default=None, description="'memory' or 'compute' when known")
    advice: str = Field(default="", description="the model's next steps, when the critic used the model")
    origin: Literal["rules", "model"] = "rules"
    model_error: str | None = None
    turn_file: str | None = None
    turn_sha256: str | None = None

    def for_coder(self, attempt_id: str | None) -> str:
        """The critique as one coder should read it: its own fixes first."""
        lines = [f"- {step}" for step in self.per_attempt.get(attempt_id or "", [])]
        lines += [f"- {step}" for step in self.next_steps]
        if self.advice:
            lines.append(self.advice.strip())
        return "\n".join(lines)


def _first_error_line(attempt: Attempt) -> str:
    verdict = attempt.verdict
    for text in (verdict.feedback, verdict.stderr_tail):
        for line in reversed(text.strip().splitlines()):
            if "error" in line.lower():
                return line.strip()[:300]
    return verdict.reason


def _failure_fixes(attempt: Attempt) -> list[str]:
    """What to change in an attempt that is not correct, read from its verdict."""
    if attempt.verdict is None:
        return [f"the model call failed ({attempt.model_error}): write the candidate again"]
    verdict, reason = attempt.verdict, attempt.verdict.reason.lower()
    fixes: list[str] = []
    if verdict.status is Status.compile_error:
        if "cut off" in reason:
            fixes.append("the reply was cut off: write a shorter file (fewer autotune configs, no commentary)")
        elif "modelnew" in reason:
            fixes.append("define a top-level `class ModelNew(nn.Module)` whose constructor takes Model's arguments "
                         f"and works: {verdict.reason}")
        elif "syntax" in reason:
            fixes.append(f"fix the code so it parses: {verdict.reason}")
        else:
            fixes.append(f"the kernel did not compile: {_first_error_line(attempt)}; check tl.constexpr "
                         "arguments, power-of-two tl.arange sizes and tl.dot operand dtypes")
    elif verdict.status is Status.runtime_error:
        if "out of memory" in reason:
            fixes.append("out of memory: allocate only the outputs, check buffer sizes and the grid")
        elif "crashed" in reason:
            fixes.append("the process crashed (likely an illegal memory access): mask every load/store with "
                         "offsets < size and check the pointer arithmetic against the strides")
        else:
            fixes.append(f"it failed at run time: {_first_error_line(attempt)}")
    elif verdict.status is Status.incorrect:
        rel = verdict.rel_err
        if "mismatch" in reason and rel is not None and rel >= 0.5:
            fixes.append(f"the result is wrong, not imprecise (rel_err {rel:.2g}): check indexing, strides, the "
                         "reduction axis and which elements each program writes")
        elif "mismatch" in reason:
            fixes.append(f"close but outside tolerance (max_abs_err {verdict.max_abs_err}, rel_err {rel}): "
                         "accumulate in float32 and keep the reference's order of operations")
        elif "nan" in reason:
            fixes.append("NaNs in the output: every output element must be written, and masked loads need `other=`")
        elif "fresh inputs" in reason:
            fixes.append("the result depends on cached state: recompute everything on every call")
        else:
            fixes.append(f"{verdict.reason}: return exactly the reference's shapes and dtypes as plain tensors")
    elif verdict.status is Status.rejected:
        rule = next((fix for key, fix in _REJECTED_FIX.items() if key in reason), None)
        fixes.append(f"rejected ({verdict.reason}): {rule or 'follow the rules in the prompt'}")
    elif verdict.status is Status.timeout:
        fixes.append("it timed out: check loop bounds, the grid size and the number of autotune configs")
    return fixes


def _bound_of(roof: dict, facts: ReferenceFacts | None) -> str | None:
    """'memory' or 'compute' from the verifier's roofline section, else from the planner's facts."""
    if roof.get("bound"):
        return roof["bound"]
    compute = roof.get("compute_floor_ms", roof.get("compute_ms"))
    memory = roof.get("memory_floor_ms", roof.get("memory_ms"))
    if compute is not None and memory is not None:
        return "compute" if compute > memory else "memory"
    return facts.bound if facts else None


def _profile_lines(profile: dict) -> list[str]:
    """Library share, top kernels and (when ncu ran) occupancy and stalls, as findings."""
    lines = []
    split = profile.get("kernel_split") or {}
    if split.get("library_share", 0.0) > 0.2:
        lines.append(f"{100 * split['library_share']:.0f}% of device time is in library kernels "
                     f"({', '.join(sorted(split.get('library_kernels', {}))[:3])}): replace them with your own")
    top = [k for k in profile.get("kernels") or [] if isinstance(k, dict)][:3]
    if top:
        lines.append("top kernels: " + ", ".join(f"{k.get('name', '?')[:40]} {k.get('percent', 0):.0f}%" for k in top))
    for entry in (profile.get("ncu") or [])[:1]:
        occupancy = entry.get("occupancy_pct")
        if occupancy is not None and occupancy < 30:
            lines.append(f"low occupancy ({occupancy:.0f}%, {entry.get('registers_per_thread', '?')} registers per "
                         "thread): smaller tiles or fewer live values per thread")
        if entry.get("top_stalls"):
            stalls = ", ".join(f"{reason} {value:.2g}" for reason, value in entry["top_stalls"])
            lines.append(f"top warp stalls in {entry.get('kernel', 'the kernel')[:40]}: {stalls}")
    return lines


def _speed_fixes(attempt: Attempt, facts: ReferenceFacts | None, target: float | None,
                 baseline: str) -> tuple[list[str], str | None]:
    """Where a correct attempt's time goes and what would make it faster."""
    verdict, fixes = attempt.verdict, []
    speedup = attempt.speedup_vs(baseline)
    if speedup is None:
        return ["correct; speed was not measured here (no GPU timing)"], None
    profile = verdict.profile or {}
    roof = profile.get("roofline") or {}
    bound = _bound_of(roof, facts)
    candidate = verdict.timings.get("candidate")
    percent = roof.get("percent_of_limit")
    if percent is None and facts and facts.roofline_ms and candidate:
        percent = 100.0 * facts.roofline_ms / candidate.median_ms
    if percent is not None:
        fixes.append(f"reaches {percent:.0f}% of the roofline limit")
    if target and speedup < target:
        fixes.append(f"{speedup:.3g}x over {baseline}, target {target:.3g}x")
    if speedup < 1:
        fixes.append("slower than the reference: fewer launches (fuse more) and coalesced, vectorized access")
    if bound == "memory":
        fixes.append("memory-bound: cut bytes moved (fuse, read each input once), vectorize loads with larger "
                     "BLOCK sizes, keep intermediates in registers")
    elif bound == "compute":
        fixes.append("compute-bound: use tl.dot / tensor cores with larger tiles, tune num_warps and num_stages")
    fixes += _profile_lines(profile)
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
            fixes, bound = _speed_fixes(attempt, facts, target, baseline)
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
                  round=critique.round, best_code=best_code,
                  findings=critique.findings + [f"{k}: {'; '.join(v)}" for k, v in critique.per_attempt.items()])
    try:
        turn = ask(client, turn_key("critic", f"r{critique.round}"), [Message(role="user", content=text)])
    except ReplayExhausted:
        raise
    except Exception as exc:  # any endpoint failure: the rules' critique stands, the error is kept
        return critique.model_copy(update={"model_error": error_line(exc)}), None
    return critique.model_copy(update={"advice": turn.content.strip(), "origin": "model"}), turn
