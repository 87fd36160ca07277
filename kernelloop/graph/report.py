"""What a run leaves behind: best_kernel.py, result.json and report.md in its run directory.

Written by the finalize node, and by `solve` itself when a run ends any other way (Ctrl-C,
an error), so the best kernel so far is never lost.
"""

from __future__ import annotations

import json

from pydantic import BaseModel, Field

from kernelloop.agents.records import Attempt
from kernelloop.graph.rundir import RunDir, write_atomic
from kernelloop.graph.state import (
    StateLike,
    attempts_of,
    best_of,
    critiques_of,
    plan_of,
    prices_of,
    problem_of,
    settings_of,
    start_of,
    usage_of,
)
from kernelloop.graph.usage import Usage, by_round, total
from kernelloop.safe_text import md_cell


class RunSummary(BaseModel):
    """One run in a line: the object `solve --json` prints last and `runs list` shows."""

    thread_id: str
    problem: str
    status: str = Field(description="the best attempt's verdict status, or 'no_attempt'")
    best_speedup: float | None = Field(description="over the baseline; None when not measured")
    best_id: str | None = None
    best_kernel: str | None = Field(default=None, description="path of best_kernel.py, once written")
    attempts: int = Field(description="attempts verified (or rejected before verification)")
    rounds: int = 0
    stop_reason: str | None = None
    run_status: str = Field(default="running", description="finished | running | interrupted | waiting | failed")
    spent_s: float = 0.0
    profiling_s: float = Field(default=0.0, description="of spent_s, Nsight Compute's share (at most 10%)")
    budget_s: float | None = None
    baseline: str = "eager"
    target_speedup: float | None = None
    model: str = ""
    base_url: str | None = None
    start: str | None = Field(default=None, description="where the run began (solve --start: attempt 0's file), "
                                                        "or why 'auto' found no starter; None: from scratch")
    tokens: Usage = Field(default_factory=Usage, description="every model call of the run, totalled (cost "
                                                             "when prices were given)")
    run_dir: str = ""
    outputs_dir: str = Field(default="", description="where this branch's best_kernel.py, result.json and report.md "
                                                     "are: run_dir, or run_dir/branches/<branch> for a fork")
    branch: str | None = Field(default=None, description="the fork's name; None on the run's first branch")


def summarize(run: RunDir, state: StateLike, run_status: str | None = None, stop_reason: str | None = None) -> RunSummary:
    """The summary of a state; `best_kernel` points at the file only when it exists."""
    settings, best, start = settings_of(state), best_of(state), start_of(state)
    out = run.outputs(dict(state))
    kernel = out / "best_kernel.py"
    return RunSummary(
        thread_id=run.thread_id, problem=problem_of(state).name,
        status=best.status if best is not None else "no_attempt",
        best_speedup=best.speedup_vs(settings.baseline) if best is not None else None,
        best_id=best.id if best is not None else None,
        best_kernel=str(kernel) if best is not None and best.status == "correct" and kernel.is_file() else None,
        attempts=len(state.get("attempts") or []), rounds=state.get("round", 0),
        stop_reason=stop_reason or state.get("stop_reason"),
        run_status=run_status or ("finished" if state.get("status") == "finished" else "running"),
        spent_s=state.get("spent_s", 0.0), profiling_s=state.get("profiling_s", 0.0), budget_s=settings.budget_s,
        baseline=settings.baseline, target_speedup=settings.target_speedup,
        model=settings.model, base_url=settings.base_url, start=start.line if start is not None else None,
        tokens=total(usage_of(state), prices_of(state)),
        run_dir=str(run.root), outputs_dir=str(out), branch=state.get("branch"))


def _attempt_row(attempt: Attempt, baseline: str) -> str:
    speedup = attempt.speedup_vs(baseline)
    verify = f"{attempt.verify_s:.1f}" if attempt.verify_s is not None else "-"
    reason = md_cell(attempt.verdict.reason if attempt.verdict else attempt.model_error or "", 120)
    return (f"| {attempt.id} | {attempt.status} | {f'{speedup:.3g}x' if speedup is not None else '-'} | "
            f"{attempt.model_s:.1f} | {verify} | {attempt.prompt_tokens:,} / {attempt.completion_tokens:,} | "
            f"{reason} |")


def _token_lines(state: StateLike) -> list[str]:
    """Tokens per round and for the run (the cost too when prices were given)."""
    turns, prices = usage_of(state), prices_of(state)
    if not turns:
        return []
    lines = ["## Tokens", "", "| round | calls | prompt | completion | reasoning | cost |", "|---|---|---|---|---|---|"]
    rows = [*((f"{r}" if r else "0 (plan)", u) for r, u in by_round(turns, prices).items()),
            ("**run**", total(turns, prices))]
    for name, u in rows:
        cost = f"${u.cost_usd:.4f}" if u.cost_usd is not None else "-"
        lines.append(f"| {name} | {u.calls} | {u.prompt_tokens:,} | {u.completion_tokens:,} | {u.reasoning_tokens:,} "
                     f"| {cost} |")
    return lines + [""]


def render_report(summary: RunSummary, state: StateLike) -> str:
    """report.md: the outcome first, then the plan, every attempt and every critique."""
    settings, plan = settings_of(state), plan_of(state)
    attempts = attempts_of(state)
    speed = f"{summary.best_speedup:.3g}x over {summary.baseline}" if summary.best_speedup is not None \
        else "speed not measured"
    lines = [f"# kernelloop run {summary.thread_id}", "",
             f"- problem: {md_cell(summary.problem)}", f"- outcome: {md_cell(summary.stop_reason or summary.run_status)}",
             f"- best: {summary.best_id or 'none'} ({summary.status}, {speed})",
             f"- target: {f'{settings.target_speedup:g}x' if settings.target_speedup else 'any correct kernel'} "
             f"over {settings.baseline}; "
             f"{summary.rounds}/{settings.max_rounds} rounds, {summary.spent_s:.0f}/{settings.budget_s:.0f} s",
             f"- profiling (Nsight Compute): {summary.profiling_s:.0f} s, "
             f"{100 * summary.profiling_s / max(summary.spent_s, 1e-9):.1f}% of the run's wall clock (at most 10%)",
             f"- model: {settings.model or 'unknown'} {settings.sampling or ''}; backend {settings.backend}; "
             f"{settings.candidates} candidates per round", f"- tokens: {summary.tokens.line()}",
             *([f"- started from: {summary.start}"] if summary.start else []), ""]
    if plan is not None:
        lines += ["## Plan", "", plan.text, ""]
    lines += ["## Attempts", "", "| id | status | speedup | model s | verify s | tokens in / out | reason |",
              "|---|---|---|---|---|---|---|"] + [_attempt_row(a, settings.baseline) for a in attempts] + [""]
    lines += _token_lines(state)
    flagged = [(a.id, line) for a in attempts if a.verdict is not None for line in a.verdict.suspicious]
    if flagged:  # the verifier's signs that a speedup is too good to be true
        lines += ["## Suspicious results (check by hand)", "", *(f"- {aid}: {md_cell(line)}" for aid, line in flagged), ""]
    for critique in critiques_of(state):
        # The critic's findings quote verdicts (and so what candidates wrote): each one line, escaped.
        lines += [f"## Critique of round {critique.round}", ""] + [f"- {md_cell(f, 4000)}" for f in critique.findings]
        lines += [f"- next: {md_cell(step, 4000)}" for step in critique.next_steps]
        lines += [critique.advice, ""] if critique.advice else [""]
    return "\n".join(lines)


def write_outputs(run: RunDir, state: StateLike, run_status: str, stop_reason: str | None = None) -> RunSummary:
    """Write best_kernel.py (only when the best attempt is correct: a failure is no kernel to use), result.json
    and report.md; return the summary."""
    best, out = best_of(state), run.outputs(dict(state))  # a fork's branch writes under branches/<name>
    if best is not None and best.code and best.status == "correct":
        write_atomic(out / "best_kernel.py", best.code)
    else:
        (out / "best_kernel.py").unlink(missing_ok=True)  # one an older version wrote for a failure
    summary = summarize(run, state, run_status, stop_reason)
    prices = prices_of(state)
    record = summary.model_dump(mode="json") | {
        "report": str(out / "report.md"),
        "attempt_list": [a.model_dump(mode="json", exclude={"code"}) for a in attempts_of(state)],
        "tokens_by_round": {str(r): u.model_dump() for r, u in by_round(usage_of(state), prices).items()},
        "tokens_by_turn": list(state.get("usage") or [])}
    write_atomic(out / "result.json", json.dumps(record, indent=1))
    write_atomic(out / "report.md", render_report(summary, state))
    return summary
