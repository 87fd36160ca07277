"""Where a wrong output is wrong: the facts a person looks for first, computed by the parent from
the outputs it holds (the candidate's process reports nothing here).

One pass over the output in chunks (a second only when no element is outside atol/rtol, so the
failure was the norm, the median or the bias: then "bad" means a relative error above `rel`).
Per chunk only the bad elements' indices are kept, and folded into counts at once: per row, per
column, per aligned tile, per position in a block of 4096, a running gcd, the worst errors. Memory
is O(rows + columns + tiles), each capped; nothing output-sized is allocated besides a chunk.
"""

from __future__ import annotations

import torch

from kernelloop.records import Element, Localisation

CHUNK_ELEMENTS = 1 << 22
COUNT_LIMIT = 1 << 22  # rows, columns or tiles beyond this are not counted one by one
WORST = 5
MAX_RESIDUE_BLOCK = 4096  # block positions are tracked mod this; smaller powers of two are folds of it
MIN_BLOCK = 16
TILE = 64  # the finest aligned tile counted; coarser ones are folds
RANGES_SHOWN = 6
REL_SAMPLE = 1 << 16


def _unravel(flat: int, shape: list[int]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size if size else 0)
        flat //= size if size else 1
    return list(reversed(index))


def ranges(indices: list[int], shown: int = RANGES_SHOWN) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'; past `shown` ranges, how many more."""
    spans: list[list[int]] = []
    for i in indices:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans[:shown])
    return text + (f" and {len(spans) - shown} more ranges" if len(spans) > shown else "")


class _Counts:
    """Running counts over the bad elements of one output."""

    def __init__(self, numel: int, cols: int, device: torch.device):
        self.numel, self.cols, self.device = numel, cols, device
        self.rows = numel // cols if cols else 0
        self.bad = self.nonfinite = 0
        self.nan = self.inf = False
        self.first_bad: int | None = None
        self.last_bad: int | None = None
        self.first_nonfinite: int | None = None
        self.gcd = 0
        zeros = lambda n: torch.zeros(n, dtype=torch.int64, device=device) if 0 < n <= COUNT_LIMIT else None  # noqa: E731
        self.row_counts = zeros(self.rows) if cols > 1 and self.rows > 1 else None
        self.col_counts = zeros(cols) if cols > 1 and self.rows > 1 else None
        self.tiles = zeros(-(-numel // TILE))
        self.residues = zeros(MAX_RESIDUE_BLOCK)
        self.worst_err = torch.empty(0, dtype=torch.float64)
        self.worst_at = torch.empty(0, dtype=torch.int64)
        self.rel: list[torch.Tensor] = []
        self.rel_kept = 0

    def add(self, out: torch.Tensor, ref: torch.Tensor, start: int, atol: float, rtol: float) -> None:
        finite = torch.isfinite(out) & torch.isfinite(ref)
        diff = (out - ref).abs_().masked_fill_(~finite, 0.0)
        over = finite & (diff > atol + rtol * ref.abs())
        unmatched = ~finite & (out != ref) & ~(torch.isnan(out) & torch.isnan(ref))
        self._worst(diff, start)
        where = torch.nonzero(over | unmatched).flatten()
        if where.numel() == 0:
            return
        nonfinite_at = torch.nonzero(unmatched).flatten()
        if nonfinite_at.numel():
            if self.first_nonfinite is None:
                self.first_nonfinite = start + int(nonfinite_at[0])
            self.nonfinite += nonfinite_at.numel()
            values = out[nonfinite_at]
            self.nan = self.nan or bool(torch.isnan(values).any()) or bool(torch.isnan(ref[nonfinite_at]).any())
            self.inf = self.inf or bool(torch.isinf(values).any())
        rel_at = torch.nonzero(over & (ref != 0)).flatten()
        if rel_at.numel() and self.rel_kept < REL_SAMPLE:
            take = rel_at[: REL_SAMPLE - self.rel_kept]
            self.rel.append((diff[take] / ref[take].abs()).double().cpu())
            self.rel_kept += take.numel()
        index = where + start
        self.bad += index.numel()
        first, last = int(index[0]), int(index[-1])
        self.first_bad = first if self.first_bad is None else self.first_bad
        self.last_bad = last
        self._gcd(index - self.first_bad)
        for counts, key in ((self.row_counts, index // self.cols if self.cols else None),
                            (self.col_counts, index % self.cols if self.cols else None),
                            (self.tiles, index // TILE), (self.residues, index % MAX_RESIDUE_BLOCK)):
            if counts is not None and key is not None:
                counts += torch.bincount(key, minlength=counts.numel())

    def _gcd(self, steps: torch.Tensor) -> None:
        """The gcd of every bad index's distance from the first: each round at least halves it."""
        if self.gcd == 1:
            return
        positive = steps[steps > 0]
        if positive.numel() == 0:
            return
        g = self.gcd or int(positive[0])
        while g > 1:
            smaller = int(torch.gcd(positive, torch.full_like(positive, g)).min())
            if smaller == g:
                break
            g = smaller
        self.gcd = g

    def _worst(self, diff: torch.Tensor, start: int) -> None:
        values, at = torch.topk(diff, min(WORST, diff.numel()))
        merged = torch.cat([self.worst_err, values.double().cpu()])
        order = torch.argsort(merged, descending=True)[:WORST]
        self.worst_err, self.worst_at = merged[order], torch.cat([self.worst_at, at.cpu() + start])[order]


def localise(out: torch.Tensor, ref: torch.Tensor, tol: dict[str, float], output: int = 0,
             device: torch.device | str | None = None) -> Localisation:
    """Where `out` differs from `ref` (same shape and dtype) beyond `tol` (compare.tolerance_for)."""
    device = torch.device(device) if device is not None else ref.device
    shape = list(ref.shape)
    flat_out, flat_ref = out.detach(), ref.detach()
    if ref.is_complex():
        flat_out, flat_ref = (torch.view_as_real(t.resolve_conj()) for t in (flat_out, flat_ref))
        shape = shape + [2]
    flat_out, flat_ref = flat_out.reshape(-1), flat_ref.reshape(-1)
    work = torch.float32 if ref.is_floating_point() and ref.element_size() <= 4 else torch.float64
    cols = shape[-1] if len(shape) >= 2 else 0
    loc = Localisation(output=output, shape=shape, numel=flat_ref.numel())
    bounds = [(tol["atol"], tol["rtol"])]
    if tol.get("rel"):  # the norm, median or bias failed with every element inside atol/rtol
        bounds.append((0.0, tol["rel"]))
    for atol, rtol in bounds:
        counts = _Counts(flat_ref.numel(), cols, device)
        for start in range(0, flat_ref.numel(), CHUNK_ELEMENTS):
            chunk = slice(start, start + CHUNK_ELEMENTS)
            counts.add(flat_out[chunk].to(device, work), flat_ref[chunk].to(device, work), start, atol, rtol)
        if counts.bad:
            if (atol, rtol) != bounds[0]:
                loc.notes.append(f"no element is outside atol/rtol; 'wrong' below means a relative error above "
                                 f"rel={rtol:g}")
            break
    _fill(loc, counts, shape, flat_out, flat_ref)
    return loc


def _fill(loc: Localisation, c: _Counts, shape: list[int], flat_out: torch.Tensor, flat_ref: torch.Tensor) -> None:
    loc.bad, loc.nonfinite = c.bad, c.nonfinite
    loc.worst = [Element(_unravel(int(i), shape), float(flat_out[int(i)]), float(flat_ref[int(i)]))
                 for e, i in zip(c.worst_err.tolist(), c.worst_at.tolist(), strict=True) if e > 0]
    if not c.bad:
        return
    if c.first_bad is None or c.last_bad is None:  # add() sets both wherever it counts a bad element
        raise RuntimeError("localise: bad elements counted but no first or last one kept")
    if c.nonfinite:
        loc.nonfinite_kind = "NaN and inf" if c.nan and c.inf else "inf" if c.inf else "NaN"
        if c.first_nonfinite is None:  # add() sets it wherever it counts a non-finite element
            raise RuntimeError("localise: non-finite elements counted but no first one kept")
        loc.first_nonfinite = _unravel(c.first_nonfinite, shape)
    if c.rel:
        loc.median_rel_err = float(torch.cat(c.rel).median())
    if c.row_counts is not None:
        bad_rows = torch.nonzero(c.row_counts).flatten()
        loc.rows, loc.rows_bad = c.rows, bad_rows.numel()
        loc.bad_rows = ranges(bad_rows.tolist()[:10_000])
        loc.whole_rows = bool((c.row_counts[bad_rows] == c.cols).all())
        loc.first_row_only_right = bool(c.row_counts[0] == 0) and loc.rows_bad == c.rows - 1
    if c.col_counts is not None:
        bad_cols = torch.nonzero(c.col_counts).flatten()
        loc.columns, loc.columns_bad = c.cols, bad_cols.numel()
        loc.bad_columns = ranges(bad_cols.tolist()[:10_000])
    if _tail_only(c):
        loc.tail_from = c.first_bad
    elif c.bad >= 4 and c.gcd > 1:
        loc.period, loc.offset = c.gcd, c.first_bad % c.gcd
    if c.bad >= 4 and loc.tail_from is None and c.residues is not None:
        _blocks_of(loc, c)
    if loc.tail_from is None and not loc.whole_rows and loc.block is None and not loc.first_row_only_right:
        _tiles(loc, c)


def _tail_only(c: _Counts) -> bool:
    """Every wrong element in one run at the end (at most half the output), allowing a few right ones
    inside it: an unwritten tail left at 0 still matches the reference wherever the reference is within tolerance of 0."""
    if c.first_bad is None or c.last_bad is None or c.first_bad == 0:
        return False
    span = c.numel - c.first_bad
    return 2 * span <= c.numel and c.bad >= 0.9 * span and c.numel - 1 - c.last_bad < max(1.0, 0.1 * span)


def _fold(residues: torch.Tensor, size: int) -> torch.Tensor:
    return residues.reshape(-1, size).sum(0)


def _blocks_of(loc: Localisation, c: _Counts) -> None:
    """Bad elements only at one or two positions of every block of some power of two: the largest
    such block (positions 127 of 128 read 15 of 16 too: the largest is the kernel's)."""
    residues = c.residues
    if residues is None:  # the caller checks: kept only where the output is small enough to count
        raise RuntimeError("localise: no residue counts to find blocks in")
    smallest = torch.nonzero(_fold(residues, MIN_BLOCK)).flatten()
    if not 0 < smallest.numel() <= 2:
        return
    size = MIN_BLOCK
    while size * 2 <= MAX_RESIDUE_BLOCK and torch.count_nonzero(_fold(residues, size * 2)) == smallest.numel():
        size *= 2
    loc.block = size
    loc.block_positions = torch.nonzero(_fold(residues, size)).flatten().tolist()


def _tiles(loc: Localisation, c: _Counts) -> None:
    """The largest aligned power-of-two tile (64 and up) whose bad tiles are at least half bad, and
    not all tiles: whole blocks wrong, the rest right (left at 0 when there is none)."""
    if c.tiles is None:
        return
    padded = torch.nn.functional.pad(c.tiles, (0, (-c.tiles.numel()) % 128))
    for factor in (128, 64, 32, 16, 8, 4, 2, 1):
        tiles = padded.reshape(-1, factor).sum(1)[: -(-c.numel // (TILE * factor))]
        bad_tiles = int(torch.count_nonzero(tiles))
        if 0 < bad_tiles < tiles.numel() and c.bad >= 0.5 * bad_tiles * TILE * factor:
            loc.block_size, loc.blocks_bad, loc.blocks = TILE * factor, bad_tiles, tiles.numel()
            return


def irregular(shape: list[int]) -> bool:
    """A shape with a dimension that is not a multiple of 16 (where masks and tails matter)."""
    return any(size % 16 for size in shape)


def describe(loc: Localisation) -> list[str]:
    """The facts as lines a model can act on, most telling first."""
    what = f"gradient of {loc.gradient}" if loc.gradient else f"output {loc.output}"
    where = f"{what} (shape {tuple(loc.shape)}) on input set {loc.trial}"
    lines = rerun_facts(loc)[:1]  # the unwritten region first, apart from what is written but wrong
    lines.append(f"{where}: {loc.bad} of {loc.numel} elements wrong ({100 * loc.bad / max(loc.numel, 1):.3g}%)")
    lines += rerun_facts(loc)[1:]
    lines += loc.notes
    failed = [s for s in loc.sets if not s.ok]
    if loc.sets and len(failed) < len(loc.sets):
        shapes = lambda sets: ", ".join(f"set {s.trial} {tuple(s.shape)}" for s in sets)  # noqa: E731
        lines.append(f"wrong only on {shapes(failed)}; right on {shapes([s for s in loc.sets if s.ok])}"
                     + (" (only the irregular shapes, not multiples of 16, fail)" if loc.irregular_only else ""))
    if loc.nonfinite:
        lines.append(f"{loc.nonfinite} {loc.nonfinite_kind} values where the reference is finite (or differs); "
                     f"the first at index {loc.first_nonfinite}")
    if loc.tail_from is not None:
        span = loc.numel - loc.tail_from
        which = "every element" if loc.bad == span else f"{loc.bad} of the {span} elements"
        lines.append(f"only the tail is wrong: {which} from flat index {loc.tail_from} to the end "
                     f"({span} elements), none before")
    if loc.block:
        lines.append(f"wrong only at position(s) {loc.block_positions} of every block of {loc.block} elements "
                     "(a block boundary)")
    elif loc.period:
        lines.append(f"wrong only at every {loc.period}th element (flat index = {loc.offset} mod {loc.period})")
    if loc.rows:
        row_text = f"rows: {loc.rows_bad} of {loc.rows} wrong ({loc.bad_rows})"
        if loc.first_row_only_right:
            row_text += "; only row 0 is right"
        if loc.whole_rows:
            row_text += "; every element of those rows is wrong"
        lines.append(row_text)
        lines.append(f"columns: {loc.columns_bad} of {loc.columns} wrong ({loc.bad_columns})")
    if loc.blocks:
        lines.append(f"whole aligned blocks of {loc.block_size} elements are wrong: {loc.blocks_bad} of "
                     f"{loc.blocks} blocks, the rest right")
    if loc.median_rel_err is not None:
        lines.append(f"median relative error of the wrong elements: {loc.median_rel_err:.3g}")
    if loc.worst:
        lines.append("worst: " + "; ".join(f"at {e.index} got {e.got:.6g}, expected {e.expected:.6g}"
                                           for e in loc.worst))
    return lines


def rerun_facts(loc: Localisation) -> list[str]:
    """What the two reruns with other poisons showed (written.py), worded from the kernel's pattern
    only: the first line is the unwritten region, or empty when every element was written."""
    if not loc.reruns:
        return []
    lines = [f"never written: {loc.unwritten_region} (they held the poison in two runs with different poison values)"
             if loc.unwritten else "every element was written (none held the poison in two runs with different "
                                   "poison values)"]
    if loc.nonfinite_written:
        lines.append("the kernel computes NaN/inf itself: they stay when the output memory holds finite values")
    if loc.init_dependent:
        lines.append(f"{loc.init_dependent} written elements move with what the output memory held before the call")
    if loc.varies:
        lines.append("written elements differ between two runs of the same inputs (on the CPU, in other program "
                     "orders)")
    if loc.relation:
        lines.append(f"written but wrong: {loc.relation}")
    return lines
