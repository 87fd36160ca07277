"""Nsight Compute: the ncu command, reading its CSV, and whether it can run here.

`ncu_command` builds the argv (clocks left alone: `--clock-control none`); `read_ncu_output`
and `parse_ncu_csv` read its CSV into NcuKernelSummary records; `ncu_notes` turns its errors
(no permission for the counters, nothing profiled) into notes, never exceptions;
`ncu_available` says whether ncu is installed and may read the counters. Pure Python (no
torch), so every part but running ncu itself is testable on a CPU. Times are ms unless a
name says otherwise.
"""

from __future__ import annotations

import csv
import glob
import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from kernelloop.records import NcuFacts, Record

TOP_STALLS = 3  # stall reasons kept per kernel
_BRIEF_FIELDS = (
    "duration_ms",
    "sol_compute_pct",
    "sol_memory_pct",
    "dram_pct",
    "dram_gb_per_s",
    "occupancy_pct",
    "registers_per_thread",
    "tensor_pipe_pct",
)


class NcuError(ValueError):
    """Bad input to the ncu tools or an unreadable ncu table. The message is one line."""


# Canonical field -> raw metric name (Nsight Compute 2023-2025, sm_70 and newer).
NCU_METRICS: dict[str, str] = {
    "duration": "gpu__time_duration.sum",
    "sol_compute_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sol_memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_pct": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_bytes_per_s": "dram__bytes.sum.per_second",
    "occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "registers_per_thread": "launch__registers_per_thread",
    "tensor_pipe_pct": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
}
# Warp-stall reasons, as average warps stalled per issue cycle (the WarpStateStats section's numbers).
STALL_REASONS = (
    "long_scoreboard",
    "short_scoreboard",
    "barrier",
    "membar",
    "mio_throttle",
    "lg_throttle",
    "tex_throttle",
    "math_pipe_throttle",
    "wait",
    "not_selected",
    "no_instruction",
    "dispatch_stall",
    "branch_resolving",
    "drain",
    "sleeping",
)
_STALL_METRIC = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


# Read from `metrics` by their raw names into NcuFacts (results.py): shared memory, the grid,
# throughput by level, bank conflicts, coalescing and spills.
FACT_METRICS = {
    "shared_static": "launch__shared_mem_per_block_static",
    "shared_dynamic": "launch__shared_mem_per_block_dynamic",
    "l1_pct": "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "l2_pct": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "conflicts_ld": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "conflicts_st": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "shared_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum",
    "global_ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "global_ld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "local_ld_sectors": "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "local_st_sectors": "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
}


def default_ncu_metrics() -> list[str]:
    stalls = [stall_metric(reason) for reason in STALL_REASONS]
    return list(NCU_METRICS.values()) + list(FACT_METRICS.values()) + stalls


def ncu_facts(summary: NcuKernelSummary) -> NcuFacts:
    """The critic's record of one launch: headline metrics, throughput by level, the top stalls,
    and what points at bank conflicts, uncoalesced loads and spills (None where not measured)."""
    raw = {name: summary.metrics.get(metric) for name, metric in FACT_METRICS.items()}

    def total(*names: str) -> float | None:
        values = [value for value in (raw[name] for name in names) if value is not None]
        return sum(values) if values else None

    requests = raw["global_ld_requests"]
    levels = {"sm": summary.sol_compute_pct, "l1": raw["l1_pct"], "l2": raw["l2_pct"], "dram": summary.dram_pct}
    return NcuFacts(
        kernel=summary.kernel, duration_ms=summary.duration_ms, occupancy_pct=summary.occupancy_pct,
        registers_per_thread=summary.registers_per_thread,
        shared_bytes_per_block=total("shared_static", "shared_dynamic"),
        grid_size=summary.grid_size, block_size=summary.block_size,
        top_stalls=[[reason, value] for reason, value in summary.top_stalls()],
        throughput_pct={level: value for level, value in levels.items() if value is not None},
        dram_gb_per_s=summary.dram_gb_per_s, bank_conflicts=total("conflicts_ld", "conflicts_st"),
        shared_wavefronts=raw["shared_wavefronts"],
        sectors_per_request=raw["global_ld_sectors"] / requests if requests and raw["global_ld_sectors"] is not None
        else None,
        local_spill_requests=total("local_ld_sectors", "local_st_sectors"))


# The same quantities under their display names, as `--page details` prints them for sections.
# Percent fields apply only when the unit is '%' (e.g. 'Memory Throughput' is also a GB/s row).
_DISPLAY_NAMES: dict[str, str] = {
    "Duration": "duration",
    "Compute (SM) Throughput": "sol_compute_pct",
    "Memory Throughput": "sol_memory_pct",
    "DRAM Throughput": "dram_pct",
    "Achieved Occupancy": "occupancy_pct",
    "Registers Per Thread": "registers_per_thread",
}
_RAW_TO_FIELD = {metric: name for name, metric in NCU_METRICS.items()}
_PERCENT_FIELDS = {name for name in NCU_METRICS if name.endswith("_pct")}

# ncu's units: SI prefixes (1000-based) on second, byte, and their ratios.
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_TIME_TO_S = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3}
_TIME_TO_S |= {"second": 1.0, "s": 1.0}
_PER_SECOND = re.compile(r"^([kKMGTP]?)(byte|B)/(second|s)$")
_BYTES = re.compile(r"^([kKMGTP]?)(byte|B)$")


@dataclass
class NcuKernelSummary(Record):
    """The compact metric set of one profiled kernel launch."""

    id: int  # ncu's launch ID in the report
    kernel: str
    block_size: str = ""
    grid_size: str = ""
    device: str = ""
    duration_ms: float | None = None
    sol_compute_pct: float | None = None  # SM throughput, % of peak (speed of light)
    sol_memory_pct: float | None = None  # memory throughput, % of peak (speed of light)
    dram_pct: float | None = None
    dram_gb_per_s: float | None = None
    occupancy_pct: float | None = None  # achieved occupancy: active warps, % of max
    registers_per_thread: int | None = None
    tensor_pipe_pct: float | None = None  # tensor pipe busy cycles, % of peak
    stalls: dict[str, float] = field(default_factory=dict)  # reason -> warps stalled per issue cycle
    metrics: dict[str, float | None] = field(default_factory=dict)  # every numeric metric read, in s and bytes

    def top_stalls(self, n: int = TOP_STALLS) -> list[tuple[str, float]]:
        return sorted(self.stalls.items(), key=lambda item: (-item[1], item[0]))[:n]

    def brief(self) -> dict[str, Any]:
        """JSON-ready: the kernel, every headline metric that was read, and the top stalls."""
        entry: dict[str, Any] = {"kernel": self.kernel}
        for name in _BRIEF_FIELDS:
            value = getattr(self, name)
            if value is not None:
                entry[name] = value
        if self.stalls:
            entry["top_stalls"] = [[reason, value] for reason, value in self.top_stalls()]
        return entry


@dataclass
class NcuReport(Record):
    """What one ncu run produced: kernels, and notes on anything that went wrong."""

    kernels: list[NcuKernelSummary] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    _record_lists: ClassVar[dict[str, type[Record]]] = {"kernels": NcuKernelSummary}


def parse_number(text: str) -> float | None:
    """A metric value as ncu prints it: '1,234.5' -> 1234.5; 'n/a', '', non-numbers -> None."""
    cleaned = text.strip().replace(",", "")
    if not cleaned or cleaned.lower() in {"n/a", "na", "nan", "-"}:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def to_base_unit(value: float, unit: str) -> float:
    """Scale a value to seconds, bytes or bytes/second when its unit has a prefix; others unchanged."""
    unit = unit.strip()
    if unit in _TIME_TO_S:
        return value * _TIME_TO_S[unit]
    for pattern in (_PER_SECOND, _BYTES):
        match = pattern.match(unit)
        if match:
            return value * _PREFIX[match.group(1)]
    return value


_ERROR_LINE = re.compile(r"^==ERROR==\s*(.*)$", re.MULTILINE)


def ncu_notes(text: str) -> list[str]:
    """One-line notes for ncu's errors and empty runs found in its output."""
    notes = []
    if "ERR_NVGPUCTRPERM" in text:
        notes.append(
            "ncu: no permission for GPU performance counters (ERR_NVGPUCTRPERM); run it as root or set "
            "NVreg_RestrictProfilingToAdminUsers=0 on the host. Event timing and torch.profiler are unaffected."
        )
    for message in _ERROR_LINE.findall(text):
        if "ERR_NVGPUCTRPERM" not in message:
            notes.append(f"ncu error: {message.strip()}")
    if "No kernels were profiled" in text:
        notes.append("ncu: no kernels were profiled (check the kernel regex and that the program launched any)")
    return notes


def _csv_rows(text: str) -> list[tuple[int, list[str]]]:
    """(line number, fields) of the CSV lines; ncu's ==PROF== lines and program output are skipped."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.startswith('"')]
    return [(n, next(csv.reader([line]))) for n, line in lines]


def _assign(summary: NcuKernelSummary, target: str, value: float, unit: str) -> None:
    if target == "duration":
        # gpu__time_duration without a unit is nanoseconds (its base unit)
        seconds = to_base_unit(value, unit) if unit.strip() else value * _TIME_TO_S["ns"]
        summary.duration_ms = seconds * 1e3
    elif target == "dram_bytes_per_s":
        summary.dram_gb_per_s = to_base_unit(value, unit) / 1e9
    elif target == "registers_per_thread":
        summary.registers_per_thread = int(value)
    else:
        setattr(summary, target, value)


def _apply_metric(summary: NcuKernelSummary, metric: str, unit: str, raw_value: str) -> None:
    value = parse_number(raw_value)
    summary.metrics[metric] = None if value is None else to_base_unit(value, unit)
    if value is None:
        return
    stall = _STALL_METRIC.match(metric)
    if stall:
        summary.stalls[stall.group(1)] = value
        return
    target = _RAW_TO_FIELD.get(metric) or _DISPLAY_NAMES.get(metric)
    if target is None or (target in _PERCENT_FIELDS and metric in _DISPLAY_NAMES and unit.strip() != "%"):
        return
    _assign(summary, target, value, unit)


def _launch(fields: dict[str, str], line: int) -> NcuKernelSummary:
    try:
        launch_id = int(fields["ID"].replace(",", ""))
    except ValueError:
        raise NcuError(f"ncu CSV line {line}: launch ID {fields['ID']!r} is not a number") from None
    return NcuKernelSummary(
        id=launch_id,
        kernel=fields.get("Kernel Name", ""),
        block_size=fields.get("Block Size", ""),
        grid_size=fields.get("Grid Size", ""),
        device=fields.get("Device", ""),
    )


def parse_ncu_csv(text: str) -> list[NcuKernelSummary]:
    """Kernel summaries from ncu's CSV, one per launch in report order; [] when there is no table.

    Both layouts: `--page raw` (one row per launch, a metric per column, a units row under the
    header) and `--page details` (one row per metric with Section/Metric Name/Unit/Value).
    Text before the header (==PROF== lines, program output) is skipped; values like '1,234.5'
    and 'n/a' are handled. A row with the wrong number of fields is a NcuError.
    """
    rows = _csv_rows(text)
    header_at = next((i for i, (_, f) in enumerate(rows) if "ID" in f and "Kernel Name" in f), None)
    if header_at is None:
        return []
    header = rows[header_at][1]
    long_layout = "Metric Name" in header and "Metric Value" in header
    units: dict[str, str] = {}
    launches: dict[int, NcuKernelSummary] = {}
    for line, fields in rows[header_at + 1 :]:
        if len(fields) != len(header):
            raise NcuError(f"ncu CSV line {line}: {len(fields)} fields, header has {len(header)}")
        named = dict(zip(header, fields, strict=True))
        if not named["ID"].strip():
            units = named  # the units row of the raw page: empty ID
            continue
        summary = _launch(named, line)
        summary = launches.setdefault(summary.id, summary)
        if long_layout:
            if named["Metric Name"].strip():
                _apply_metric(summary, named["Metric Name"], named.get("Metric Unit", ""), named["Metric Value"])
            continue
        for column in header[header.index("Kernel Name") + 1 :]:
            if column in {"Context", "Stream", "Block Size", "Grid Size", "Device", "CC"}:
                continue
            _apply_metric(summary, column, units.get(column, ""), named[column])
    return list(launches.values())


def read_ncu_output(text: str) -> NcuReport:
    """Everything one ncu run printed (or its --log-file) -> kernels and notes. Never raises on ncu errors."""
    notes = ncu_notes(text)
    try:
        kernels = parse_ncu_csv(text)
    except NcuError as exc:
        return NcuReport(kernels=[], notes=notes + [f"ncu output unreadable: {exc}"])
    if not kernels and not notes:
        notes.append("ncu printed no CSV table")
    return NcuReport(kernels=kernels, notes=notes)


def ncu_command(
    python_argv: Sequence[str],
    out_csv: str | Path,
    kernel_regex: str | None = None,
    *,
    metrics: Sequence[str] | None = None,
    launch_skip: int = 0,
    launch_count: int | None = None,
    ncu: str = "ncu",
) -> list[str]:
    """argv for ncu profiling `python_argv`, its CSV (raw page, base units) written to `out_csv`.

    `--clock-control none` always: ncu would otherwise lock the clocks to base, changing the
    card's settings and disagreeing with the event timings. `kernel_regex` limits profiling
    to matching kernel names (ncu's `regex:` syntax). Every launch is replayed once per pass
    (~20-40 passes for the default set): keep the program short or set `launch_count`.
    """
    if not python_argv:
        raise NcuError("python_argv is empty: nothing for ncu to run")
    if launch_skip < 0 or (launch_count is not None and launch_count < 1):
        raise NcuError(f"need launch_skip >= 0 and launch_count >= 1, got {launch_skip} and {launch_count}")
    chosen = list(metrics) if metrics is not None else default_ncu_metrics()
    if not chosen:
        raise NcuError("no metrics to collect")
    argv = [ncu, "--clock-control", "none", "--target-processes", "all", "--metrics", ",".join(chosen)]
    argv += ["--csv", "--page", "raw", "--print-units", "base", "--log-file", str(out_csv)]
    if kernel_regex:
        argv += ["--kernel-name", f"regex:{kernel_regex}"]
    if launch_skip:
        argv += ["--launch-skip", str(launch_skip)]
    if launch_count is not None:
        argv += ["--launch-count", str(launch_count)]
    return argv + list(python_argv)


NCU_SEARCH_GLOBS = (
    "/usr/local/cuda/bin/ncu",
    "/opt/nvidia/nsight-compute/*/ncu",
    "/usr/local/NVIDIA-Nsight-Compute*/ncu",
)
NVIDIA_PARAMS = Path("/proc/driver/nvidia/params")  # the loaded driver's module options


def find_ncu() -> str | None:
    """Path of the ncu binary: PATH first, then the usual install locations (newest last wins)."""
    found = shutil.which("ncu")
    if found:
        return found
    candidates = sorted(path for pattern in NCU_SEARCH_GLOBS for path in glob.glob(pattern))
    return candidates[-1] if candidates else None


def _profiling_restricted() -> bool:
    """True when the driver limits counters to admins and we are not root."""
    try:
        params = NVIDIA_PARAMS.read_text()
    except OSError:
        return False  # no driver info to go on: let a run tell (ncu_notes)
    restricted = re.search(r"RmProfilingAdminOnly:\s*1", params) is not None
    return restricted and os.geteuid() != 0


def ncu_available(ncu_output: str | None = None) -> tuple[bool, str]:
    """(usable, note): is ncu installed, and can it read the counters?

    Pass the output of an earlier ncu run to check it for ERR_NVGPUCTRPERM; without it the
    driver's RmProfilingAdminOnly option is read (restricted to admins and not root: not usable).
    """
    path = find_ncu()
    if path is None:
        return False, "ncu not found on PATH or under /usr/local/cuda/bin, /opt/nvidia/nsight-compute"
    if ncu_output is not None and "ERR_NVGPUCTRPERM" in ncu_output:
        return False, f"{path}: " + ncu_notes(ncu_output)[0]
    if _profiling_restricted():
        return False, f"{path}: the driver restricts GPU performance counters to admin users (RmProfilingAdminOnly=1)"
    return True, f"ncu at {path}"
