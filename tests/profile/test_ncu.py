"""ncu.py on the CPU: the ncu argv, CSV parsing, error notes, availability, record round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelloop.tools.profile import ncu
from kernelloop.tools.profile.ncu import (
    NcuError,
    NcuKernelSummary,
    NcuReport,
    ncu_available,
    ncu_command,
    ncu_notes,
    parse_ncu_csv,
    parse_number,
    read_ncu_output,
    to_base_unit,
)

NCU = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"


# --------------------------------------------------------------------------- ncu argv


def test_ncu_command_always_leaves_clocks_alone():
    argv = ncu_command(["python", "run.py", "--n", "3"], "/tmp/out.csv", kernel_regex="fused_.*")
    assert argv[0] == "ncu"
    i = argv.index("--clock-control")
    assert argv[i + 1] == "none"
    assert argv[argv.index("--log-file") + 1] == "/tmp/out.csv"
    assert argv[argv.index("--page") + 1] == "raw"
    assert "--csv" in argv
    assert argv[argv.index("--kernel-name") + 1] == "regex:fused_.*"
    assert argv[-4:] == ["python", "run.py", "--n", "3"]
    metrics = argv[argv.index("--metrics") + 1].split(",")
    for wanted in (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "launch__registers_per_thread",
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    ):
        assert wanted in metrics


def test_ncu_command_options():
    argv = ncu_command(
        ["python", "x.py"],
        Path("o.csv"),
        metrics=["gpu__time_duration.sum"],
        launch_skip=2,
        launch_count=1,
        ncu="/opt/ncu",
    )
    assert argv[0] == "/opt/ncu"
    assert argv[argv.index("--metrics") + 1] == "gpu__time_duration.sum"
    assert argv[argv.index("--launch-skip") + 1] == "2"
    assert argv[argv.index("--launch-count") + 1] == "1"
    assert "--kernel-name" not in argv
    assert "--clock-control" in argv


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"python_argv": []}, "empty"), ({"metrics": []}, "no metrics"), ({"launch_count": 0}, "launch_count")],
)
def test_ncu_command_rejects_bad_input(kwargs, message):
    args = {"python_argv": ["python", "x.py"], "out_csv": "o.csv", **kwargs}
    with pytest.raises(NcuError, match=message):
        ncu_command(**args)


# --------------------------------------------------------------------------- ncu CSV


@pytest.mark.parametrize(
    ("text", "value"),
    [("1,234.5", 1234.5), ("412,384", 412384.0), ("n/a", None), ("", None), ("(256, 1, 1)", None), ("0.61", 0.61)],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("value", "unit", "base"),
    [
        (412384.0, "nsecond", 412384e-9),
        (53.79, "usecond", 53.79e-6),
        (2.0, "msecond", 2e-3),
        (3.06, "Tbyte/second", 3.06e12),
        (1.5, "Gbyte/second", 1.5e9),
        (2.0, "Mbyte", 2e6),
        (36.84, "%", 36.84),
    ],
)
def test_to_base_unit(value, unit, base):
    assert to_base_unit(value, unit) == pytest.approx(base)


def test_parse_raw_page():
    kernels = parse_ncu_csv((NCU / "hand_written_raw_gemm_relu.csv").read_text())
    assert [(k.id, k.kernel) for k in kernels] == [
        (0, "fused_gemm_relu_kernel"),
        (1, "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT"),
        (2, "fused_gemm_relu_kernel"),
    ]
    first = kernels[0]
    assert first.duration_ms == pytest.approx(0.412384)
    assert first.sol_compute_pct == 74.02
    assert first.sol_memory_pct == 52.11
    assert first.dram_pct == 36.84
    assert first.dram_gb_per_s == pytest.approx(1236.40182764012)
    assert first.occupancy_pct == 12.45
    assert first.registers_per_thread == 168
    assert first.tensor_pipe_pct == 71.35
    assert first.block_size == "(256, 1, 1)" and first.grid_size == "(528, 1, 1)"
    assert first.top_stalls() == [("math_pipe_throttle", 3.07), ("long_scoreboard", 1.92), ("wait", 1.15)]
    # n/a is absent evidence: recorded as None, left out of the stalls
    third = kernels[2]
    assert third.metrics["smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio"] is None
    assert "mio_throttle" not in third.stalls


def test_parse_details_page_with_display_names():
    kernels = parse_ncu_csv((NCU / "hand_written_details_softmax.csv").read_text())
    assert len(kernels) == 1
    k = kernels[0]
    assert k.kernel == "softmax_kernel"
    assert k.duration_ms == pytest.approx(0.05379)
    assert k.sol_memory_pct == 91.27  # the % row, not the 3.06 Tbyte/second one
    assert k.sol_compute_pct == 23.62
    assert k.dram_pct == 91.27
    assert k.occupancy_pct == 87.93
    assert k.registers_per_thread == 32
    assert k.tensor_pipe_pct is None  # not collected


def test_parse_details_page_with_raw_metric_names():
    header = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
        '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    )
    prefix = '"0","1","python","h","k","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics",'
    text = "\n".join(
        [
            header,
            prefix + '"gpu__time_duration.sum","usecond","1,500.00"',
            prefix + '"launch__registers_per_thread","register/thread","40"',
        ]
    )
    (k,) = parse_ncu_csv(text)
    assert k.duration_ms == pytest.approx(1.5)
    assert k.registers_per_thread == 40


def test_parse_without_a_table_is_empty():
    assert parse_ncu_csv((NCU / "hand_written_permission_error.txt").read_text()) == []
    assert parse_ncu_csv("") == []


def test_parse_rejects_a_truncated_row():
    lines = (NCU / "hand_written_raw_gemm_relu.csv").read_text().splitlines()
    lines[-1] = lines[-1].rsplit(",", 3)[0]
    with pytest.raises(NcuError, match=r"line \d+: \d+ fields"):
        parse_ncu_csv("\n".join(lines))


def test_permission_error_degrades_to_a_note():
    report = read_ncu_output((NCU / "hand_written_permission_error.txt").read_text())
    assert report.kernels == []
    assert any("ERR_NVGPUCTRPERM" in note and "root" in note for note in report.notes)
    assert any("no kernels were profiled" in note for note in report.notes)
    assert all("\n" not in note for note in report.notes)


def test_unknown_metric_error_becomes_a_note():
    notes = ncu_notes((NCU / "hand_written_bad_metric.txt").read_text())
    assert notes == ["ncu error: Failed to find metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]


def test_read_ncu_output_notes_unreadable_tables_instead_of_raising():
    report = read_ncu_output('"ID","Kernel Name","x"\n"0","k"\n')
    assert report.kernels == [] and "unreadable" in report.notes[0]


def test_read_ncu_output_of_a_good_run_has_no_notes():
    report = read_ncu_output((NCU / "hand_written_raw_gemm_relu.csv").read_text())
    assert len(report.kernels) == 3 and report.notes == []


# --------------------------------------------------------------------------- ncu_available


def test_ncu_available_without_the_binary(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: None)
    ok, note = ncu_available()
    assert not ok and "not found" in note


def test_ncu_available_reports_a_permission_error_seen_in_output(monkeypatch):
    monkeypatch.setattr(ncu, "find_ncu", lambda: "/usr/local/cuda/bin/ncu")
    monkeypatch.setattr(ncu, "NVIDIA_PARAMS", Path("/nonexistent/params"))
    assert ncu_available() == (True, "ncu at /usr/local/cuda/bin/ncu")
    ok, note = ncu_available((NCU / "hand_written_permission_error.txt").read_text())
    assert not ok and "ERR_NVGPUCTRPERM" in note and note.startswith("/usr/local/cuda/bin/ncu")


def test_ncu_available_reads_the_driver_restriction(monkeypatch, tmp_path):
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\n")
    monkeypatch.setattr(ncu, "find_ncu", lambda: "/x/ncu")
    monkeypatch.setattr(ncu, "NVIDIA_PARAMS", params)
    monkeypatch.setattr(ncu.os, "geteuid", lambda: 1000)
    ok, note = ncu_available()
    assert not ok and "RmProfilingAdminOnly" in note
    monkeypatch.setattr(ncu.os, "geteuid", lambda: 0)  # root may read them
    assert ncu_available()[0]
    params.write_text("RmProfilingAdminOnly: 0\n")
    monkeypatch.setattr(ncu.os, "geteuid", lambda: 1000)
    assert ncu_available()[0]


def test_find_ncu_falls_back_to_install_dirs(monkeypatch, tmp_path):
    for version in ("2024.3.1", "2025.2.1"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "ncu").write_text("")
    monkeypatch.setattr(ncu.shutil, "which", lambda name: None)
    monkeypatch.setattr(ncu, "NCU_SEARCH_GLOBS", (str(tmp_path / "*" / "ncu"),))
    assert ncu.find_ncu() == str(tmp_path / "2025.2.1" / "ncu")


# --------------------------------------------------------------------------- records


def test_report_round_trips_through_json_with_kernel_records():
    report = read_ncu_output((NCU / "hand_written_raw_gemm_relu.csv").read_text())
    again = NcuReport.model_validate_json(report.model_dump_json())
    assert again == report
    assert all(isinstance(k, NcuKernelSummary) for k in again.kernels)
    assert again.kernels[0].top_stalls() == report.kernels[0].top_stalls()


def test_report_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown fields bogus"):
        NcuReport.model_validate({"kernels": [], "bogus": 1})


def test_brief_keeps_only_what_was_read():
    brief = NcuKernelSummary(id=0, kernel="k", duration_ms=0.5, stalls={"wait": 1.0, "barrier": 2.0}).brief()
    assert brief == {"kernel": "k", "duration_ms": 0.5, "top_stalls": [["barrier", 2.0], ["wait", 1.0]]}
