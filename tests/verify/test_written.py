"""What two reruns with other poisons say (tools/verify/written.py): the unwritten region, what
moved, and how the written part relates to the reference; worded the same whatever the poison
and the input values."""

from __future__ import annotations

import pytest
import torch

from kernelloop.records import Localisation
from kernelloop.tools.verify.compare import tolerance_for
from kernelloop.tools.verify.localise import describe, localise, rerun_facts
from kernelloop.tools.verify.reruns import draw_poisons
from kernelloop.tools.verify.written import add_facts, region

TOL = tolerance_for(torch.float32)


def _runs(kernel, x: torch.Tensor, poisons: list[float]) -> list[torch.Tensor]:
    """`kernel(x, out)` writes into an output whose memory starts as each poison."""
    runs = []
    for poison in poisons:
        out = torch.full_like(x, poison)
        kernel(x, out)
        runs.append(out)
    return runs


def _facts(kernel, x: torch.Tensor, ref: torch.Tensor, poisons: list[float]) -> Localisation:
    runs = _runs(kernel, x, poisons)
    loc = localise(runs[0], ref, TOL)
    add_facts(loc, ref, runs, poisons, TOL)
    return loc


def _partial_softmax(x, out):  # BLOCK 512 over 1000 columns: half the row, the rest never written
    out[:, :512] = torch.softmax(x[:, :512], dim=1)


def _shift_down(x, out):
    out[1:] = 2 * x[:-1]


def _accumulate(x, out):  # reads the output before writing it
    out += 2 * x


def test_poisons_are_finite_opposite_and_exact_in_half_precision():
    for _ in range(20):
        first, second = draw_poisons()
        assert first > 0 > second
        for value in (first, second):
            for dtype in (torch.float16, torch.bfloat16):
                assert float(torch.tensor(value, dtype=dtype)) == value


@pytest.mark.parametrize("seed", range(5))
def test_a_partial_reduction_reads_the_same_whatever_the_poison_and_inputs(seed):
    torch.manual_seed(seed)
    x = torch.randn(48, 1000)
    loc = _facts(_partial_softmax, x, torch.softmax(x, dim=1), draw_poisons())
    assert loc.unwritten == 48 * 488 and loc.unwritten_kind == "row_tail"
    assert loc.unwritten_region == "columns 512-999 (of 1000) were never written, in every row"
    assert (loc.relation_kind, loc.varies, loc.init_dependent) == ("row_factor", 0, 0)
    assert rerun_facts(loc) == [
        "never written: columns 512-999 (of 1000) were never written, in every row (they held the poison in two runs "
        "with different poison values)",
        "written but wrong: the wrong elements are off by a constant factor per row, different in each row"]
    assert describe(loc)[0] == rerun_facts(loc)[0]  # the unwritten region comes first


def test_a_row_shift_and_its_unwritten_first_row():
    x = torch.randn(64, 96)
    loc = _facts(_shift_down, x, 2 * x, [24.0, -52.0])
    assert loc.unwritten_region == "row 0 (of 64) was never written, every column of it"
    assert loc.relation_kind == "row_shift" and "row i holds what row i-1 should" in loc.relation


def test_a_transposed_store():
    x = torch.randn(64, 96)
    runs = [(2 * x).t().contiguous().reshape(64, 96) for _ in range(2)]
    loc = localise(runs[0], 2 * x, TOL)
    add_facts(loc, 2 * x, runs, [24.0, -52.0], TOL)
    assert loc.unwritten == 0 and loc.relation_kind == "transpose"
    assert "laid out as a (96, 64) matrix" in loc.relation


def test_reading_the_output_before_writing_it_moves_with_the_poison():
    x = torch.randn(12325)
    loc = _facts(_accumulate, x, 2 * x, [24.0, -52.0])
    assert (loc.unwritten, loc.init_dependent, loc.varies) == (0, 12325, 0)


def test_a_result_that_changes_between_runs_varies_and_gets_no_relation():
    x = torch.randn(32, 256)
    ref = 2 * x
    runs = [ref.clone(), ref.clone()]
    runs[0][3:9] = 0.0  # a different block wrong in each run, as an order-dependent kernel gives
    runs[1][20:25] = 0.0
    loc = localise(runs[0], ref, TOL)
    add_facts(loc, ref, runs, [24.0, -52.0], TOL)
    assert loc.varies > 10 * 256 and loc.relation_kind == "" and loc.unwritten == 0  # all but those near 0


def test_nan_the_kernel_computes_is_not_unwritten_and_does_not_vary():
    x = torch.randn(23, 200)
    ref = torch.softmax(x, dim=1)
    runs = [ref.clone(), ref.clone()]
    for run in runs:
        run[:, 5] = float("nan")
    loc = localise(runs[0], ref, TOL)
    add_facts(loc, ref, runs, [24.0, -52.0], TOL)
    assert (loc.unwritten, loc.nonfinite_written, loc.varies) == (0, 23, 0)


def test_near_zero_outputs_are_not_called_transposed():
    """A softmax of wide logits is ~0 almost everywhere: a transpose of it is as close, which says nothing."""
    x = 50 * torch.randn(23, 200)
    ref = torch.softmax(x, dim=1)
    runs = [torch.exp(x) / torch.exp(x).sum(1, keepdim=True) for _ in range(2)]
    loc = localise(runs[0], ref, TOL)
    add_facts(loc, ref, runs, [24.0, -52.0], TOL)
    assert loc.relation_kind == ""


@pytest.mark.parametrize(("marked", "kind", "words"), [
    (lambda m: m.__setitem__((slice(96, 100), slice(None)), True), "rows", "rows 96-99 (of 100)"),
    (lambda m: m.__setitem__((slice(None), slice(10, 20)), True), "columns", "columns 10-19 (of 96)"),
    (lambda m: m.view(-1).__setitem__(slice(9000, None), True), "tail", "the tail from flat index 9000"),
    (lambda m: m.view(-1).__setitem__(slice(1024, 2048), True), "blocks", "blocks of 1024 elements"),
    (lambda m: m.view(-1).__setitem__(slice(5, 9000, 997), True), "scattered", "scattered"),
    (lambda m: m.fill_(True), "all", "no element of the output was written"),
])
def test_regions(marked, kind, words):
    mask = torch.zeros(100, 96, dtype=torch.bool)
    marked(mask)
    found_kind, found_words = region(mask.reshape(-1), [100, 96])
    assert found_kind == kind and words in found_words
