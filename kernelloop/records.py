"""Typed results shared by the verifier, the agents, the graph and the evals.

Units are in the names: every time is milliseconds (`*_ms`) or seconds (`*_s`).
Nothing here rounds; rounding is for display only.

These are stdlib dataclasses, not pydantic models, because the verifier must import on a bare
GPU node that has only torch, triton and nvidia-ml-py (docs/architecture.md). `Record` gives them the
pydantic method names (model_dump, model_dump_json, model_validate, model_copy) so callers
read the same whichever kind of type they hold; the agent, graph and eval layers embed them
in pydantic models as plain fields.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Self

from kernelloop import safe_text


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

    _records: ClassVar[dict[str, type[Record]]] = {}
    _record_maps: ClassVar[dict[str, type[Record]]] = {}
    _record_lists: ClassVar[dict[str, type[Record]]] = {}

    if TYPE_CHECKING:
        # Every subclass is a @dataclass; declaring the field table here (for the type checker
        # only, so is_dataclass(Record) stays False at run time) lets dataclasses.fields and
        # dataclasses.replace accept `cls` and `self`.
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def model_dump(self) -> dict[str, Any]:
        return _plain(self)

    def model_dump_json(self, indent: int | None = None) -> str:
        return json.dumps(self.model_dump(), indent=indent)

    @classmethod
    def model_validate(cls, data: Any) -> Self:
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
    def model_validate_json(cls, text: str) -> Self:
        return cls.model_validate(json.loads(text))

    def model_copy(self, update: dict[str, Any] | None = None) -> Self:
        return dataclasses.replace(self, **(update or {}))

class Status(str, Enum):
    """The verdict of one candidate. Exactly one of these, as docs/architecture.md fixes them."""

    correct = "correct"
    incorrect = "incorrect"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    rejected = "rejected"


class Code(str, Enum):
    """Why a verdict is what it is, beside the one-line `reason`: callers (the critic, bench,
    routing, the CLI) branch on this, never on words in the reason. `unknown`: a verdict written
    before codes existed."""

    unknown = "unknown"
    correct = "correct"
    # compile_error
    syntax = "syntax"
    cut_off = "cut_off"  # the model's reply ended inside the code
    no_modelnew = "no_modelnew"
    modelnew_failed = "modelnew_failed"  # ModelNew(*get_init_inputs()) raised
    import_failed = "import_failed"
    compile_failed = "compile_failed"  # Triton (or load_inline) could not compile a kernel
    # runtime_error
    out_of_memory = "out_of_memory"
    crashed = "crashed"  # killed by a signal (an illegal memory access, most often)
    worker_died = "worker_died"  # the sandbox worker itself died while the job ran
    exited = "exited"  # sys.exit / os._exit before reporting
    raised = "raised"
    problem_error = "problem_error"  # the problem's reference failed, not the candidate
    output_flood = "output_flood"  # printed more than a job may (tools/verify/output_watch.py)
    # timeout
    timed_out = "timed_out"
    # incorrect
    wrong_type = "wrong_type"  # shape, dtype, layout, output count or a tensor subclass
    nonfinite = "nonfinite"  # NaN/inf where the reference has none (or the other way round)
    mismatch = "mismatch"  # elements outside atol/rtol, or the norm-relative error too large
    off_on_most = "off_on_most"  # the norm passes but most elements are off on their own scale
    biased = "biased"  # a one-sided (scale or offset) error
    stale_on_fresh_inputs = "stale_on_fresh_inputs"  # right on the trials, wrong on fresh values after timing
    wrong_on_extra_sets = "wrong_on_extra_sets"  # under the reference's roofline and wrong on the extra sets
    wrong_on_timed_call = "wrong_on_timed_call"  # a timed call picked at random is wrong on its fresh values
    wrong_gradient = "wrong_gradient"  # BACKWARD problems: a gradient of an input or parameter is wrong
    no_gradient = "no_gradient"  # BACKWARD problems: no gradient where the reference has one (autograd broken)
    # rejected
    forbidden_import = "forbidden_import"
    forbidden_call = "forbidden_call"
    try_except = "try_except"
    reference_model = "reference_model"
    monkeypatch = "monkeypatch"
    stream_or_thread = "stream_or_thread"
    no_own_kernel = "no_own_kernel"
    leaves_work_to_torch = "leaves_work_to_torch"
    library_ops_strict = "library_ops_strict"
    not_isolated = "not_isolated"  # --strict, and the job could not be contained (the sandbox's fault, not the candidate's)
    claims_unverified = "claims_unverified"  # --strict-claims, and only the candidate's process says its kernels did the work
    writes_to_inputs = "writes_to_inputs"
    aliases_input = "aliases_input"
    changes_precision = "changes_precision"  # its forward switched torch's float32 precision (TF32) during a checked run
    decoy_kernel = "decoy_kernel"
    faster_than_possible = "faster_than_possible"
    timing_contradicted = "timing_contradicted"
    unreadable_outputs = "unreadable_outputs"
    tampered_job_dir = "tampered_job_dir"
    judging_failed = "judging_failed"


_CODES_BY_STATUS = {
    Status.correct: ("correct",),
    Status.compile_error: ("syntax", "cut_off", "no_modelnew", "modelnew_failed", "import_failed", "compile_failed"),
    Status.runtime_error: ("out_of_memory", "crashed", "worker_died", "exited", "raised", "problem_error",
                           "output_flood"),
    Status.timeout: ("timed_out",),
    Status.incorrect: ("wrong_type", "nonfinite", "mismatch", "off_on_most", "biased", "stale_on_fresh_inputs",
                       "wrong_on_extra_sets", "wrong_on_timed_call", "wrong_gradient", "no_gradient"),
}
# Every code belongs to one status; `unknown` to none (it goes with any).
STATUS_OF: dict[Code, Status] = {Code(name): status for status, names in _CODES_BY_STATUS.items() for name in names}
STATUS_OF.update({code: Status.rejected for code in Code if code not in STATUS_OF and code is not Code.unknown})


def code_of(value: object) -> Code:
    """A code from its value; anything unknown (a newer or forged code) reads as `unknown`."""
    try:
        return Code(value)
    except ValueError:
        return Code.unknown


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
    # the candidate's: its window's work besides the forward (the window's sets written, its outputs
    # kept, the digests, the request's round trip), per call, timed alone in the trusted job and
    # already taken off host_ms_per_call
    overhead_ms_per_call: float | None = None
    host_spread: float | None = None  # relative half-range of the per-window back-to-back times
    counted_ms: float | None = None  # the time its speed counts (tools/verify/speed.py, counted_ms)
    clock: str = ""  # which clock gave counted_ms: "events" or "parent clock"
    replayed: bool = False  # its back-to-back windows replayed one CUDA graph of the calls (no host work between them)
    window_calls: int | None = None  # calls in one of its back-to-back windows
    # whether its windows hold enough of its claimed work for the parent's clock to bound the claim
    # (speed.CONFIRMING_WORK times the clock's resolution): None where no window was timed
    confirmed: bool | None = None
    # replayed windows, timed step by step: the fastest "fill" (its sets written), "run" (the graph's
    # calls) and "keep" (outputs kept, digested) in ms, and "excess": what its fill and keep took past
    # the trusted job's same steps, added to its window's time (timing_driver.Windows.excess_ms)
    window_steps_ms: dict[str, float] = field(default_factory=dict)
    remeasured: bool = False  # its first rounds' events were over what its replayed windows allow, so measured again


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
    host_windows_ms: dict[str, list[float]] = field(default_factory=dict)  # per side, each window's per-call time
    replayed: list[str] = field(default_factory=list)  # sides whose windows replayed one CUDA graph (window_graph.py)
    window_calls: dict[str, int] = field(default_factory=dict)  # per side, the calls in one window
    clock_resolution_ms: float | None = None  # of a window, what the parent's clock can't attribute to its calls
    back_to_back_calls: int = 0
    # the candidate's per-call work besides its forward (the window's sets written, its output kept,
    # the digests), timed the same way in the trusted job and taken off its back-to-back time
    fresh_overhead_ms_per_call: float | None = None
    window_steps_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # per side: TimingStats.window_steps_ms
    fresh_values: bool | None = None  # the trusted job: timed calls got values never seen (False: no float input)
    checked_rounds: list[int] = field(default_factory=list)  # rounds whose candidate output the parent checked
    # sides whose events were over what their replayed windows allow (timing_driver.Windows.contradicted),
    # for which every side's rounds were measured once more: the samples are the second measurement's
    rounds_remeasured: list[str] = field(default_factory=list)
    events_contradicted: list[str] = field(default_factory=list)  # of those, still over it when measured again
    parent_block_ms: list[float] = field(default_factory=list)  # the parent's clock around each block of rounds
    claimed_block_ms: list[float] = field(default_factory=list)  # device time the candidate claims in each block
    compile_s: dict[str, float] = field(default_factory=dict)  # baselines' compile times (trusted job)
    kernels: list[dict[str, Any]] = field(default_factory=list)  # the candidate's profile: claims
    kernel_split: dict[str, Any] = field(default_factory=dict)  # own vs library device time: claims
    launches: list[dict[str, Any]] = field(default_factory=list)  # own Triton kernels' grid, warps, registers: claims
    roofline: dict[str, Any] = field(default_factory=dict)  # FLOPs, bytes and floors (trusted job)
    gpu: GpuState | None = None  # NVML, read by the parent
    device_name: str | None = None
    phase_s: dict[str, float] = field(default_factory=dict)  # where timing's wall time went

    _records: ClassVar[dict[str, type[Record]]] = {"gpu": GpuState}


@dataclass
class Element(Record):
    """One output element: its index (per dimension) and both values."""

    index: list[int]
    got: float
    expected: float


@dataclass
class InputSet(Record):
    """How one input set fared: its output's shape and whether it passed."""

    trial: int  # 1-based, in the order the sets ran
    shape: list[int]
    ok: bool
    code: Code = Code.correct

    def __post_init__(self) -> None:
        self.code = code_of(self.code)


@dataclass
class Localisation(Record):
    """Where a wrong output is wrong, computed by the parent from the outputs (tools/verify/localise.py).
    Rows are the output viewed as (everything but the last dimension, the last dimension)."""

    output: int = 0  # which output of the forward (of the gradients, where `gradient` names one)
    gradient: str = ""  # BACKWARD problems: the wrong gradient ("input 0", "fc.weight"); "" for a forward output
    trial: int = 0  # the first input set it failed on, 1-based
    shape: list[int] = field(default_factory=list)
    numel: int = 0
    bad: int = 0  # elements out of tolerance, non-finite mismatches among them
    nonfinite: int = 0  # NaN/inf where the reference has a finite value (or another kind)
    nonfinite_kind: str = ""  # "NaN", "inf" or "NaN and inf"
    first_nonfinite: list[int] | None = None
    rows_bad: int = 0
    rows: int = 0
    bad_rows: str = ""  # ranges, e.g. "1-127"
    whole_rows: bool = False  # every element of every bad row is bad
    first_row_only_right: bool = False  # row 0 right, every other row wrong: a row stride or offset
    columns_bad: int = 0
    columns: int = 0
    bad_columns: str = ""
    tail_from: int | None = None  # flat index from which every element is bad, and none before
    period: int | None = None  # every bad flat index is offset (mod period)
    offset: int | None = None
    block: int | None = None  # bad elements only at these positions within blocks of this size
    block_positions: list[int] = field(default_factory=list)
    blocks_bad: int = 0  # of the blocks of `block_size`, how many hold a bad element
    block_size: int = 0
    blocks: int = 0
    worst: list[Element] = field(default_factory=list)  # largest finite errors, worst first
    median_rel_err: float | None = None  # over the bad finite elements with a nonzero reference
    sets: list[InputSet] = field(default_factory=list)  # every trial set, passed or not
    irregular_only: bool = False  # failed only on sets whose shapes are not multiples of 16
    notes: list[str] = field(default_factory=list)
    # From two reruns of the failed set with poisons the parent chose (tools/verify/written.py); 0 reruns: unknown.
    reruns: int = 0
    unwritten: int = 0  # elements holding each rerun's poison: never written
    unwritten_kind: str = ""  # "rows", "row_tail", "columns", "tail", "blocks", "scattered" or "all"
    unwritten_region: str = ""  # the region, in words
    nonfinite_written: int = 0  # written elements that are NaN/inf where the reference is finite
    init_dependent: int = 0  # written elements that moved with the poison: the output was read before written
    varies: int = 0  # written elements that differ between the reruns otherwise (program order, a race)
    relation_kind: str = ""  # "transpose", "row_shift", "block_shift", "row_factor", "constant_factor", ...
    relation: str = ""  # how the written-but-wrong part relates to the reference, in words

    _record_lists: ClassVar[dict[str, type[Record]]] = {"worst": Element, "sets": InputSet}


@dataclass
class KernelShare(Record):
    """One kernel of the candidate's profile (its claim) and its share of device time."""

    name: str
    kind: str  # "own", "library:<category>" or "other"
    calls: int
    mean_ms: float
    share: float  # of the profiled device time, 0-1


@dataclass
class LaunchFacts(Record):
    """What the Triton compiler said about one own kernel as launched (the candidate's claim, GPU only)."""

    kernel: str
    grid: list[int] = field(default_factory=list)
    num_warps: int | None = None
    registers: int | None = None  # per thread
    spills: int | None = None  # registers spilled to local memory, per thread
    shared_bytes: int | None = None  # per program


@dataclass
class RooflineFacts(Record):
    """Where the candidate's time sits against this GPU's datasheet peaks (the reference's FLOPs and bytes)."""

    peaks: str
    peak_key: str
    flops: float
    bytes: float
    floor_ms: float
    compute_floor_ms: float
    memory_floor_ms: float
    bound: str  # "memory" or "compute": which floor is higher
    measured_ms: float
    percent_of_limit: float  # 100 * floor / measured
    achieved_gb_per_s: float
    bandwidth_pct: float  # of the datasheet bandwidth
    achieved_tflops: float
    flops_pct: float  # of the datasheet peak for peak_key
    sm_count: int | None = None


@dataclass
class HostDevice(Record):
    """Where a call's wall time goes: device work (the profiler's, all streams) against the
    parent's clock around back-to-back calls."""

    event_ms: float  # the candidate's event median (a claim)
    device_ms_per_call: float | None = None  # the profiler's device time per call (a claim)
    host_ms_per_call: float | None = None  # the parent's clock
    host_share: float | None = None  # 1 - device / host: the part of a call the device is idle
    speed_source: str = ""


@dataclass
class NcuFacts(Record):
    """Nsight Compute's view of one own kernel launch."""

    kernel: str
    duration_ms: float | None = None
    occupancy_pct: float | None = None
    registers_per_thread: int | None = None
    shared_bytes_per_block: float | None = None
    grid_size: str = ""
    block_size: str = ""
    top_stalls: list[list] = field(default_factory=list)  # [[reason, warps stalled per issue], ...]
    throughput_pct: dict[str, float] = field(default_factory=dict)  # by level: "l1", "l2", "dram", "sm"
    dram_gb_per_s: float | None = None
    bank_conflicts: float | None = None  # shared-memory bank conflicts, loads and stores
    shared_wavefronts: float | None = None  # shared-memory wavefronts (ideal: one per request)
    sectors_per_request: float | None = None  # global loads: 4 is coalesced 32-bit, 32 is one sector per thread
    local_spill_requests: float | None = None  # local-memory (spill) loads and stores


@dataclass
class Profile(Record):
    """What the critic reads about a correct candidate's device time: built by the parent from the
    Measurement (tools/profile/profiler.py: profile_of) and, where it ran, Nsight Compute. The
    kernel table, launches and shares are the candidate's claims; the roofline, the parent's clock
    and NVML are not. Verdict.profile holds it (its model_dump() in a stored verdict)."""

    kernels: list[KernelShare] = field(default_factory=list)
    own_share: float = 0.0
    library_share: float = 0.0
    other_share: float = 0.0
    library_kernels: list[str] = field(default_factory=list)
    device_ms_total: float = 0.0  # profiled device time, all calls
    roofline: RooflineFacts | None = None
    host_device: HostDevice | None = None
    gpu: GpuState | None = None
    launches: list[LaunchFacts] = field(default_factory=list)
    ncu: list[NcuFacts] = field(default_factory=list)
    ncu_note: str = ""  # why there is no Nsight Compute data, when there is none
    profiling_s: float = 0.0  # wall time Nsight Compute took for this candidate
    device_name: str | None = None
    notes: list[str] = field(default_factory=list)

    _records: ClassVar[dict[str, type[Record]]] = {"roofline": RooflineFacts, "host_device": HostDevice, "gpu": GpuState}
    _record_lists: ClassVar[dict[str, type[Record]]] = {"kernels": KernelShare, "launches": LaunchFacts, "ncu": NcuFacts}

    @classmethod
    def of(cls, verdict_profile: dict[str, Any] | None) -> Profile | None:
        """A verdict's profile as the record; None for none, or one in the format before this record."""
        if not verdict_profile:
            return None
        try:
            return cls.model_validate(verdict_profile)
        except (TypeError, ValueError):
            return None


@dataclass
class WorkloadResult(Record):
    """One workload of a problem with get_workloads, as its verification judged it
    (tools/verify/workloads.py): whether it was right on that workload's sets and, where timed, its
    speed there. Times are the counted ms per call of each side (the candidate's and each baseline's)."""

    name: str
    status: Status = Status.correct  # correct on its sets, or incorrect (the verdict's reason names it)
    trials: int = 0  # its input sets compared
    reason: str = ""  # where it is wrong, one line
    speedup: float | None = None  # over eager on this workload (GPU)
    speedups: dict[str, float] = field(default_factory=dict)  # over each baseline timed on it
    times_ms: dict[str, float] = field(default_factory=dict)  # per side: "candidate", "eager", ...
    noise_floor: float | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.reason = safe_text.one_line(self.reason)


@dataclass
class Verdict(Record):
    """What the verifier says about one candidate against one problem."""

    status: Status
    reason: str  # one line a person can act on
    code: Code = Code.unknown  # the reason as a code: branch on this, never on the reason's words
    device: str = "cpu"
    max_abs_err: float | None = None
    rel_err: float | None = None  # ||out-ref|| / ||ref||, worst over trials and outputs
    trials: int = 0  # input sets checked (fresh-seed trials, extra shapes, the post-timing set)
    timings: dict[str, TimingStats] = field(default_factory=dict)
    speedup: float | None = None  # over eager: median of per-round ratios (with workloads: their geometric mean)
    speedups: dict[str, float] = field(default_factory=dict)  # over each baseline that was timed
    noise_floor: float | None = None  # relative spread of timing the same kernel twice in the same rounds
    win: bool | None = None  # speedup over eager above 1 + noise_floor
    suspicious: list[str] = field(default_factory=list)  # signs the result is too good to be true
    library_ops: list[str] = field(default_factory=list)  # reference compute ops the candidate still runs in torch
    own_kernels: list[str] = field(default_factory=list)  # kernels of the candidate's own that ran
    # What bears out that its own kernels did the work (a correct verdict): "in-process claim" (its own
    # process reported the launches and ops, and ran the decoy check) or "parent-timed win" (faster than
    # eager by the parent's timing, which torch doing the work beside a decoy can't be)
    own_kernel_evidence: str = ""
    warnings: list[str] = field(default_factory=list)
    feedback: str = ""  # text for the coder: what went wrong and where
    stdout_tail: str = ""
    stderr_tail: str = ""
    gpu: GpuState | None = None
    profile: Profile | None = None  # the critic's view of a correct candidate's device time (GPU)
    localisation: Localisation | None = None  # where an incorrect output is wrong
    cost_s: dict[str, float] = field(default_factory=dict)  # where the verifier's wall time went
    isolation: str = ""  # the sandbox that judged: "bubblewrap" or "plain" (as far as a plain process allows)
    # What held for the candidate's job, measured from outside it (sandbox/confine.py): `isolated`,
    # and where not, `why`; the job's uid on the host, capabilities, seccomp, its own namespaces.
    containment: dict[str, Any] = field(default_factory=dict)
    speed_source: str = ""  # one line: which clock (events or the parent's) decided each side's time, and the times
    # outputs whose reference is zero or its own round-off (compare.py): judged by the absolute tolerance
    # only, so a kernel of zeros is as right; such a verdict is never a win
    degenerate_outputs: list[int] = field(default_factory=list)
    # The tolerance that decided (compare.tolerance_words): ours, per dtype; "" where no output was
    # compared. A mismatch another standard passes names it in the reason and here (compare.OTHER_STANDARDS).
    tolerance: str = ""
    tolerance_would_pass: list[str] = field(default_factory=list)
    # A problem with get_workloads: each workload by name, in the problem's order ({} for a problem
    # without: KernelBench's one workload). Timed, `speedup` is then the geometric mean of theirs
    # over eager, and `slowest_workload` the one with the lowest.
    workloads: dict[str, WorkloadResult] = field(default_factory=dict)
    slowest_workload: str = ""

    _records: ClassVar[dict[str, type[Record]]] = {"gpu": GpuState, "localisation": Localisation}
    _record_maps: ClassVar[dict[str, type[Record]]] = {"timings": TimingStats, "workloads": WorkloadResult}

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.code = code_of(self.code)
        if isinstance(self.profile, dict):  # read back from a record: None for one in the format before Profile
            self.profile = Profile.of(self.profile)

    def __setattr__(self, name: str, value: Any) -> None:
        # Its text is the candidate's as often as not (an exception's message, what it printed):
        # kept bounded and free of control characters however it is set, read back or assigned.
        object.__setattr__(self, name, _kept_text(name, value))

    @property
    def ok(self) -> bool:
        return self.status is Status.correct

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """In the agents' pydantic models: a stored profile in the format before Profile reads as None,
        as it does through model_validate (only pydantic calls this, so only it imports pydantic_core)."""
        from pydantic_core import core_schema

        return core_schema.no_info_before_validator_function(_readable_profile, handler(source))


def _readable_profile(data: Any) -> Any:
    if isinstance(data, dict) and isinstance(data.get("profile"), dict) and Profile.of(data["profile"]) is None:
        return {**data, "profile": None}
    return data


def _kept_text(name: str, value: Any) -> Any:
    if name == "reason":
        return safe_text.one_line(value)
    if name == "feedback":
        return safe_text.clean(value)
    if name in ("stdout_tail", "stderr_tail"):
        return safe_text.clean(value, safe_text.TAIL_CHARS, keep="tail")
    if name in ("warnings", "suspicious", "own_kernels", "library_ops"):
        return safe_text.items(value, safe_text.REASON_CHARS)
    return value


def rejected(code: Code, reason: str, feedback: str = "", **extra: Any) -> Verdict:
    """A verdict for a broken rule; the reason doubles as feedback unless one is given."""
    return Verdict(status=Status.rejected, reason=reason, code=code, feedback=feedback or reason, **extra)
