"""One precision for both sides: `declared_precision` (the trusted job's reference, the candidate's
checked runs) sets IEEE float32 through torch's fp32_precision nodes whatever state it finds, keeps the
legacy flags readable, puts everything back, and a change made inside it shows (precision_changes),
the float16/bfloat16 reduction settings' too."""

import torch

from kernelloop.tools.verify._runtime import (
    DECLARED_PRECISION,
    PRECISION_NODES,
    declared_precision,
    precision_changes,
    precision_flags,
)


def _nodes(flags: dict[str, str]) -> dict[str, str]:
    """The fp32_precision nodes alone (the reduction settings are held as they stand, not declared)."""
    return {name: value for name, value in flags.items() if name in PRECISION_NODES}


def test_it_sets_ieee_float32_and_puts_the_defaults_back():
    before = precision_flags()
    with declared_precision() as declared:
        assert _nodes(declared) == DECLARED_PRECISION
        assert declared["torch.backends.cuda.matmul.allow_fp16_accumulation"] == "False"
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
        assert torch.get_float32_matmul_precision() == "highest"
        assert precision_changes(declared) == {}
    assert precision_flags() == before


def test_it_overrides_tf32_set_through_the_new_api():
    # the legacy setters alone left cuDNN's conv in TF32 once a parent node had been set to tf32
    with declared_precision():  # the outer block puts this process's own settings back at the end
        torch.backends.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        mangled = precision_flags()
        with declared_precision() as declared:
            assert _nodes(declared) == DECLARED_PRECISION
        assert precision_flags() == mangled


def test_a_switch_inside_shows_and_is_undone():
    before = precision_flags()
    with declared_precision() as declared:
        torch.set_float32_matmul_precision("high")
        changes = precision_changes(declared)
    assert changes["torch.backends.cuda.matmul.fp32_precision"] == "ieee -> tf32"
    assert precision_flags() == before


def test_a_reduction_setting_switched_inside_shows():
    """fp16 accumulation in cuBLAS (no fp32_precision node says it): a C++ extension could set it past the
    lock on the setters, so the read after each call covers it."""
    with declared_precision() as declared:
        torch.backends.cuda.matmul.allow_fp16_accumulation = True
        try:
            changes = precision_changes(declared)
        finally:
            torch.backends.cuda.matmul.allow_fp16_accumulation = False
    assert changes == {"torch.backends.cuda.matmul.allow_fp16_accumulation": "False -> True"}
