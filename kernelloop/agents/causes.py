"""The causes the critic may name for a wrong output, each with the facts it needs.

A cause is named only when its predicate over the verifier's facts (results.Localisation) holds:
a race needs a result that moved between two runs of the same inputs, a missing mask a wrong or
unwritten tail, an overflow NaN/inf the kernel wrote itself, and so on. `phrase` is the words
that name the cause in a critique: the critique-quality set (benchmarks/critique_set.py) counts a
cause whose phrase appears while its predicate fails as a wrong cause offered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernelloop.records import Localisation


@dataclass(frozen=True)
class Cause:
    key: str
    phrase: str  # lowercase words that name it, in every line `says` makes
    holds: Callable[[Localisation], bool]
    says: Callable[[Localisation], str]


def _across_rows(loc: Localisation) -> bool:
    # Most rows, not every row: on a GPU a row whose largest value dominates can still come out right.
    return bool(loc.rows) and (loc.whole_rows or loc.rows_bad >= max(2, 0.9 * loc.rows))


def _overflow(loc: Localisation) -> str:
    if _across_rows(loc) and loc.tail_from is None:  # the counts are in the facts: the cause reads the same each run
        which = ("fills whole rows" if loc.whole_rows else
                 f"appears in {'every row' if loc.rows_bad == loc.rows else 'almost every row'}")
        return (f"{loc.nonfinite_kind or 'NaN'} {which} where the reference is finite, and the kernel computes it (it "
                "stays with finite values in the output memory): an overflow in a row reduction (exp of large "
                "values: subtract the row max before tl.exp)")
    return (f"the kernel computes {loc.nonfinite_kind or 'NaN'} where the reference is finite (it stays with finite "
            "values in the output memory): an overflow or an invalid operation (exp of large values, a division by "
            "zero, a masked load without a neutral `other=`)")


def _unwritten_or_overflow(loc: Localisation) -> str:
    if _across_rows(loc) and loc.tail_from is None:
        which = ("fills whole rows" if loc.whole_rows else
                 f"appears in {'every row' if loc.rows_bad == loc.rows else 'almost every row'} "
                 f"({loc.rows_bad} of {loc.rows})")
        return (f"{loc.nonfinite_kind} {which} where the reference is finite: an overflow in a row reduction "
                "(exp of large values: subtract the row max before tl.exp) or rows never written")
    return (f"{loc.nonfinite_kind} where the reference is finite, first at {loc.first_nonfinite}: unwritten output "
            "elements or an overflow; every element must be written, masked loads need `other=`")


def _steady(loc: Localisation) -> bool:
    """No element moved between the reruns: a pattern seen in one run is the kernel's, not the order's."""
    return loc.varies == 0


def _precision(loc: Localisation) -> bool:
    spread = loc.rows and loc.rows_bad == loc.rows and loc.columns_bad == loc.columns
    pattern = (loc.irregular_only or loc.tail_from is not None or loc.block is not None or loc.period is not None
               or loc.first_row_only_right or loc.nonfinite or loc.blocks or loc.unwritten or loc.varies
               or loc.init_dependent or loc.relation_kind)
    return (not pattern and loc.median_rel_err is not None and loc.median_rel_err < 0.05
            and bool(spread or not loc.rows))


CAUSES: tuple[Cause, ...] = (
    Cause("irregular_mask", "a tail or boundary is not masked", lambda loc: loc.irregular_only,
          lambda loc: "wrong only on the irregular shapes (not multiples of 16): a tail or boundary is not masked; "
                      "mask every load and store with offsets < size and launch cdiv(size, BLOCK) programs"),
    Cause("tail_mask", "the last partial block is not handled",
          lambda loc: _steady(loc) and (loc.tail_from is not None or loc.unwritten_kind == "tail"),
          lambda loc: "only the tail is wrong"
                      + (f" (from flat index {loc.tail_from})" if loc.tail_from is not None else "")
                      + ": the last partial block is not handled; launch triton.cdiv(n, BLOCK) programs and mask "
                        "loads/stores with offs < n"),
    Cause("row_wider_than_block", "the block is narrower than the row", lambda loc: loc.unwritten_kind == "row_tail",
          lambda loc: f"{loc.unwritten_region}: the block is narrower than the row, so each program covers only the "
                      "first columns; loop over the row in blocks of BLOCK, or use BLOCK = "
                      "triton.next_power_of_2(n_cols), masked with cols < n_cols"),
    Cause("unwritten_rows", "no program wrote", lambda loc: loc.unwritten_kind in ("rows", "blocks"),
          lambda loc: f"{loc.unwritten_region}: no program wrote there; check the grid (triton.cdiv of the size) and "
                      "the offset each program stores at"),
    Cause("unwritten_elsewhere", "every element must be stored",
          lambda loc: loc.unwritten_kind in ("columns", "scattered", "all"),
          lambda loc: f"{loc.unwritten_region}: every element must be stored by some program; check the store's "
                      "mask, the grid and any early return"),
    Cause("partial_reduction", "covers only part of the row",
          lambda loc: loc.relation_kind in ("row_factor", "row_offset"),
          lambda loc: "each row of the written part is off by its own constant "
                      f"{'factor' if loc.relation_kind == 'row_factor' else 'offset'}: the row's reduction (sum, max, "
                      "norm) covers only part of the row; reduce over every column (loop over the row in blocks, "
                      "accumulating) before the result is used"),
    Cause("wrong_constant", "wrong constant", lambda loc: loc.relation_kind in ("constant_factor", "constant_offset"),
          lambda loc: "every wrong element is off by the same "
                      f"{'factor' if loc.relation_kind == 'constant_factor' else 'offset'}: a wrong constant (the "
                      "count a mean divides by, a scale, an epsilon or a bias)"),
    Cause("column_parameter", "per-column", lambda loc: loc.relation_kind in ("column_factor", "column_offset"),
          lambda loc: "each column is off by its own constant: a per-column parameter (weight, bias, scale) is "
                      "indexed wrongly or broadcast along the wrong axis"),
    Cause("transposed", "strides are swapped", lambda loc: loc.relation_kind == "transpose",
          lambda loc: "the store's row and column strides are swapped: store element [row, col] at row * stride_row "
                      "+ col * stride_col of the output"),
    Cause("row_shift", "off by one row", lambda loc: loc.relation_kind == "row_shift",
          lambda loc: "off by one row: a program stores (or loads) the row next to its own; use the same row "
                      "offset, program_id * stride_row, for its loads and its stores"),
    Cause("block_shift", "off by one block", lambda loc: loc.relation_kind == "block_shift",
          lambda loc: "off by one block: a program stores (or loads) the block next to its own; check the block's "
                      "start offset, program_id * BLOCK"),
    Cause("block_boundary", "off-by-one at the block boundary", lambda loc: _steady(loc) and loc.block is not None,
          lambda loc: f"wrong at position(s) {loc.block_positions} of every block of {loc.block}: an off-by-one at "
                      "the block boundary; check the block's start/end offsets and `<` versus `<=` in the mask"),
    Cause("constant_stride", "an index or stride off by a constant",
          # a period of one row is a column, not a stride: the columns line says which
          lambda loc: _steady(loc) and loc.block is None and loc.period is not None and loc.period != loc.columns,
          lambda loc: f"wrong at every {loc.period}th element: an index or stride off by a constant"),
    Cause("row_stride", "the row stride", lambda loc: _steady(loc) and loc.first_row_only_right,
          lambda loc: "only row 0 is right and every other row is wrong: the row stride (or row offset) is wrong; "
                      "pass x.stride(0) and use row * stride_row"),
    Cause("reads_output_first", "reads the output before", lambda loc: loc.init_dependent > 0,
          lambda loc: "the written values move with what the output memory held before the call: the kernel reads "
                      "the output before writing it (accumulates into torch.empty memory); start from torch.zeros or "
                      "write each element before reading it"),
    # Before the verifier reran failed sets (older verdicts), NaN could be either: both are named.
    Cause("overflow", "an overflow", lambda loc: loc.nonfinite_written > 0 or (loc.reruns == 0 and loc.nonfinite > 0),
          lambda loc: _overflow(loc) if loc.reruns else _unwritten_or_overflow(loc)),
    Cause("race", "race across programs", lambda loc: loc.varies > 0,
          lambda loc: "the written result differs between two runs of the same inputs: it depends on the order "
                      "the programs ran in, a race across programs; each program may read only what it computes "
                      "itself, or use atomics or a second pass"),
    Cause("precision", "precision loss", _precision,
          lambda loc: "close everywhere but not close enough (the median relative error is in the facts): a "
                      "precision loss, not an indexing bug; accumulate in float32 (tl.float32 accumulators, "
                      ".to(tl.float32) before sums and dots) and keep the reference's order of operations"),
)
BY_KEY = {cause.key: cause for cause in CAUSES}


def offered(loc: Localisation) -> list[Cause]:
    """The causes whose facts hold, in the order the critic names them."""
    return [cause for cause in CAUSES if cause.holds(loc)]


def named_in(text: str) -> list[Cause]:
    """The causes a critique names (by their phrase)."""
    lowered = text.lower()
    return [cause for cause in CAUSES if cause.phrase in lowered]


def wrongly_named(text: str, loc: Localisation | None) -> list[str]:
    """Keys of the causes `text` names whose facts do not hold (all of them, without facts)."""
    return [cause.key for cause in named_in(text) if loc is None or not cause.holds(loc)]
