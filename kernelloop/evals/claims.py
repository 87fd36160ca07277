"""Our verdicts against the ones the input carried (a leaderboard's), solution by solution.

A verdict disagrees when one side says correct and the other does not (the leaderboard lists
only solutions it judged correct, so each of our rejections of one is a disagreement; KernelBench's
eval_results.json tells only compiled or not and correct or not, so how a wrong kernel fails is
no disagreement). A speedup disagrees only where both
sides measured one and one says faster than eager, the other slower: the input's numbers come from
another GPU and harness, so a ratio between the two would mean little; the side of 1x does.
A solution its own problem kept from being judged (a problem error) is not compared.
"""

from __future__ import annotations

from collections.abc import Sequence

from kernelloop.evals.records import EAGER, BenchRecord, ClaimCheck, Disagreement
from kernelloop.records import Status
from kernelloop.safe_text import md_cell


def compare_claims(records: Sequence[BenchRecord]) -> ClaimCheck | None:
    """None when no record carried a claim with a verdict or a speedup."""
    compared = agreed = 0
    found: list[Disagreement] = []
    for record in records:
        claim = record.claim
        if claim is None or record.status is None or (claim.status is None and not claim.speedups):
            continue
        compared += 1
        claimed_speedup, speedup = claim.speedups.get(EAGER), record.speedups.get(EAGER)
        kind = None
        if claim.status is not None and (claim.status is Status.correct) != (record.status is Status.correct):
            kind = "verdict"
        elif (record.status is Status.correct and claimed_speedup is not None and speedup is not None
              and (claimed_speedup > 1) != (speedup > 1)):
            kind = "speedup"
        if kind is None:
            agreed += 1
            continue
        found.append(Disagreement(id=claim.id, model=claim.model, problem=record.problem, level=record.level,
                                  number=record.number, kind=kind, claimed_status=claim.status, status=record.status,
                                  code=record.code, reason=record.reason, claimed_speedup=claimed_speedup,
                                  speedup=speedup))
    if compared == 0:
        return None
    found.sort(key=lambda d: (d.kind, d.level or 0, d.number or 0, d.id))
    return ClaimCheck(compared=compared, agreed=agreed, disagreements=found)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def claims_markdown(check: ClaimCheck) -> list[str]:
    """The report's section: the counts, then every disagreement, one row each."""
    lines = ["## Against the input's verdicts", "",
             f"{check.compared} solution(s) carried a verdict or a speedup: {check.agreed} agree, "
             f"{len(check.disagreements)} disagree.", ""]
    if check.disagreements:
        lines += ["| solution | model | problem | kind | claimed | ours | code | claimed speedup | ours | why |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for d in check.disagreements:
            lines.append("| " + " | ".join(md_cell(cell) for cell in (
                d.id, d.model or "-", d.problem, d.kind, d.claimed_status.value if d.claimed_status else "-",
                d.status.value if d.status else "-", d.code.value, _x(d.claimed_speedup), _x(d.speedup),
                d.reason)) + " |")
        lines.append("")
    return lines
