"""The attention benchmarks' parts that need no GPU: their reports are written from raw lines
alone (every number in a README comes from a raw file), and the sweep's table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


starters = _load("attention_starters")
baselines = _load("attention_baselines")


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


STARTER_ROW = {"variant": "1_causal_mask", "status": "correct", "reason": "correct on 6 input sets",
               "config": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
               "ms": {"starter": 0.3512, "flex_attention": 0.4256, "sdpa_flash": 0.3101, "sdpa_cudnn": 0.2987},
               "speedup": {"flex_attention": 1.2117, "sdpa_flash": 0.883, "sdpa_cudnn": 0.8505},
               "best_available": "sdpa_cudnn", "speedup_over_best": 0.8505}


def test_starters_report_comes_from_the_raw_lines(tmp_path):
    _write(tmp_path / "starters.jsonl", [
        STARTER_ROW,
        {"variant": "3_relative_positional", "status": "incorrect", "reason": "mismatch at [0, 1, 2, 3]"},
        {"variant": "5_full_mask", "status": "correct", "ms": {"starter": 0.5, "flex_attention": 0.6},
         "speedup": {"flex_attention": 1.2}, "best_available": "flex_attention", "speedup_over_best": 1.2,
         "config": {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}},
        {"call": {"mode": "starters", "variants": 3, "wall_s": 312.4,
                  "environment": {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "triton": "3.6.0"}}}])
    _write(tmp_path / "sweep.jsonl", [
        {"sweep": "1_causal_mask", "label": "128x64 w8 s3", "default": True, "ok": True, "median_ms": 0.36},
        {"sweep": "1_causal_mask", "label": "128x128 w8 s2", "default": False, "ok": True, "median_ms": 0.30},
        {"sweep": "1_causal_mask", "label": "128x128 w8 s3", "default": False, "ok": False,
         "reason": "OutOfResources: shared memory"},
        {"call": {"mode": "sweep", "variants": 1, "wall_s": 95.0, "environment": {}}}])
    text = starters.report(tmp_path)
    row = next(line for line in text.splitlines() if line.startswith("| 1_causal_mask"))
    assert "| 0.3512 | 0.4256 | 1.21x | 0.3101 | 0.2987 | sdpa_cudnn | 0.85x | 128x64 w8 s3 |" in row
    assert "| 3_relative_positional | incorrect: mismatch at [0, 1, 2, 3] |" in text
    assert "Geometric mean over FlexAttention: 1.21x (2 variants)" in text
    assert "NVIDIA H100 80GB HBM3, torch 2.11.0, triton 3.6.0" in text
    assert "| starters.jsonl | starters | 312 | 3 |" in text and "| sweep.jsonl | sweep | 95 | 1 |" in text
    assert "hand-written" in text
    sweep_line = next(line for line in text.splitlines() if line.startswith("1_causal_mask"))
    assert "128x128 w8 s2" in sweep_line and "1.20x" in sweep_line  # 0.36 / 0.30
    assert "- 1_causal_mask 128x128 w8 s3: OutOfResources: shared memory" in text


def test_sweep_table_names_the_best_config_and_its_gain_over_the_default():
    rows = [{"sweep": "5_full_mask", "label": "a", "default": True, "ok": True, "median_ms": 1.0},
            {"sweep": "5_full_mask", "label": "b", "default": False, "ok": True, "median_ms": 0.8},
            {"sweep": "6_tanh_softcap", "label": "a", "default": True, "ok": False}]
    table = starters.sweep_table(rows)
    assert table[1].split()[:2] == ["5_full_mask", "b"] and table[1].endswith("1.25x")
    assert "no config ran" in table[2]


@pytest.mark.parametrize(("name", "count", "expected"), [
    ("1_causal_mask", 3, []), ("2_document_mask", 4, ["ids"]), ("10_neighborhood_2d", 3, [None, 36])])
def test_the_sweep_passes_each_variant_its_extra_argument(name, count, expected):
    import torch

    inputs = [torch.zeros(1, 1, 36 * 36, 4)] * 3 + (["ids"] if count == 4 else [])
    assert starters._extra(name, inputs) == expected


def test_baselines_report_shows_each_variant_the_best_available_and_where_the_time_went(tmp_path):
    _write(tmp_path / "h100.jsonl", [
        {"problem": "1_causal_mask", "status": "ok", "ms": {"eager": 20.44, "compile": 4.67, "flex_attention": 0.4256,
                                                            "sdpa_flash": 0.31, "sdpa_cudnn": 0.2987},
         "compile_s": {"compile": 21.3, "flex_attention": 9.8, "sdpa_flash": 0.1}, "best": "sdpa_cudnn",
         "wall_s": 38.2},
        {"problem": "2_document_mask", "status": "error", "reason": "timing the baselines failed: timed out",
         "wall_s": 300.0},
        {"call": {"wall_s": 402.0, "problems": 2, "gpu": "NVIDIA H100 80GB HBM3"}}])
    text = baselines.report(tmp_path)
    assert "- device call: 2 problems in 402 s of wall time on NVIDIA H100 80GB HBM3" in text
    assert "- problems' own wall time: 338 s" in text
    row = next(line for line in text.splitlines() if line.startswith("| 1_causal_mask"))
    assert row == ("| 1_causal_mask | 20.4400 | 4.6700 | 0.4256 | 0.3100 | 0.2987 | sdpa_cudnn | 38.2 | 21.3 | 9.8 |")
    assert "| 2_document_mask | error: timing the baselines failed: timed out |" in text
