"""Typed results shared by the verifier, the agents, the graph and the evals.

Units are in the names: every time is milliseconds (`*_ms`) or seconds (`*_s`).
Nothing here rounds; rounding is for display only.

These are stdlib dataclasses, not pydantic models, because the verifier must import on a bare
GPU node that has only torch, triton and nvidia-ml-py (DESIGN.md). `Record` gives them the
pydantic method names (model_dump, model_dump_json, model_validate, model_copy) so callers
read the same whichever kind of type they hold; the agent, graph and eval layers embed them
in pydantic models as plain fields.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class Record:
    """Pydantic-style methods for dataclasses. Nested records are named in `_records`
    (a field holding one record), `_record_maps` (a field holding {key: record}) and
    `_record_lists` (a field holding [record, ...])."""

    _records: ClassVar[dict[str, type]] = {}
    _record_maps: ClassVar[dict[str, type]] = {}
    _record_lists: ClassVar[dict[str, type]] = {}

    def model_dump(self) -> dict[str, Any]:
        return _plain(self)

    def model_dump_json(self, indent: int | None = None) -> str:
        return json.dumps(self.model_dump(), indent=indent)

    @classmethod
    def model_validate(cls, data: Any):
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}: expected a dict, got {type(data).__name__}")
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown fields {', '.join(sorted(unknown))}")
        values = dict(data)
        for name, kind in cls._records.items():
            if isinstance(values.get(name), dict):
                values[name] = kind.model_validate(values[name])
        for name, kind in cls._record_maps.items():
            if isinstance(values.get(name), dict):
                values[name] = {key: kind.model_validate(item) for key, item in values[name].items()}
        for name, kind in cls._record_lists.items():
            if isinstance(values.get(name), list):
                values[name] = [kind.model_validate(item) for item in values[name]]
        return cls(**values)

    @classmethod
    def model_validate_json(cls, text: str):
        return cls.model_validate(json.loads(text))

    def model_copy(self, update: dict[str, Any] | None = None):
        return dataclasses.replace(self, **(update or {}))

class Status(str, Enum):
    """The verdict of one candidate. Exactly one of these, as DESIGN.md fixes them."""

    correct = "correct"
    incorrect = "incorrect"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    rejected = "rejected"


@dataclass
class TimingStats(Record):
    """Summary of raw per-call device times of one callable, in milliseconds."""

    name: str  # what was timed: 'candidate', 'eager', 'compile', or a problem baseline
    median_ms: float
    iqr_ms: float  # interquartile range of the samples
    min_ms: float
    mean_ms: float
    samples: int
    host_ms_per_call: float | None = None  # host wall clock per call with a device-wide synchronize


@dataclass
class GpuState(Record):
    """What NVML read around a measurement."""

    name: str = ""
    index: int = 0
    sm_clock_mhz: list[int] = field(default_factory=list)  # before and after
    temperature_c: list[int] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    throttle_reasons: list[str] = field(default_factory=list)  # active reasons seen at any reading
    throttled: bool = False
    notes: list[str] = field(default_factory=list)  # why a reading is missing (no NVML, no permission)


@dataclass
class Measurement(Record):
    """Everything the parent gathered while timing one candidate (tools/verify/timing_driver.py),
    the one record the speed verdict (tools/verify/speed.py) reads. Each field says whose word it
    is: the trusted job's (no candidate code ran there), the parent's own, or the candidate's
    claim, which counts only where the parent's observations bear it out."""

    # per callable, raw device times aligned by round: the candidate's two entries are claims,
    # the baselines' (eager, compile, a problem's own) come from the trusted job
    samples_ms: dict[str, list[float]]
    # the parent's clock around back-to-back calls in each child, ended by a device-wide synchronize
    host_ms_per_call: dict[str, float] = field(default_factory=dict)
    back_to_back_calls: int = 0
    parent_block_ms: list[float] = field(default_factory=list)  # the parent's clock around each block of rounds
    claimed_block_ms: list[float] = field(default_factory=list)  # device time the candidate claims in each block
    compile_s: dict[str, float] = field(default_factory=dict)  # baselines' compile times (trusted job)
    kernels: list[dict[str, Any]] = field(default_factory=list)  # the candidate's profile: claims
    kernel_split: dict[str, Any] = field(default_factory=dict)  # own vs library device time: claims
    roofline: dict[str, Any] = field(default_factory=dict)  # FLOPs, bytes and floors (trusted job)
    gpu: GpuState | None = None  # NVML, read by the parent
    device_name: str | None = None
    phase_s: dict[str, float] = field(default_factory=dict)  # where timing's wall time went

    _records: ClassVar[dict[str, type]] = {"gpu": GpuState}


@dataclass
class Verdict(Record):
    """What the verifier says about one candidate against one problem."""

    status: Status
    reason: str  # one line a person can act on
    device: str = "cpu"
    max_abs_err: float | None = None
    rel_err: float | None = None  # ||out-ref|| / ||ref||, worst over trials and outputs
    trials: int = 0  # input sets checked (fresh-seed trials, extra shapes, the post-timing set)
    timings: dict[str, TimingStats] = field(default_factory=dict)
    speedup: float | None = None  # over eager: median of per-round ratios
    speedups: dict[str, float] = field(default_factory=dict)  # over each baseline that was timed
    noise_floor: float | None = None  # relative spread of timing the same kernel twice in the same rounds
    win: bool | None = None  # speedup over eager above 1 + noise_floor
    suspicious: list[str] = field(default_factory=list)  # signs the result is too good to be true
    library_ops: list[str] = field(default_factory=list)  # reference compute ops the candidate still runs in torch
    own_kernels: list[str] = field(default_factory=list)  # kernels of the candidate's own that ran
    warnings: list[str] = field(default_factory=list)
    feedback: str = ""  # text for the coder: what went wrong and where
    stdout_tail: str = ""
    stderr_tail: str = ""
    gpu: GpuState | None = None
    profile: dict[str, Any] | None = None
    cost_s: dict[str, float] = field(default_factory=dict)  # where the verifier's wall time went
    isolation: str = ""  # the sandbox that judged: "bubblewrap" or "plain" (as far as a plain process allows)
    speed_source: str = ""  # where `speedup` comes from: "events (confirmed by the parent's clock)" or "parent clock"

    _records: ClassVar[dict[str, type]] = {"gpu": GpuState}
    _record_maps: ClassVar[dict[str, type]] = {"timings": TimingStats}

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def ok(self) -> bool:
        return self.status is Status.correct


def rejected(reason: str, feedback: str = "", **extra: Any) -> Verdict:
    """A verdict for a broken rule; the reason doubles as feedback unless one is given."""
    return Verdict(status=Status.rejected, reason=reason, feedback=feedback or reason, **extra)
