"""Where a wrong output is wrong (tools/verify/localise.py), and the reason codes' record."""

from __future__ import annotations

import json

import pytest
import torch

from kernelloop.records import STATUS_OF, Code, Status, Verdict
from kernelloop.tools.verify import localise as loc_module
from kernelloop.tools.verify.compare import compare_outputs, tolerance_for
from kernelloop.tools.verify.localise import describe, localise, ranges

TOL = tolerance_for(torch.float32)


@pytest.fixture(params=[1 << 22, 1000], ids=["one chunk", "chunks of 1000"])
def chunked(request, monkeypatch):
    """Every pattern must come out the same whether the output is read in one chunk or many."""
    monkeypatch.setattr(loc_module, "CHUNK_ELEMENTS", request.param)


def test_a_tail_only(chunked):
    ref = torch.randn(12325)
    out = ref.clone()
    out[-37:] = ref[-37:] + 1.0  # every tail element off (zeroing would leave any reference value near 0 right)
    loc = localise(out, ref, TOL)
    assert (loc.bad, loc.tail_from, loc.period, loc.block) == (37, 12288, None, None)
    assert "only the tail is wrong: every element from flat index 12288" in "\n".join(describe(loc))


def test_one_position_in_every_block(chunked):
    ref = torch.randn(12325)
    out = ref.clone()
    out[127::128] += 1.0
    loc = localise(out, ref, TOL)
    assert (loc.block, loc.block_positions, loc.period, loc.offset) == (128, [127], 128, 127)


def test_only_row_zero_right_and_whole_nan_rows(chunked):
    ref = torch.randn(64, 100)
    out = ref.clone()
    out[1:] = ref[1:] + 1.0
    loc = localise(out, ref, TOL)
    assert loc.first_row_only_right and (loc.rows_bad, loc.rows, loc.bad_rows) == (63, 64, "1-63")
    out = ref.clone()
    out[[5, 9]] = float("nan")
    loc = localise(out, ref, TOL)
    assert loc.whole_rows and loc.nonfinite == 200 and loc.nonfinite_kind == "NaN" and loc.first_nonfinite == [5, 0]
    assert loc.bad_rows == "5, 9" and loc.columns_bad == 100


def test_whole_blocks_wrong_and_the_worst_elements(chunked):
    ref = torch.randn(16384)
    out = ref.clone()
    out[2048:3072] = 0.0
    out[9216:10240] = 0.0
    loc = localise(out, ref, TOL)
    assert (loc.block_size, loc.blocks_bad, loc.blocks) == (1024, 2, 16)
    worst = loc.worst[0]
    assert worst.got == 0.0 and worst.expected == float(ref[worst.index[0]])
    assert abs(worst.expected) == float(ref[2048:3072].abs().max().clamp(min=ref[9216:10240].abs().max()))


def test_a_small_error_everywhere_is_measured_against_rel_when_atol_rtol_pass():
    ref = torch.randn(4096) + 5.0
    loc = localise(ref * 1.004, ref, TOL)
    assert loc.bad == 4096 and loc.median_rel_err == pytest.approx(0.004, rel=1e-3)
    assert "no element is outside atol/rtol" in loc.notes[0]


def test_ranges_are_short():
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert ranges(list(range(0, 40, 2)), shown=3) == "0, 2, 4 and 17 more ranges"


def test_comparison_codes_name_the_check_that_failed():
    ref = torch.randn(100)
    assert compare_outputs([ref.double()], [ref]).code is Code.wrong_type
    nan = ref.clone()
    nan[3] = float("nan")
    assert compare_outputs([nan], [ref]).code is Code.nonfinite
    assert compare_outputs([ref + 1], [ref]).code is Code.mismatch
    assert compare_outputs([ref], [ref]).code is Code.correct


def test_every_code_but_unknown_belongs_to_one_status():
    assert set(STATUS_OF) == set(Code) - {Code.unknown}
    assert STATUS_OF[Code.decoy_kernel] is Status.rejected and STATUS_OF[Code.timed_out] is Status.timeout


def test_a_verdict_written_before_codes_reads_unknown_and_round_trips():
    old = {"status": "incorrect", "reason": "mismatch: output 0 ...", "device": "cpu"}
    assert Verdict.model_validate(old).code is Code.unknown
    assert Verdict.model_validate({**old, "code": "a_code_from_the_future"}).code is Code.unknown
    ref = torch.randn(8, 8)
    verdict = Verdict(status=Status.incorrect, reason="x", code=Code.mismatch, localisation=localise(ref + 1, ref, TOL))
    assert Verdict.model_validate(json.loads(verdict.model_dump_json())) == verdict


def test_a_tail_left_at_zero_is_a_tail_even_where_the_reference_is_near_zero(chunked):
    """CI saw it: a missing tail mask leaves zeros, and a reference value within tolerance of 0
    makes one tail element right; the tail is still the tail."""
    ref = torch.randn(12325).abs() + 1.0  # every other tail value far from 0
    ref[-30] = 0.001  # within atol of 0: the unwritten 0 there is right
    out = ref.clone()
    out[-37:] = 0.0
    loc = localise(out, ref, TOL)
    assert loc.tail_from == 12288 and loc.bad == 36
    assert "only the tail is wrong: 36 of the 37 elements from flat index 12288" in "\n".join(describe(loc))
