"""What both of the verifier's child programs need: seeding, device moves, the op recorder.

The trusted reference job (reference_job.py) and the candidate's child (harness.py) run in
different processes; this module holds only code with no say in a verdict by itself.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelloop.tools.verify import precision_lock

INIT_SEED = 42
# aten ops that move, view or allocate memory but compute nothing: they don't count as
# "the reference's compute", and a candidate may call them freely around its kernels.
NON_COMPUTE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "fill", "fill_",
    "zero_", "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "permute", "transpose",
    "t", "as_strided", "select", "slice", "unsqueeze", "squeeze", "contiguous", "clone", "copy_",
    "_to_copy", "detach", "alias", "lift_fresh", "split", "split_with_sizes", "chunk", "unbind",
    "flatten", "view_as", "arange", "randn", "rand", "normal_", "uniform_", "lift_fresh_copy",
    "_local_scalar_dense", "item", "sym_size", "sym_stride", "sym_numel", "is_contiguous",
    "unsafe_split", "narrow", "diagonal", "movedim", "unflatten", "expand_as", "resize_", "set_",
})


# Copies, the work of moving elements: not compute ops (a candidate may copy freely around its
# kernels, and --strict does not count them as library ops), but part of the reference's work all the
# same: a ShuffleNet's channel shuffle is a copy. Their elements are recorded as one op, COPY.
COPY_OPS = frozenset({"clone", "copy_", "_to_copy"})
COPY = "copy"
# Ops that make a tensor without reading one: a tensor they make and an own kernel is handed is that
# kernel's output (OpRecorder.own_launch).
ALLOCATING_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
                            "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
                            "new_full"})
# In-place ops whose first argument is only written: handing them a tensor is not consuming it.
OVERWRITING_OPS = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "set_", "resize_"})


def _tensors(value) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _storage(t: torch.Tensor) -> int:
    """Where its memory starts (0 for none: never followed)."""
    return t.untyped_storage().data_ptr() if t.device.type != "meta" else 0


class OpRecorder(TorchDispatchMode):
    """Records the aten ops a forward dispatches (names without overload): how many times each ran
    and its work, the elements of its tensor inputs (a sum's elements reduced, a scan's elements
    scanned, a matmul's operands; a copy's elements copied), on the shapes it ran on. In the
    candidate's child it also follows its own kernels' outputs (own_launch): tensors made in the
    forward and handed to one of its kernels, and how many of their elements the forward then
    consumed or returned (own_used)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.work: Counter[str] = Counter()
        self._made: dict[int, int] = {}  # storage -> elements, of tensors an allocating op made in the forward
        self._own: dict[int, int] = {}  # those handed to an own kernel: its outputs
        self._used: set[int] = set()
        self.own_used = 0  # elements of own kernels' outputs that a torch op read or the forward returned
        # Inside a launch in Triton's CPU interpreter, which moves each argument to a host copy and
        # back through aten: those copies are its plumbing, neither torch's work nor a use of an output.
        self.interpreting = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if self.interpreting and (name in NON_COMPUTE_OPS or name.rstrip("_") in NON_COMPUTE_OPS):
            return func(*args, **(kwargs or {}))
        self.ops[name] += 1
        read = list(_tensors(args[1:] if name in OVERWRITING_OPS else args)) + list(_tensors(kwargs or {}))
        if name in COPY_OPS:  # the elements copied: the source's (copy_'s second argument)
            self.work[COPY] += sum(t.numel() for t in read[:1])
        else:
            self.work[name] += sum(t.numel() for t in read)
        if self._own and not self.interpreting:
            self.consumed(read)
        out = func(*args, **(kwargs or {}))
        if name in ALLOCATING_OPS:
            for t in _tensors(out):
                if _storage(t):
                    self._made[_storage(t)] = t.numel()
        return out

    def own_launch(self, values) -> None:
        """An own kernel (Triton, or an extension function) was handed `values`: the tensors among
        them that the forward made are its outputs."""
        for t in _tensors(list(values)):
            storage = _storage(t)
            if storage in self._made:
                self._own[storage] = max(self._own.get(storage, 0), t.numel())

    def own_result(self, values) -> None:
        """What an extension function returned: its output, wherever it was made."""
        for t in _tensors(values):
            if _storage(t):
                self._own[_storage(t)] = max(self._own.get(_storage(t), 0), t.numel())

    def consumed(self, values) -> None:
        """`values` were read by a torch op or returned: own outputs among them count as used."""
        for t in _tensors(list(values)):
            storage = _storage(t)
            if storage in self._own and storage not in self._used:
                self._used.add(storage)
                self.own_used += self._own[storage]

    def compute_ops(self) -> dict[str, int]:
        """Each compute op with how many times it ran (a count, not only a name: a candidate that
        replaces 8 of 28 `add_` calls still runs `add_`, and has done part of the work itself)."""
        return {op: self.ops[op] for op in sorted(self.ops)
                if op.rstrip("_") not in NON_COMPUTE_OPS and op not in NON_COMPUTE_OPS}

    def compute_work(self) -> dict[str, int]:
        """Each compute op's work (elements of its tensor inputs, over every call), and the copies'
        elements as COPY: what torch did of the forward, op by op."""
        work = {op: self.work[op] for op in self.compute_ops()}
        if self.work[COPY]:
            work[COPY] = self.work[COPY]
        return work


# The nodes of torch's float32 precision settings (torch.backends.<node>.fp32_precision), each parent
# before its children: setting a parent sets the nodes under it, so a state is written in this order.
# Read through this API alone: the legacy getters (allow_tf32, get_float32_matmul_precision) raise
# once anyone has mixed the two APIs, and a legacy setter leaves a node the new API set as it was
# (cuDNN's conv stayed TF32 after `cudnn.allow_tf32 = False` where a parent had been set to tf32).
PRECISION_NODES = ("", "cuda", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn", "mkldnn.matmul",
                   "mkldnn.conv", "mkldnn.rnn")
# What both sides of a comparison compute float32 in: IEEE float32 for cuBLAS, cuDNN and oneDNN (no
# TF32, no bf16). Spelled as the legacy setters leave it ("none": inherited from a parent that is
# "none", IEEE), so code that reads the legacy flags (allow_tf32 False, matmul precision "highest")
# reads them without an error.
DECLARED_PRECISION = {"": "none", "cuda.matmul": "ieee", "cudnn": "none", "cudnn.conv": "none", "cudnn.rnn": "none",
                      "mkldnn": "none", "mkldnn.matmul": "ieee", "mkldnn.conv": "none", "mkldnn.rnn": "none"}
# Beside fp32_precision, how float16/bfloat16 products are summed (cuBLAS, SDPA's math path, the CPU):
# held as they stand (torch's defaults) rather than declared, and read through torch._C's getters (a
# cuBLAS attribute gives half of a pair), under their setter's name. A C++ extension can set them
# past the lock (precision_lock), so they are read after every call with the rest.
REDUCTION_SETTERS = ("_set_cublas_allow_fp16_reduced_precision_reduction", "_set_cublas_allow_bf16_reduced_precision_reduction",
                     "_set_cublas_allow_fp16_accumulation", "_set_math_sdp_allow_fp16_bf16_reduction",
                     "_set_cpu_allow_fp16_reduced_precision_reduction")


def _node(name: str):
    target = torch.backends
    for part in filter(None, name.split(".")):
        target = getattr(target, part)
    return target


def precision_flags() -> dict[str, str]:
    """Every node's fp32_precision as it stands ("ieee", "tf32", "bf16", "none": its parent's), then
    the reduction settings (REDUCTION_SETTERS, by label); a node this build lacks, or one never set
    that can't be read (torch.backends.cuda), is left out."""
    flags = {}
    for name in PRECISION_NODES:
        try:
            flags[name] = str(_node(name).fp32_precision)
        except (AttributeError, RuntimeError):  # absent, or never set: nothing reads it as set
            continue
    for name in REDUCTION_SETTERS:
        setter = precision_lock.SETTERS[name]
        try:
            flags[setter.label] = str(getattr(torch._C, setter.getter)())
        except Exception:  # noqa: BLE001 - absent (an older torch), or replaced by one that raises: left out
            continue
    try:  # autocast on: float32 ops at half precision (precision_lock.AUTOCAST_ENABLERS)
        flags["torch.autocast"] = str(torch._C._is_any_autocast_enabled())
    except Exception:  # noqa: BLE001 - absent (an older torch), or replaced by one that raises: left out
        pass
    return flags


def set_precision_flags(flags: dict[str, str]) -> None:
    """Write `flags` (from precision_flags, or DECLARED_PRECISION), parents first."""
    for name in PRECISION_NODES:
        if name in flags:
            _node(name).fp32_precision = flags[name]


def _legacy_tf32() -> tuple[bool, bool] | None:
    """(cuBLAS, cuDNN) TF32 as the legacy flags read; None where they can't be read (APIs mixed)."""
    try:
        return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)
    except RuntimeError:  # "you have used a mix of the legacy and new APIs": the new API's nodes say it all
        return None


def _set_legacy_tf32(matmul: bool, cudnn: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def hold_declared_precision() -> dict[str, str]:
    """Set the declared precision for the rest of this process (no restore) and return the settings
    as set. Both children call it before anything of the problem's or the candidate's runs, so every
    call in them, checked or timed, the candidate's or a baseline's, runs torch's float32 ops the
    same way: a forward can't tell a checked call from a timed one by torch's settings, and the
    timed speed is of the arithmetic that was judged."""
    set_precision_flags(DECLARED_PRECISION)
    _set_legacy_tf32(False, False)  # the legacy flags' own state too, so their getters agree
    return precision_flags()


@contextmanager
def declared_precision() -> Iterator[dict[str, str]]:
    """Float32 computed in float32: TF32 off for cuBLAS matmuls and cuDNN convolutions (oneDNN kept
    to IEEE on the CPU) while the block runs, then every setting as it was. Both sides of a
    comparison run under it: the trusted job computes the reference outputs, by which correctness is
    judged, and the candidate's child its checked runs (harness.run_one), so a torch op a candidate
    keeps computes exactly what it computes in the reference; its own kernels may still choose TF32,
    judged by the tolerance. By default PyTorch lets cuDNN convolve float32 in TF32 (a 10-bit
    mantissa, relative error ~1e-3 on a large reduction: the whole float32 `rel` bound; ResNet101
    solutions read rel_err 0.065 on an H200 with only the candidate's side in TF32), and a problem
    may switch matmuls to TF32 too. The children hold it for their whole life besides
    (hold_declared_precision): timed calls, the baselines' too, run under the same settings. Yields
    the settings as set, to check after the block (precision_changes)."""
    before, legacy = precision_flags(), _legacy_tf32()
    declared = hold_declared_precision()
    try:
        yield declared
    finally:
        if legacy is not None:
            _set_legacy_tf32(*legacy)
        set_precision_flags(before)


def _flag_label(name: str) -> str:
    return f"torch.backends{'.' if name else ''}{name}.fp32_precision" if name in PRECISION_NODES else name


def precision_changes(declared: dict[str, str]) -> dict[str, str]:
    """The settings that no longer read as `declared` (what declared_precision yielded), as
    {setting: "was -> now"}, and every write the lock refused (precision_lock.refused: a candidate
    may catch the error): empty where nothing changed them and nothing tried."""
    now = precision_flags()
    changed = {_flag_label(name): f"{value} -> {now.get(name, 'unreadable')}"
               for name, value in declared.items() if now.get(name) != value}
    return {**changed, **precision_lock.refused()}


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def make_inputs(problem, seed: int, device: str, maker=None) -> list:
    """The problem's inputs for `seed`, made on `device`. On a GPU, torch's factory functions
    (randn, rand, ...) then fill device memory directly: making multi-GB inputs on the CPU was most
    of a large reference's time (KernelBench main, level 1: up to 17 GB a set). The values differ
    from a CPU run with the same seed, which nothing relies on: the trusted job makes every set a
    verification uses, and hands the candidate a file. A get_inputs that only works on the CPU
    (numpy, .tolist() of a device tensor...) gets the CPU. `maker`: a workload's function in
    get_inputs' place (problem_meta.workloads), seeded the same way."""
    make = maker or problem.get_inputs
    seed_all(seed)
    if device.startswith("cuda"):
        try:
            with torch.device(device):
                return list(make())
        except Exception:  # noqa: BLE001 - any failure on the device: the CPU path decides
            seed_all(seed)
    return list(make())


def to_device(values: list, device: str) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextmanager
def no_collection() -> Iterator[None]:
    """Python's garbage collector held off while a back-to-back window runs (timeit's habit): a
    collection in a process holding torch and triton takes milliseconds, which the parent's clock
    around a window would count as the calls' time, in one window and not the next."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()

