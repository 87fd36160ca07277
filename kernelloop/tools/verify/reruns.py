"""The verifier's second look at a failed set: the candidate's child runs it twice more, each time
with output memory poisoned by a finite value this process drew (and, on the CPU, its programs in
another order), and returns both outputs. written.py reads the facts from them. Only on the
mismatch path, and only for outputs small enough to hold twice more: the verdict is already made.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import torch

from kernelloop.records import Localisation
from kernelloop.tools.verify.compare import tolerance_for
from kernelloop.tools.verify.written import MAX_ELEMENTS, add_facts

MANTISSAS = (1.125, 1.25, 1.375, 1.625, 1.75, 1.875)  # 3 bits: exact in float16 and bfloat16 too


def draw_poisons() -> list[float]:
    """Two finite values of opposite sign, 16 to 480 in magnitude, that nobody can know ahead (a
    kernel can't write them on purpose) and every floating dtype holds exactly."""
    values = [MANTISSAS[secrets.randbelow(len(MANTISSAS))] * 2.0 ** (4 + secrets.randbelow(5)) for _ in range(2)]
    return [values[0], -values[1]]


def wanted(located: Localisation | None, ref: list) -> bool:
    """Whether the reruns can add facts: a localised output small enough to relate, in a set of
    outputs small enough to hold twice more."""
    if located is None or located.output >= len(ref) or not isinstance(ref[located.output], torch.Tensor):
        return False
    total = sum(t.numel() * t.element_size() for t in ref if isinstance(t, torch.Tensor))
    return ref[located.output].numel() <= MAX_ELEMENTS and total <= 4 * MAX_ELEMENTS * 8


def rerun(session, failed: int, load: Callable[[str], list[list] | str]) -> tuple[list[list], list[float]] | None:
    """Ask the child (its JobSession) to run set `failed` once per poison; its outputs and the
    poisons, or None when it could not (it ended, refused, or left no readable file)."""
    poisons = draw_poisons()
    seeds = [secrets.randbelow(2**31 - 1) + 1 for _ in poisons]
    session.advance("rerun")  # its own time limit: slow trials leave the reruns theirs
    if not session.send({"rerun": {"set": failed, "poisons": poisons, "order_seeds": seeds}}):
        return None
    answer = session.receive()
    if not answer or not isinstance(answer.get("rerun"), dict) or answer["rerun"].get("found"):
        return None
    loaded = load("rerun.sets")
    return None if isinstance(loaded, str) else (loaded, poisons)


def relate(located: Localisation | None, ref: list, reruns: tuple[list[list], list[float]] | None,
           tolerance: dict) -> None:
    """Add the reruns' facts about `located`'s output to it (`tolerance`: the problem's, as compared)."""
    if located is None or reruns is None:
        return
    outputs, poisons = reruns
    index = located.output
    if index >= len(ref) or not isinstance(ref[index], torch.Tensor) or \
            any(index >= len(out) or not isinstance(out[index], torch.Tensor) for out in outputs):
        return
    add_facts(located, ref[index], [out[index] for out in outputs], poisons, tolerance_for(ref[index].dtype, tolerance))
