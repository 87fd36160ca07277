"""What two more runs of a failed set say, beside where it is wrong (localise.py): which elements
were never written, which depend on what the output memory held before the call or on the order
the programs ran in, and how the written-but-wrong part relates to the reference.

The parent chose the poison of each run (reruns.py), so an element that holds run k's poison in
both runs was never written. The rest are cheap tests on the parent's copy of the outputs. Every
sentence here is worded from the output's shape and the kernel's pattern only, never from the
input values or the poison drawn: the same kernel on the same problem gets the same words.
"""

from __future__ import annotations

import torch

from kernelloop.records import Localisation
from kernelloop.tools.verify.localise import ranges

MAX_ELEMENTS = 1 << 22  # larger outputs are not related here (feedback, not the verdict: float64 copies stay small)
MIN_BLOCK, MAX_BLOCK = 16, 4096
AGREE = 0.99  # share of the elements a relation must explain
FACTOR_SPREAD = 1e-3  # relative spread of a per-row factor that still reads as one factor


def add_facts(loc: Localisation, ref: torch.Tensor, runs: list[torch.Tensor], poisons: list[float],
              tol: dict[str, float]) -> None:
    """Fill `loc`'s rerun facts from two reruns of its set (`runs`, with `poisons`)."""
    if len(runs) != 2 or len(poisons) != 2 or any(r.shape != ref.shape or r.dtype != ref.dtype for r in runs):
        return
    if ref.numel() > MAX_ELEMENTS or ref.is_complex() or ref.dtype is torch.bool or ref.numel() == 0:
        return
    loc.reruns = 2
    shape = list(ref.shape)
    flat = [r.detach().reshape(-1).cpu() for r in runs]
    poison = [torch.tensor(p).to(ref.dtype) for p in poisons]
    unwritten = (flat[0] == poison[0]) & (flat[1] == poison[1])
    loc.unwritten = int(unwritten.sum())
    loc.unwritten_kind, loc.unwritten_region = region(unwritten, shape)
    r = ref.detach().reshape(-1).cpu().double()
    f1, f2 = (f.double() for f in flat)
    bound = tol["atol"] + tol["rtol"] * r.abs()
    written = ~unwritten
    finite_ref = torch.isfinite(r)
    loc.nonfinite_written = int((written & finite_ref & ~torch.isfinite(f1)).sum())
    step = float(poison[0].double() - poison[1].double())
    both = torch.isfinite(f1) & torch.isfinite(f2)
    same = ((f1 - f2).abs() <= bound) | (f1 == f2) | (torch.isnan(f1) & torch.isnan(f2))
    moved = ~same  # NaN (or inf) in one run only moves too
    follows = written & both & moved & ((f1 - f2 - step).abs() <= bound + 1e-3 * abs(step))
    loc.init_dependent = int(follows.sum())
    loc.varies = int((written & moved & ~follows).sum())
    bad = written & ~((f1 - r).abs() <= bound) & ~follows
    if int(bad.sum()) >= 4 and loc.varies == 0:
        loc.relation_kind, loc.relation = relation(f1, r, written, bad, bound, shape)


def _rows_cols(shape: list[int]) -> tuple[int, int]:
    cols = shape[-1] if len(shape) >= 2 else 0
    numel = 1
    for size in shape:
        numel *= size
    return (numel // cols, cols) if cols else (0, 0)


def region(mask: torch.Tensor, shape: list[int]) -> tuple[str, str]:
    """(kind, words) of the elements `mask` marks (flat): whole rows, the same columns of every row,
    a tail, whole aligned blocks, or scattered."""
    count, numel = int(mask.sum()), mask.numel()
    if count == 0:
        return "", ""
    if count == numel:
        return "all", "no element of the output was written"
    rows, cols = _rows_cols(shape)
    if rows > 1 and cols > 1:
        grid = mask.reshape(rows, cols)
        full_rows, any_rows = grid.all(1), grid.any(1)
        if bool((full_rows == any_rows).all()):
            which = torch.nonzero(full_rows).flatten().tolist()
            if len(which) == 1:
                return "rows", f"row {which[0]} (of {rows}) was never written, every column of it"
            return "rows", f"rows {ranges(which)} (of {rows}) were never written, every column of them"
        full_cols, any_cols = grid.all(0), grid.any(0)
        if bool((full_cols == any_cols).all()):
            which = torch.nonzero(full_cols).flatten().tolist()
            kind = "row_tail" if which[-1] == cols - 1 and which == list(range(which[0], cols)) else "columns"
            return kind, f"columns {ranges(which)} (of {cols}) were never written, in every row"
    first = int(torch.nonzero(mask)[0])
    if first > 0 and bool(mask[first:].all()):
        return "tail", f"the tail from flat index {first} to the end ({numel - first} elements) was never written"
    size = MAX_BLOCK
    while size >= MIN_BLOCK:
        blocks, pad = -(-numel // size), (-numel) % size
        if blocks >= 2:  # a partial last block counts whole where all of it that exists is marked
            any_marked = torch.nn.functional.pad(mask, (0, pad), value=False).reshape(blocks, size).any(1)
            all_marked = torch.nn.functional.pad(mask, (0, pad), value=True).reshape(blocks, size).all(1)
            if bool((any_marked == all_marked).all()):
                which = torch.nonzero(all_marked).flatten().tolist()
                return "blocks", (f"whole aligned blocks of {size} elements were never written: blocks "
                                  f"{ranges(which)} of {blocks}")
        size //= 2
    where = f"{count} of {numel} elements were never written, scattered"
    if rows > 1 and cols > 1:
        grid = mask.reshape(rows, cols)
        where += (f" over rows {ranges(torch.nonzero(grid.any(1)).flatten().tolist())} and columns "
                  f"{ranges(torch.nonzero(grid.any(0)).flatten().tolist())}")
    return "scattered", where


def _explains(candidate: torch.Tensor, r: torch.Tensor, keep: torch.Tensor, bound: torch.Tensor) -> bool:
    """`candidate` matches the reference on at least AGREE of the `keep` elements."""
    total = int(keep.sum())
    if total == 0:
        return False
    close = ((candidate - r).abs() <= bound) & keep
    return int(close.sum()) >= AGREE * total


def relation(f: torch.Tensor, r: torch.Tensor, written: torch.Tensor, bad: torch.Tensor, bound: torch.Tensor,
             shape: list[int]) -> tuple[str, str]:
    """How the written output relates to the reference, where one cheap test explains it: a transpose,
    a shift by one row or one block, a constant factor or offset per row or per column."""
    rows, cols = _rows_cols(shape)
    finite = torch.isfinite(f) & torch.isfinite(r)
    keep = written & finite
    wrong = bad & finite  # a moved or shifted output must put right what is wrong, not only what is near 0
    if int(wrong.sum()) < 4:
        return "", ""
    if rows > 1 and cols > 1:
        if rows == cols:
            moved = f.reshape(rows, cols).t().reshape(-1)
        else:
            moved = f.reshape(cols, rows).t().reshape(-1)
        if _explains(moved, r, wrong & torch.isfinite(moved), bound):
            laid = "" if rows == cols else f", its memory laid out as a ({cols}, {rows}) matrix"
            return "transpose", f"the output holds the reference transposed{laid}: what belongs at [i, j] is at [j, i]"
        for step, words in ((1, "row i holds what row i-1 should (every row shifted down by one)"),
                            (-1, "row i holds what row i+1 should (every row shifted up by one)")):
            got, want, kept = _shifted(f, r, wrong, step * cols)
            if _explains(got, want, kept, _bound_of(bound, step * cols)):
                return "row_shift", words
    for block in (b for b in _powers() if b != cols):
        for step in (1, -1):
            got, want, kept = _shifted(f, r, wrong, step * block)
            if int(kept.sum()) and _explains(got, want, kept, _bound_of(bound, step * block)):
                way = "later" if step == 1 else "earlier"
                return "block_shift", f"every element sits one block of {block} elements {way} than it should"
    if rows > 1 and cols > 1:
        for axis, name in ((1, "row"), (0, "column")):
            found = _per_line(f.reshape(rows, cols), r.reshape(rows, cols), keep.reshape(rows, cols),
                              bad.reshape(rows, cols), bound.reshape(rows, cols), axis)
            if found:
                return f"{name}_{found[0]}", found[1].format(line=name)
    return "", ""


def _powers() -> list[int]:
    sizes, size = [], MIN_BLOCK
    while size <= MAX_BLOCK:
        sizes.append(size)
        size *= 2
    return sizes


def _shifted(f: torch.Tensor, r: torch.Tensor, keep: torch.Tensor, step: int):
    """f[i + step] beside r[i] (step > 0: f holds r later), over the kept positions of f."""
    if step > 0:
        return f[step:], r[:-step], keep[step:]
    return f[:step], r[-step:], keep[:step]


def _bound_of(bound: torch.Tensor, step: int) -> torch.Tensor:
    return bound[:-step] if step > 0 else bound[-step:]


def _per_line(f: torch.Tensor, r: torch.Tensor, keep: torch.Tensor, bad: torch.Tensor, bound: torch.Tensor,
              axis: int) -> tuple[str, str] | None:
    """A constant factor (or offset) per row (axis 1) or per column (axis 0) that explains the kept
    elements of the lines that hold a wrong one: (kind, words with {line})."""
    if axis == 0:
        f, r, keep, bad, bound = f.t(), r.t(), keep.t(), bad.t(), bound.t()
    lines = torch.nonzero(bad.any(1)).flatten()
    if lines.numel() == 0:
        return None
    f, r, keep, bound, wrong = f[lines], r[lines], keep[lines], bound[lines], (bad & keep)[lines]
    if not bool(keep.any()):
        return None
    significant = keep & (r.abs() > 1e-6 * float(r[keep].abs().max()))
    for kind in ("factor", "offset"):
        values = torch.where(significant, f / r if kind == "factor" else f - r, torch.nan)
        per_line = values.nanmedian(1).values
        if not bool(torch.isfinite(per_line).all()):
            continue
        model = r * per_line[:, None] if kind == "factor" else r + per_line[:, None]
        within = (bound + 1e-4 * f.abs()).reshape(-1)
        if not all(_explains(model.reshape(-1), f.reshape(-1), part.reshape(-1), within) for part in (keep, wrong)):
            continue
        spread = float(per_line.max() - per_line.min())
        scale = float(per_line.abs().max()) if kind == "factor" else float(r[keep].abs().max())
        if spread <= FACTOR_SPREAD * max(scale, 1e-12):
            return f"constant_{kind}", f"the wrong elements are off by one constant {kind}, the same in every {{line}}"
        return kind, f"the wrong elements are off by a constant {kind} per {{line}}, different in each {{line}}"
    return None
