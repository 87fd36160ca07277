"""Each cause the critic may name for a wrong output is named only when its facts hold
(agents/causes.py): with the facts of one cause alone, that cause and no other is offered."""

from __future__ import annotations

import pytest

from kernelloop.agents.causes import BY_KEY, CAUSES, named_in, offered, wrongly_named
from kernelloop.agents.critic_facts import wrong_output_fixes
from kernelloop.records import Localisation

BASE = {"shape": [64, 96], "numel": 6144, "bad": 100, "rows": 64, "rows_bad": 30, "columns": 96, "columns_bad": 40,
        "reruns": 2}
# The facts of each cause alone, as the verifier would set them (reruns done).
ALONE = {
    "irregular_mask": {"irregular_only": True},
    "tail_mask": {"tail_from": 6000},
    "row_wider_than_block": {"unwritten": 2048, "unwritten_kind": "row_tail",
                             "unwritten_region": "columns 64-95 (of 96) were never written, in every row"},
    "unwritten_rows": {"unwritten": 96, "unwritten_kind": "rows",
                       "unwritten_region": "row 0 (of 64) was never written, every column of it"},
    "unwritten_elsewhere": {"unwritten": 10, "unwritten_kind": "scattered",
                            "unwritten_region": "10 of 6144 elements were never written, scattered"},
    "partial_reduction": {"relation_kind": "row_factor", "relation": "per row"},
    "wrong_constant": {"relation_kind": "constant_factor", "relation": "one"},
    "column_parameter": {"relation_kind": "column_offset", "relation": "per column"},
    "transposed": {"relation_kind": "transpose", "relation": "transposed"},
    "row_shift": {"relation_kind": "row_shift", "relation": "shifted"},
    "block_shift": {"relation_kind": "block_shift", "relation": "shifted"},
    "block_boundary": {"block": 128, "block_positions": [127], "period": 128, "offset": 127},
    "constant_stride": {"period": 7, "offset": 3},
    "row_stride": {"first_row_only_right": True},
    "reads_output_first": {"init_dependent": 6144},
    "overflow": {"nonfinite": 23, "nonfinite_kind": "NaN", "nonfinite_written": 23},
    "race": {"varies": 3072},
    "precision": {"median_rel_err": 0.002, "rows_bad": 64, "columns_bad": 96},
}


def test_every_cause_has_its_facts_here():
    assert set(ALONE) == {cause.key for cause in CAUSES}


@pytest.mark.parametrize("key", sorted(ALONE))
def test_with_one_cause_s_facts_only_it_is_named(key):
    loc = Localisation(**{**BASE, **ALONE[key]})
    assert [cause.key for cause in offered(loc)] == [key]
    text = "\n".join(wrong_output_fixes(loc))
    assert BY_KEY[key].phrase in text.lower()
    assert wrongly_named(text, loc) == [], text  # no other cause's words slip into the facts or the fix


@pytest.mark.parametrize("key", sorted(ALONE))
def test_without_its_facts_a_cause_stays_silent(key):
    """Every other cause's facts, one at a time: this cause is never offered on them."""
    for other, facts in ALONE.items():
        if other != key:
            assert not BY_KEY[key].holds(Localisation(**{**BASE, **facts})), (key, other)


def test_a_race_needs_a_result_that_moved_between_runs():
    blocks = {"blocks": 32, "blocks_bad": 31, "block_size": 4096}
    assert "race" not in [c.key for c in offered(Localisation(**{**BASE, **blocks}))]
    assert "race" in [c.key for c in offered(Localisation(**{**BASE, **blocks, "varies": 100}))]


def test_a_pattern_that_moved_between_runs_is_not_the_kernel_s():
    """Row 0 right by chance in one shuffled run is no row stride, an unlucky tail no missing mask."""
    loc = Localisation(**{**BASE, "first_row_only_right": True, "tail_from": 6000, "varies": 100})
    assert [c.key for c in offered(loc)] == ["race"]


def test_before_reruns_nan_is_named_as_either_cause():
    loc = Localisation(**{**BASE, "reruns": 0, "nonfinite": 23, "nonfinite_kind": "NaN", "first_nonfinite": [0, 5]})
    text = "\n".join(wrong_output_fixes(loc))
    assert "unwritten output elements or an overflow" in text and wrongly_named(text, loc) == []
    assert wrongly_named(text, Localisation(**{**BASE, "nonfinite": 23})) == ["overflow"]


def test_the_verifier_s_nan_reason_names_no_cause():
    reason = "nan: output 0 has 37 values whose NaN/inf does not match the reference's (unwritten or overflowing elements)"
    assert named_in(reason) == []
