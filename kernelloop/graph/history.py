"""A thread's checkpoints as branches (what `runs show` draws) and two attempts side by side (`runs diff`).

A fork (or a replay from a middle checkpoint) makes a checkpoint with two children: the
original steps go on in the first branch, the new ones start a branch of their own, which
says where it came from and what the fork changed (its hint, its settings).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from kernelloop.agents.records import Attempt


def step_row(snapshot) -> dict:
    """One checkpoint as `runs show --json` lists it."""
    values = snapshot.values
    return {"checkpoint": snapshot.config["configurable"]["checkpoint_id"],
            "parent": (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id"),
            "step": snapshot.metadata.get("step"), "source": snapshot.metadata.get("source"),
            "next": list(snapshot.next), "phase": values.get("phase"), "round": values.get("round", 0),
            "attempts": len(values.get("attempts") or []), "best": values.get("best_id"),
            "hints": list(values.get("hints") or []), "settings": dict(values.get("settings") or {}),
            "branch": values.get("branch")}


@dataclass
class Branch:
    """Steps in order; `start` is the checkpoint it branched from (None for the first branch)."""

    steps: list[dict]
    start: str | None = None
    hint: str | None = None
    changes: dict = field(default_factory=dict)
    branches: list[Branch] = field(default_factory=list)
    name: str | None = None  # a fork's name: its files are under RUN/branches/<name>/


def branches(steps: list[dict]) -> Branch:
    """The tree of a thread's steps (oldest first, as step_row gives them)."""
    by_id = {s["checkpoint"]: s for s in steps}
    children: dict[str | None, list[dict]] = {}
    for s in steps:
        parent = s["parent"] if s["parent"] in by_id else None
        children.setdefault(parent, []).append(s)

    def grow(first: dict, start: str | None) -> Branch:
        branch = Branch(steps=[], start=start)
        if start is not None:
            before = by_id[start]
            added = [h for h in first["hints"] if h not in before["hints"]]
            branch.hint = "; ".join(added) or None
            branch.changes = {k: v for k, v in first["settings"].items() if before["settings"].get(k) != v}
            branch.name = first.get("branch") if first.get("branch") != before.get("branch") else None
        step: dict | None = first
        while step is not None:
            branch.steps.append(step)
            after = children.get(step["checkpoint"], [])
            branch.branches += [grow(child, step["checkpoint"]) for child in after[1:]]
            step = after[0] if after else None
        return branch

    roots = children.get(None, [])
    if not roots:
        return Branch(steps=[])
    tree = grow(roots[0], None)
    tree.branches += [grow(extra, None) for extra in roots[1:]]
    return tree


def code_diff(left: Attempt, right: Attempt, left_name: str, right_name: str) -> str:
    """A unified diff of two attempts' code ('' when it is the same)."""
    return "".join(difflib.unified_diff(left.code.splitlines(keepends=True), right.code.splitlines(keepends=True),
                                        fromfile=left_name, tofile=right_name))


def side(attempt: Attempt, baseline: str) -> dict:
    """What `runs diff` puts side by side for one attempt."""
    verdict = attempt.verdict
    return {"attempt": attempt.id, "status": attempt.status, "speedup": attempt.speedup_vs(baseline),
            "reason": verdict.reason if verdict else attempt.model_error or attempt.extract_error or "",
            "candidate_ms": verdict.timings["candidate"].median_ms if verdict and "candidate" in verdict.timings
            else None, "model": attempt.model, "prompt_tokens": attempt.prompt_tokens,
            "completion_tokens": attempt.completion_tokens, "lines": len(attempt.code.splitlines())}
