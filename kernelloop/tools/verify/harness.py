"""The verifier's child side: what runs inside the sandboxed process forked for one job.

Two kinds of child. The trusted one (reference_job.py) runs the problem: inputs, reference
outputs, baselines. The candidate's child, here, loads ModelNew and does what the parent asks on
the job's channel, nothing more: run the trials on the inputs it was given (poisoned memory
first), recording each set's aten ops, and save the outputs; then the decoy runs on the set the
parent picks once it has the trials' report; when asked, time itself, every timed call on fresh values
(fresh_values.py) from the request's seed, keeping a copy of each call's output and answering
with their digests (kept_outputs.py), then hand over the copies the parent picks; when asked,
run once more on fresh values written into buffers it already knows; then stop. It never holds
reference outputs, the verdict's state or anyone's timings: the parent compares, decides and
cross-checks, and treats everything this process reports (its event times, its kernels, its op
and launch counts, its input checks, its digests) as claims.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import triton  # noqa: F401  (preloaded so each fork starts warm)
from torch.overrides import TorchFunctionMode

from kernelloop.errors import error_line
from kernelloop.problem import import_source
from kernelloop.records import STATUS_OF, Code
from kernelloop.sandbox.channel import Channel, ChannelClosed
from kernelloop.tools.profile.measure import AGAIN, CANDIDATE
from kernelloop.tools.profile.stopwatch import Stopwatch
from kernelloop.tools.verify import build_job, op_records, precision_lock
from kernelloop.tools.verify._runtime import (
    INIT_SEED,
    OpRecorder,
    declared_precision,
    hold_declared_precision,
    no_collection,
    precision_changes,
    precision_flags,
    seed_all,
    synchronize,
    to_device,
)
from kernelloop.tools.verify.child import (  # noqa: F401 - the zygote calls prepare and preload here
    COMPILER_MODULES,
    LAUNCH_COUNTER_MODULES,
    PRELOADED,
    PREPARED,
    classify_exception,
    preload,
    prepare,
    serve,
)
from kernelloop.tools.verify.compare import flatten_outputs
from kernelloop.tools.verify.fresh_values import FreshRequest, Pool, Window, warm_fresh_values
from kernelloop.tools.verify.kept_outputs import Kept
from kernelloop.tools.verify.shared_names import reference_names
from kernelloop.tools.verify.tensor_files import load_sets, save_sets
from kernelloop.tools.verify.window_graph import WindowGraph

if TYPE_CHECKING:  # imported where timing is set up, not when the child starts
    from kernelloop.tools.profile.timing import Rounds


class LaunchCounter:
    """Counts launches of the candidate's own kernels: Triton JIT/interpreted functions and
    functions of extensions built with load_inline. Installed before the candidate is imported;
    what it counts is a claim (the candidate shares this process)."""

    def __init__(self) -> None:
        self.launches: Counter[str] = Counter()
        self.facts: dict[str, dict[str, Any]] = {}  # per own Triton kernel, as first launched: grid, warps, registers
        # The decoy checks: "skip", Triton launches do nothing; "perturb", every floating tensor a
        # launch is given gets noise first (originals kept in `saved`, put back by `restore`).
        self.mode: str | None = None
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.served: list[str] = []  # extension modules loaded from the compile stage's product (build_job.py)
        self._runs: dict[Any, tuple[Any, Any]] = {}  # per wrapped class: its own run, the counting one
        self.recorder: OpRecorder | None = None  # the trial running: told what each own kernel is handed
        self._own_let_through = False

    def install(self, prebuilt: dict[str, Any] | None = None) -> None:
        from triton.runtime import interpreter, jit

        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            self._wrap_run(cls)
        import torch.utils.cpp_extension as cpp_extension

        original_load_inline = build_job.serve(cpp_extension.load_inline, prebuilt, self.served)
        counter = self

        def counted_load_inline(*args, **kwargs):
            return _CountedExtension(original_load_inline(*args, **kwargs), counter)

        cpp_extension.load_inline = counted_load_inline

    def _wrap_run(self, cls) -> None:
        from triton.runtime import interpreter

        original_run = cls.run
        counter = self
        interpreted = cls is interpreter.InterpretedFunction

        def run(self_, *args, **kwargs):
            if counter.mode == "skip":
                return None
            noised = counter.perturb([*args, *kwargs.values()]) if counter.mode == "perturb" else []
            name = f"triton:{getattr(self_.fn, '__name__', 'kernel')}"
            if not kwargs.get("warmup", False):
                counter.launches[name] += 1
                if counter.recorder is not None:
                    counter.recorder.own_launch([*args, *kwargs.values()])
            recorder = counter.recorder if interpreted else None
            if recorder is not None:
                recorder.interpreting = True
            try:
                kernel = original_run(self_, *args, **kwargs)
            finally:
                if recorder is not None:
                    recorder.interpreting = False
            counter.unperturb(noised)
            if name not in counter.facts and not kwargs.get("warmup", False):
                counter.facts[name] = launch_facts(self_, args, kwargs, kernel)
            return kernel

        self._runs[cls] = (original_run, run)
        cls.run = run

    def let_own_kernels_through(self) -> None:
        """The harness's own Triton kernels (the digests of kept outputs: fresh timing) run uncounted
        and untouched by the decoy modes. Installed only where fresh timing is set up, so a launch
        without it goes through exactly the counting wrapper."""
        if self._own_let_through:
            return
        self._own_let_through = True
        for cls, (original_run, counted_run) in self._runs.items():
            cls.run = _own_first(original_run, counted_run)

    def perturb(self, values: list) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Noise on every floating tensor a launch is given; (tensor, before, noised) for unperturb."""
        noised = []
        for value in values:
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
                key = value.data_ptr()
                if key not in self.saved:  # the original, once: autotuning may launch again
                    self.saved[key] = (value, value.detach().clone())
                with torch.no_grad():
                    before = value.detach().clone()
                    value.add_(torch.randn_like(value).mul_(1.0 + float(value.detach().abs().mean())))
                    noised.append((value, before, value.detach().clone()))
        return noised

    @staticmethod
    def unperturb(noised: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> None:
        """Right after the launch, each tensor back as it was wherever the kernel left the noise: only
        what it wrote carries the noise on, so torch reads clean inputs after it (a flag kernel handed
        the input, with torch doing the work, was not a decoy while torch read the noise: redteam3)."""
        with torch.no_grad():
            for value, before, was in noised:
                value.copy_(torch.where(value == was, before, value))

    def restore(self) -> None:
        with torch.no_grad():
            for value, original in self.saved.values():
                value.copy_(original)
        self.saved = {}


def _own_first(original_run, counted_run):
    def run(self_, *args, **kwargs):
        if getattr(self_.fn, "__module__", "").startswith("kernelloop."):  # the harness's own (the digests)
            return original_run(self_, *args, **kwargs)
        return counted_run(self_, *args, **kwargs)

    return run


def launch_facts(fn, args: tuple, kwargs: dict, kernel) -> dict[str, Any]:
    """What one launch of a Triton kernel used: its grid, and (compiled for a GPU) the compiler's
    warps, registers, spills and shared memory. Read once per kernel, so timing pays nothing."""
    grid = kwargs.get("grid")
    if callable(grid):
        try:
            grid = grid({**dict(zip(getattr(fn, "arg_names", []), args)), **kwargs})
        except Exception:  # noqa: BLE001 - a grid we can't evaluate is a fact we don't have
            grid = None
    meta = getattr(kernel, "metadata", None)
    number = lambda value: int(value) if isinstance(value, int) else None  # noqa: E731
    return {"grid": [int(g) for g in grid] if isinstance(grid, (tuple, list)) and all(isinstance(g, int) for g in grid)
            else [], "num_warps": number(getattr(meta, "num_warps", None)),
            "registers": number(getattr(kernel, "n_regs", None)), "spills": number(getattr(kernel, "n_spills", None)),
            "shared_bytes": number(getattr(meta, "shared", None))}


class _CountedExtension:
    """Proxy over a load_inline module: each call of one of its functions is an own-kernel launch."""

    def __init__(self, module, counter: LaunchCounter):
        self._module, self._counter = module, counter

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if not callable(attr):
            return attr

        counter = self._counter

        def call(*args, **kwargs):
            counter.launches[f"ext:{name}"] += 1
            recorder = counter.recorder
            if recorder is not None:
                recorder.own_launch([*args, *kwargs.values()])
            # the perturb run: noise on what it is handed, put back after it as a launch's inputs are
            noised = counter.perturb([*args, *kwargs.values()]) if counter.mode == "perturb" else []
            result = attr(*args, **kwargs)
            counter.unperturb(noised)
            if recorder is not None:
                recorder.own_result(result)
            return result

        return call


def _prepared_report(job_started: float) -> dict[str, float]:
    """What the zygote's preload() and the standby's prepare() did ahead of this job, and how long
    the standby then idled (the part of its work that cost the job nothing)."""
    if not PREPARED:
        return dict(PRELOADED)
    report = {k: v for k, v in PREPARED.items() if k != "done_at"}
    return {**PRELOADED, **report, "prepared_idle_s": job_started - PREPARED["done_at"]}


def poison(device: str, specs: list, value: float = math.nan) -> None:
    """Fill soon-to-be-reused allocator blocks, the size of the outputs (`specs`: [shape, dtype name]
    each, from the parent), with `value` so unwritten outputs show up. Effective with CUDA's caching
    allocator; on the CPU large blocks come back as fresh pages (PoisonEmpty covers both)."""
    blocks = []
    for shape, dtype_name in specs:
        dtype = getattr(torch, str(dtype_name), None)
        if isinstance(dtype, torch.dtype) and dtype is not torch.bool:
            blocks.append(torch.full(tuple(shape), _fill_for(dtype, value), dtype=dtype, device=device))
    del blocks


def _fill_for(dtype: torch.dtype, value: float) -> float | int:
    if dtype.is_floating_point or dtype.is_complex:
        return value
    return int(value) if math.isfinite(value) else -7


class PoisonEmpty(TorchFunctionMode):
    """Every tensor the forward allocates uninitialised from Python (torch.empty and its kin) starts
    filled with `value`, on the CPU as on a GPU: memory a kernel never writes then holds what the
    parent chose, whatever the allocator handed out (the parent's reruns tell unwritten elements by it)."""

    FUNCS = frozenset({torch.empty, torch.empty_like, torch.empty_strided, torch.Tensor.new_empty,
                       torch.Tensor.new_empty_strided})

    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in self.FUNCS and type(out) is torch.Tensor and out.dtype is not torch.bool:
            out.fill_(_fill_for(out.dtype, self.value))
        return out


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def aliasing(outputs: list, inputs: list) -> tuple[Code, str] | None:
    spans = [storage_span(i) for i in inputs if isinstance(i, torch.Tensor) and i.untyped_storage().nbytes()]
    for index, out in enumerate(outputs):
        if isinstance(out, torch.Tensor) and out.untyped_storage().nbytes():
            lo, hi = storage_span(out)
            if any(lo < b_hi and b_lo < hi for b_lo, b_hi in spans):
                return Code.aliases_input, f"aliases an input: output {index} shares memory with an input; return a new tensor"
    return None


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes, so NaN inputs compare equal to themselves."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def mutated(inputs: list, pristine: list) -> tuple[Code, str] | None:
    for index, (now, before) in enumerate(zip(inputs, pristine)):
        if isinstance(now, torch.Tensor) and not torch.equal(_bits(now), _bits(before)):
            return (Code.writes_to_inputs,
                    f"writes to its inputs: input {index} changed during forward; kernels must leave inputs untouched")
    return None


def switched_precision(changed: dict[str, str], where: str = "its forward") -> tuple[Code, str]:
    """A forward that changed torch's float32 precision settings, or tried to. The child holds them at
    the reference's (hold_declared_precision: TF32 off) for every call, checked or timed, locks them
    (precision_lock: a write of another value raises, and is recorded) and reads them after each
    checked run and each of the parent's timing requests. A change is rejected, not only undone: in a
    checked run it can only lose accuracy against the reference, so its one use is to run torch's ops
    below the declared precision where nothing compares them (the timed calls), and a forward that
    flips process-wide settings changes its caller's numerics besides (like writing to its inputs).
    A change at import or in ModelNew(...) is rejected too (run_candidate)."""
    what = ", ".join(f"{name} {change}" for name, change in sorted(changed.items()))
    tried = all(change.endswith("(refused)") for change in changed.values())
    return (Code.changes_precision,
            f"changes precision: {where} {'tried to switch' if tried else 'switched'} torch's float32 precision "
            f"({what}); torch's ops are judged at the reference's precision (TF32 off), and only a kernel of its own "
            "may choose TF32")


@dataclass
class Backward:
    """A BACKWARD problem's backward in a checked run (run_one): the upstream gradient of each output
    (None where the reference's output takes none) and the gradients' names, both as handed over
    ("input <i>", then the reference's parameter names); filled by the run: each gradient's host
    copy (None where the candidate has none) and the parameter names its ModelNew lacks."""

    upstream: list
    names: list[str]
    counter: Any = None  # the LaunchCounter: told the backward's recorder while the backward runs
    grads: list = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # The backward's own op record (the torch ops autograd ran for it, the reference's backward
    # recorded the same way in the trusted job): judged as the forward's is, against the reference's
    record: dict[str, Any] = field(default_factory=dict)


def run_backward(model, inputs: list, out: list, pristine: list, backward: Backward, device: str,
                 poison_value: float) -> tuple[Code, str] | None:
    """The backward of a checked forward, under the checks of its forward: gradient-sized memory
    poisoned and every torch.empty of the backward filled, the reference's precision held and
    checked after, the inputs unwritten, gradients plain tensors sharing no memory with an input.
    Only from what this process was handed: the inputs and the upstream gradients (the reference's
    gradients never come here). Outputs that do not require grad get no upstream: their gradients
    are then missing, which the parent judges (no_gradient)."""
    pairs = [(o, u.to(o.device).clone()) for o, u in zip(out, backward.upstream)
             if isinstance(u, torch.Tensor) and type(o) is torch.Tensor and o.requires_grad
             and o.shape == u.shape and o.dtype == u.dtype]
    params = dict(model.named_parameters())
    sized = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad] + list(params.values())
    poison(device, [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in sized], poison_value)
    # The backward's ops on a recorder of their own (the forward's is the forward's alone), around
    # autograd's call and nothing of this harness's: what autograd adds of its own (a leaf's grad
    # accumulated, a broadcast's sum) the trusted job's record of the reference's backward has too.
    # The counter is told it, so an own kernel's launches in the backward are followed as the forward's.
    recorder = OpRecorder()
    forward_recorder = backward.counter.recorder if backward.counter is not None else None
    if backward.counter is not None:
        backward.counter.recorder = recorder
    try:
        with declared_precision() as declared:
            with torch.enable_grad(), PoisonEmpty(poison_value):
                if pairs:
                    with recorder:
                        torch.autograd.backward([o for o, _ in pairs], [u for _, u in pairs])
            synchronize(device)
            changed = precision_changes(declared)
    finally:
        if backward.counter is not None:
            backward.counter.recorder = forward_recorder
    if changed:
        return switched_precision(changed, "its backward")
    grads: list = []
    for name in backward.names:
        if name.startswith("input "):
            index = int(name.removeprefix("input "))
            leaf = inputs[index] if index < len(inputs) else None
            grads.append(leaf.grad if isinstance(leaf, torch.Tensor) else None)
        elif name in params:
            grads.append(params[name].grad)
        else:  # its parameters must be named as the reference's: the parent names it in the verdict
            backward.missing.append(name)
            grads.append(None)
    recorder.consumed([g for g in grads if isinstance(g, torch.Tensor)])  # what the backward returns is used
    backward.record = {"ops": recorder.compute_ops(), "op_work": recorder.compute_work(),
                       "own_used": recorder.own_used}
    for name, grad in zip(backward.names, grads):
        if grad is not None and type(grad) is not torch.Tensor:
            return (Code.wrong_type,
                    f"tensor subclass: the gradient of {name} is a {type(grad).__name__}, not a plain torch.Tensor")
    for name, grad in zip(backward.names, grads):
        if aliasing([grad], inputs):
            return (Code.aliases_input, f"aliases an input: the gradient of {name} shares memory with an input; "
                                        "its backward must return new tensors")
    found = mutated(inputs, pristine)
    if found:
        return found[0], found[1].replace("during forward", "during backward")
    backward.grads = [g.detach().to("cpu", copy=True) if g is not None else None for g in grads]
    return None


def _end_backward(model, inputs: list) -> None:
    """Nothing of a backward outlives its run: no gradients kept, the inputs (the fresh check's
    buffers among them, kept by identity) no longer requiring grad, as every timed call's."""
    for p in model.parameters():
        p.grad = None
    for t in inputs:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.grad = None
            t.requires_grad_(False)


def run_one(model, inputs_cpu: list, device: str, specs: list, reuse: list | None = None,
            costs: dict | None = None, poison_value: float = math.nan,
            recorder: OpRecorder | None = None,
            backward: Backward | None = None) -> tuple[list, list, tuple[Code, str] | None]:
    """One checked forward: device inputs, poisoned memory, input and alias checks.

    `specs`: the outputs' shapes and dtypes, to poison with (`poison_value`: NaN, but in the parent's reruns).
    `reuse`: device tensors of an earlier call to copy the new
    values into, so a candidate that caches by data_ptr or id sees a pointer it knows holding values it hasn't seen.
    `costs` gets each step's seconds: "inputs_s" (to the device, and the pristine copies), "poison_s", "forward_s" (the
    forward, JIT included), "checks_s" (alias and input-write checks), "outputs_s" (to the host) and
    "backward_s" (BACKWARD problems: the backward and its checks).
    `recorder` records the ops of the forward alone (not this harness's copies and checks around it).
    The forward runs at the reference's precision (declared_precision: TF32 off), which it must leave
    as it found it (switched_precision).
    `backward` (BACKWARD problems, trials only): the floating inputs require grad, the forward runs
    with grad on, and once its checks pass, its backward (run_backward) fills `backward.grads`."""
    steps = Stopwatch()

    def lap(name: str) -> None:  # only where asked: the device waits for the step, so the lap is its time
        if costs is not None:
            synchronize(device)
            steps.lap(name)

    if reuse is None:
        inputs = to_device([i.clone() if isinstance(i, torch.Tensor) else i for i in inputs_cpu], device)
    else:
        inputs = [old.copy_(new) if isinstance(old, torch.Tensor) else new for old, new in zip(reuse, inputs_cpu)]
    if backward is not None:
        for t in inputs:
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                t.requires_grad_(True)
        for p in model.parameters():
            p.grad = None
    pristine = [i.detach().clone() if isinstance(i, torch.Tensor) else i for i in inputs]
    lap("inputs_s")
    poison(device, specs, poison_value)
    lap("poison_s")
    with declared_precision() as declared:  # the reference's precision: set before, checked after
        with (torch.enable_grad() if backward is not None else contextlib.nullcontext()), PoisonEmpty(poison_value), \
                (recorder if recorder is not None else contextlib.nullcontext()):
            out = flatten_outputs(model(*inputs))
        if recorder is not None:
            recorder.consumed(out)  # what the forward returns is used
        synchronize(device)
        changed = precision_changes(declared)
    lap("forward_s")
    if changed:
        return [], inputs, switched_precision(changed)
    for index, o in enumerate(out):
        if type(o) is not torch.Tensor:
            return [], inputs, (Code.wrong_type,
                                f"tensor subclass: output {index} is a {type(o).__name__}, not a plain torch.Tensor")
    problem = aliasing(out, inputs) or mutated(inputs, pristine)
    lap("checks_s")
    # Read as the forward returned them (a copy on the CPU too: a buffer it reuses stays its own), before
    # any backward: the backward runs unrecorded and could write the forward's answer into them
    # (tests/fixtures/cheats/review38_backward_writes_forward_output.py).
    host = [o.detach().to("cpu", copy=True) for o in out]
    lap("outputs_s")
    if backward is not None:
        try:
            problem = problem or run_backward(model, inputs, out, pristine, backward, device, poison_value)
        finally:
            _end_backward(model, inputs)
        lap("backward_s")
    if costs is not None:
        costs.update(steps.laps)
    return host, inputs, problem


def _shuffle_interpreter(job: dict[str, Any]) -> bool:
    """On the CPU, Triton's interpreter runs a grid's programs one at a time; shuffling their order
    makes a kernel that depends on it (a race on a GPU) show here too, where that is possible."""
    if job["device"] != "cpu":
        return False
    from kernelloop.tools.verify import interpreter_order

    return interpreter_order.install(int(job.get("order_seed", 0)))


def read_sets(path: str) -> tuple[list[list], dict]:
    """A sets file the parent handed over (the trusted job wrote it)."""
    with open(path, "rb") as handle:
        return load_sets(handle, os.fstat(handle.fileno()).st_size)


def run_candidate(job: dict[str, Any], channel: Channel) -> dict[str, Any]:
    device = job["device"]
    steps = Stopwatch()  # where the child's setup goes, for the verifier's cost report
    counter = LaunchCounter()
    counter.install(job.get("prebuilt"))
    shuffled = _shuffle_interpreter(job)
    steps.lap("hooks_s")
    settings = hold_declared_precision()  # every call's, checked or timed: its own code may not change them
    precision_lock.install()  # ... nor switch them and back within one call, where no read after it sees
    try:
        names = reference_names(job)  # a run of the reference's source, where it takes names from it
        candidate = import_source(Path(job["candidate_path"]), "kernelloop_candidate", names=names)
    except Exception as exc:  # import errors are the candidate's compile errors (but a refused precision write)
        failed = f"compile: the candidate failed to import: {exc}".splitlines()[0]
        return _switched_or(settings, "its import", Code.import_failed, failed)
    if not hasattr(candidate, "ModelNew"):
        return {"status": "compile_error", "code": Code.no_modelnew.value,
                "reason": "modelnew: the candidate defines no ModelNew"}
    steps.lap("import_s")
    # The inputs alone: the reference's outputs never come into this process. Donor sets (at the
    # end, where the trusted job made any) are only for fresh values to be drawn from.
    all_sets, given = read_sets(job["inputs_path"])
    donors, pool_at = given.get("donors"), given.get("pool")
    donors = donors if isinstance(donors, int) and 0 < donors < len(all_sets) else 0
    input_sets = all_sets[:len(all_sets) - donors]
    pool_sets = [all_sets[i] for i in (pool_at if isinstance(pool_at, list) else [])
                 if isinstance(i, int) and 0 <= i < len(all_sets)] or all_sets[:1]
    steps.lap("load_s")
    if device.startswith("cuda"):
        torch.cuda.init()  # CUDA context creation lands in setup, not in the first call (at once if prepared)
        torch.cuda.synchronize()
        steps.lap("context_s")
    seed_all(INIT_SEED)
    try:
        model = candidate.ModelNew(*given["init_inputs"]).to(device)
    except Exception as exc:
        failed = f"modelnew: ModelNew(*get_init_inputs()) failed: {error_line(exc)}"
        return _switched_or(settings, "ModelNew(...)", Code.modelnew_failed, failed)
    synchronize(device)
    steps.lap("model_s")
    changed = precision_changes(settings)
    if changed:  # set at import or in __init__: its timed calls would run torch's ops in TF32
        code, reason = switched_precision(changed, "its import or ModelNew(...)")
        return {"status": STATUS_OF[code].value, "code": code.value, "reason": reason}
    session = _CandidateSession(model, input_sets, counter, job, channel, settings)
    session.pool_sets, session.all_sets = pool_sets, all_sets
    gradients = job.get("gradients")
    if job.get("upstream_path") and isinstance(gradients, list) and all(isinstance(n, str) for n in gradients):
        # BACKWARD: one upstream gradient per output of each trial set, drawn in the trusted job
        session.upstream, session.gradient_names = read_sets(job["upstream_path"])[0], list(gradients)
    session.workloads = workload_layout(given.get("workloads"), len(input_sets), len(all_sets))
    if session.workloads:  # timed first: get_inputs' own sets (the first workload's), as without workloads
        first = next(iter(session.workloads.values()))
        session.timed_sets = input_sets[first[0]:first[1]]
    session.overhead.update(setup_s=steps.total(), **{f"setup_{k}": v for k, v in steps.laps.items()},
                            **_prepared_report(steps.started))
    session.shuffled = shuffled
    try:
        with torch.no_grad():
            return session.run()
    except ChannelClosed:
        return {"status": "stopped"}
    except BaseException as exc:  # the candidate's failure is a verdict, never the harness's crash
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, SystemExit):
            return {"status": "runtime_error", "code": Code.exited.value,
                    "reason": f"exited: the candidate called sys.exit({exc.code})"}
        changed = precision_changes(settings)  # a write the lock refused raises (or its caller's own error)
        code, reason = switched_precision(changed, session.doing) if changed else classify_exception(exc)
        traceback.print_exc()
        return {"status": STATUS_OF[code].value, "code": code.value, "reason": reason,
                "launches": dict(counter.launches)}


def _switched_or(settings: dict[str, str], where: str, code: Code, reason: str) -> dict[str, Any]:
    """A setup step's failure, unless the precision settings changed or a write to them was refused
    (the lock's error, or whatever the candidate raised after catching it): then that."""
    changed = precision_changes(settings)
    if changed:
        code, reason = switched_precision(changed, where)
    return {"status": STATUS_OF[code].value, "code": code.value, "reason": reason}


def workload_layout(raw: object, trials: int, total: int) -> dict[str, tuple[int, int, list[int]]]:
    """A problem with workloads: where each workload's sets lie among the trial sets ([start, stop))
    and which sets its fresh values come from, as the trusted job wrote them in the inputs file;
    {} for none (or a layout that doesn't fit the sets: then everything is timed as without)."""
    layout: dict[str, tuple[int, int, list[int]]] = {}
    if not isinstance(raw, list):
        return layout
    for item in raw:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                and all(isinstance(v, int) for v in item[1:3]) and 0 <= item[1] < item[2] <= trials
                and isinstance(item[3], list) and all(isinstance(i, int) and 0 <= i < total for i in item[3])):
            return {}
        layout[item[0]] = (item[1], item[2], list(item[3]))
    return layout


class _CandidateSession:
    """The candidate's side of the conversation: trials, then whatever the parent asks."""

    def __init__(self, model, input_sets: list[list], counter: LaunchCounter, job: dict, channel: Channel,
                 settings: dict[str, str] | None = None):
        self.model, self.input_sets, self.counter, self.job, self.channel = model, input_sets, counter, job, channel
        self.settings = settings if settings is not None else precision_flags()  # torch's precision, held throughout
        self.device = job["device"]
        self.costs: dict[str, float] = {}  # the candidate's own compile and run time, kept out of the fixed cost
        self.overhead: dict[str, float] = {}
        self.buffers: list | None = None  # the device inputs the fresh check writes new values into
        self.specs: list[list] = job.get("output_specs") or []  # per input set: [shape, dtype] of each output
        self.timing: Rounds | None = None  # set by the parent's "time" request (setup_timing)
        self.shuffled = False
        # Fresh values for timed calls (fresh_values.py): the trial sets they are drawn from, the
        # request's values, and the copies of its timed calls' outputs (kept_outputs.py).
        self.pool_sets: list[list] = input_sets[:1]
        self.pool: Pool | None = None
        self.fresh_values: FreshRequest | None = None
        self.kept: Kept | None = None
        self.window: Window | None = None  # the back-to-back windows' input sets, one per call
        self.graph: WindowGraph | None = None  # the windows' calls as one CUDA graph (window_graph.py)
        self.staged: str | None = None  # the last step of a replayed window taken ("fill", "run"), None between windows
        self.held: list = []  # a replayed window's outputs, between its "run" and "keep" steps
        # A problem with workloads: each one's sets ([start, stop), its pool's sets); the sets timed
        # now (one workload's, switched by the parent's "workload" request) and where they start.
        self.workloads: dict[str, tuple[int, int, list[int]]] = {}
        self.timed_sets: list[list] = input_sets
        self.timed_first = 0
        self.all_sets: list[list] = input_sets  # with the donor sets, where the trusted job made any
        self.decoy_set = 0  # the set the parent picked for the decoy runs
        # BACKWARD problems: each trial set's upstream gradients (handed over) and the gradients' names
        self.upstream: list[list] | None = None
        self.gradient_names: list[str] = []
        self.doing = "its forward"  # what a precision change is put down to: the trials, then each request's calls

    def _specs(self, index: int) -> list:
        return self.specs[index] if index < len(self.specs) else []

    def claims(self) -> dict[str, Any]:
        return {"launches": dict(self.counter.launches), "costs": self.costs, "overhead": self.overhead,
                "interpreter_shuffled": self.shuffled, "prebuilt_served": list(self.counter.served)}

    def run(self) -> dict[str, Any]:
        found = self.trials()
        if found:
            return self._ended(*found)
        handlers = {"time": self.setup_timing, "block": self.block, "back": self.back, "capture": self.capture,
                    "pick": self.pick, "profile": lambda _: self.profile(), "workload": self.select_workload,
                    "rerun": self.rerun, "fresh": self._fresh_answer}
        while True:
            request = self.channel.receive()
            kind = next(iter(request), None)
            if kind not in handlers:  # "done", or anything else: the parent has what it needs
                return {"status": "ran", **self.claims()}
            self.doing = f"a call of its {kind} request"
            with no_collection() if kind == "back" else contextlib.nullcontext():
                answer = handlers[kind](request[kind])
            # Every call runs at the settings it was given (hold_declared_precision), timed ones too:
            # a forward that switched them where nothing compares its outputs is ended here.
            changed = precision_changes(self.settings)
            if changed:
                return self._ended(*switched_precision(changed, self.doing))
            self.channel.send({kind: answer})

    def _ended(self, code: Code, reason: str) -> dict[str, Any]:
        return {"status": STATUS_OF[code].value, "code": code.value, "reason": reason,
                "launches": dict(self.counter.launches)}

    def _fresh_answer(self, request: dict[str, Any]) -> dict[str, Any]:
        found = self.fresh(request["inputs_path"])
        return {"found": found[1], "code": found[0].value} if found else {"found": None}

    def trials(self) -> tuple[Code, str] | None:
        """Every given input set once, outputs saved for the parent, the aten ops of each set's forward
        reported; then the decoy runs on the set the parent picks (decoy_runs). Returns a claim-level
        problem (aliasing, input writes, a tensor subclass) or None."""
        outputs, records = [], []
        grads: list[list] = []  # BACKWARD problems: each set's gradients, and parameter names ModelNew lacks
        backward_records: list[dict[str, Any]] = []  # and each set's backward op record
        missing: list[str] = []
        first_forward: dict[str, float] = {}
        started = time.perf_counter()
        for index, inputs in enumerate(self.input_sets):
            # Every set's ops, not the first's alone: a forward that tells one set from the others
            # would show its own kernel there and leave the rest to torch (review35).
            recorder = OpRecorder()
            self.counter.recorder = recorder
            backward = None
            if self.upstream is not None:
                given = self.upstream[index] if index < len(self.upstream) else []
                backward = Backward(given, self.gradient_names, self.counter)
            try:
                out, buffers, found = run_one(self.model, inputs, self.device, self._specs(index),
                                              costs=first_forward if index == 0 else None, recorder=recorder,
                                              backward=backward)
            finally:
                self.counter.recorder = None
            if index == 0:
                self.buffers = buffers
                self.channel.phase("trials")
                self.costs["first_call_s"] = time.perf_counter() - started  # includes Triton's JIT compile
            if found:
                return found
            outputs.append(out)
            if backward is not None:
                grads.append(backward.grads)
                missing = backward.missing
                backward_records.append(backward.record)
            records.append({"ops": recorder.compute_ops(), "op_work": recorder.compute_work(),
                            "own_used": recorder.own_used})
        self.costs["trials_s"] = time.perf_counter() - started - self.costs["first_call_s"]
        save_started = time.perf_counter()
        save_sets(Path(self.job["job_dir"]) / "trials.sets", outputs)
        if self.upstream is not None:
            save_sets(Path(self.job["job_dir"]) / "grads.sets", grads, {"missing": missing})
        # The first call's steps apart (first_forward_s, first_inputs_s, ...): where a cold first call goes.
        self.overhead.update(save_s=time.perf_counter() - save_started, **{f"first_{k}": v for k, v in first_forward.items()})
        # The first set's record as before, and every set's (op_records.py)
        # and, BACKWARD problems, every set's backward record apart
        backward_ops = {"backward_ops": op_records.encode(backward_records)} if self.upstream is not None else {}
        self.channel.send({"trials": {**records[0], **op_records.encode(records), **backward_ops, **self.claims()}})
        self.decoy_runs()
        return None

    def rerun(self, asked: dict) -> dict[str, Any]:
        """One failed set again, once per poison the parent chose (and, on the CPU, per program order):
        what the parent tells unwritten, order-dependent and initial-value-dependent elements by."""
        index = int(asked["set"])
        outputs = []
        for value, seed in zip(asked["poisons"], asked["order_seeds"]):
            if self.shuffled:
                from kernelloop.tools.verify import interpreter_order

                interpreter_order.install(int(seed))
            out, _, found = run_one(self.model, self.input_sets[index], self.device, self._specs(index),
                                    poison_value=float(value))
            if found:
                return {"found": found[1]}
            outputs.append(out)
        save_sets(Path(self.job["job_dir"]) / "rerun.sets", outputs)
        return {"found": None}

    def decoy_runs(self) -> None:
        """The decoy check's runs, on the set the parent picked once the trials were reported (a set
        the forward could not know would be the one: review35), to decoy.sets: that set's outputs
        twice more, with every Triton launch skipped, and with noise added to every floating tensor
        each launch is given (a flag a kernel only sets still gets set; what a real kernel reads is
        wrong). A forward still right either way left the work to something else. A run that fails,
        which is what disturbing a kernel that matters usually does, saves nothing; none runs for
        multi-GB outputs (the parent asks nothing then).
        Extension functions (load_inline) get the perturb run's noise in what they are handed, put
        back after each call as a launch's inputs are; they are never skipped, and what they return
        gets no noise (that read an honest function writing into an output it is handed as a decoy:
        redteam3), so a forward of extensions alone gets the perturb run only."""
        if not self.job.get("decoy_check", True):
            return
        request = self.channel.receive()
        asked = request.get("decoy") if isinstance(request, dict) else None
        if not isinstance(asked, dict):  # the parent asked something else (it judged already): for the request loop
            self.channel.put_back(request)
            return
        pick = asked.get("set")
        launched = self.counter.launches
        disturbed: list[list | None] = [None, None]
        if isinstance(pick, int) and 0 <= pick < len(self.input_sets) and launched:
            self.decoy_set = pick
            any_triton = any(name.startswith("triton:") for name in launched)
            disturbed = [self._run_disturbed("skip") if any_triton else None, self._run_disturbed("perturb")]
        saved = [d for d in disturbed if d is not None]
        if saved:
            save_sets(Path(self.job["job_dir"]) / "decoy.sets", saved, {"disturbed": [d is not None for d in disturbed]})
        self.channel.send({"decoy": {"saved": len(saved)}})

    def _run_disturbed(self, mode: str) -> list | None:
        self.counter.mode = mode
        index = self.decoy_set
        try:
            # run_one copies the set into new tensors: none the forward has been handed before
            out, _, found = run_one(self.model, self.input_sets[index], self.device, self._specs(index))
        except Exception:  # noqa: BLE001 - its kernels mattered: the forward could not go on without them
            return None
        finally:
            self.counter.mode = None
            self.counter.restore()  # the model's own parameters among them
        return None if found else out

    def select_workload(self, request: dict[str, Any]) -> dict[str, Any]:
        """Time workload `name` next (the parent asks "time" again after this): its trial sets are
        the sets timed, and its pool's sets those fresh values come from."""
        name = str(request["name"])
        if name not in self.workloads:
            raise RuntimeError(f"no workload {name!r} among the sets handed over")
        start, stop, pool = self.workloads[name]
        self.timed_sets, self.timed_first = self.input_sets[start:stop], start
        self.pool_sets = [self.all_sets[i] for i in pool if i < len(self.all_sets)] or self.timed_sets[:1]
        self.timing, self.pool, self.fresh_values, self.kept, self.window, self.graph = None, None, None, None, None, None
        return {"sets": stop - start}

    def _rounds(self) -> Rounds:
        """The timing rounds: the parent asks "time" (setup_timing) before "block" or "back"."""
        if self.timing is None:
            raise RuntimeError("asked to time before the timing was set up (no \"time\" request came first)")
        return self.timing

    def setup_timing(self, request: dict[str, Any]) -> dict[str, Any]:
        """The timing rounds: with fresh values (`fresh`: Verifier.fresh_timing, the default), one set of
        input buffers, written before every timed call from the request's seed, and room to keep
        `keep_calls` outputs; without (fresh_timing=False), the trial sets in turn, as before fresh timing."""
        from kernelloop.tools.profile.timing import rounds_on

        self.channel.phase("timing")
        steps = Stopwatch()  # where the setup goes (claims.TIMING_SETUP_COSTS), each step ended by a synchronize
        fresh = bool(request.get("fresh", False))
        if fresh:
            self.counter.let_own_kernels_through()  # the digest kernel (warmed below) is the harness's
            self.pool = Pool([to_device(inputs, self.device) for inputs in self.pool_sets])
            self.timing_sets = [self.pool.buffers()]
            synchronize(self.device)
            steps.lap("timing_setup_pool_s")
            self.kept = Kept(self._specs(self.timed_first), int(request.get("keep_calls") or 1), self.device)
            self.window = Window(self.pool, self.kept.calls, self.timing_sets[0])
            synchronize(self.device)
            steps.lap("timing_setup_buffers_s")
            warm_fresh_values(self.pool, self.kept, self.device, self.window)
            steps.lap("timing_setup_warm_values_s")
        else:
            self.timing_sets = [to_device(inputs, self.device) for inputs in self.timed_sets]
        call = lambda i: self.model(*self.timing_sets[i])  # noqa: E731
        self.timing = rounds_on(self.device, {CANDIDATE: call, AGAIN: call}, len(self.timing_sets),
                                prepare=self._prepare if fresh else None, after=self._after if fresh else None)
        hold_ms = self.timing.warm()
        steps.lap("timing_setup_warm_rounds_s")
        self.costs.update(steps.laps, timing_setup_s=steps.total())
        # The fresh check writes new values into the buffers the timing loop called first (get_inputs'
        # own: another workload's sets have other shapes).
        if self.timed_first == 0:
            self.buffers = self.timing_sets[0]
        return {"hold_ms": hold_ms}

    def _prepare(self, name: str, step: int) -> None:
        """Before a timed call, outside its timed region: this call's fresh values into the buffers
        (a block numbers its calls round by round, the candidate's first)."""
        if self.fresh_values is not None:
            self.fresh_values.fill(self.timing_sets[0], 2 * step + (name != CANDIDATE))

    def _after(self, name: str, output: object) -> None:
        """After a timed call of the candidate, once its stop is recorded: a copy of its output."""
        if name == CANDIDATE and self.kept is not None:
            self.kept.keep(flatten_outputs(output))

    def block(self, request: dict[str, Any]) -> dict[str, Any]:
        """Timed rounds; with fresh values, the digests of the candidate's outputs, one per round."""
        rounds = int(request["rounds"])
        if self.pool is None or self.kept is None:
            return {"samples_ms": self._rounds().block(rounds)}
        self.kept.reset()
        self.fresh_values = self.pool.request(int(request["seed"]), 2 * rounds)
        samples = self._rounds().block(rounds)
        return {"samples_ms": samples, "digests": self.kept.digests()}

    def back(self, request: dict[str, Any]) -> dict[str, Any]:
        """Back-to-back calls the parent times; with fresh values, each call's values written and its
        outputs kept, and the digests (timing_driver.py: the trusted job's overhead window does the
        writes and the keeping alone). A replayed graph's window takes three requests (`stage`:
        "fill", "run", "keep"), each timed by the parent on its own; a plain window (Python between
        its calls) one, each call's values written just before it and its outputs kept as it ends."""
        from kernelloop.tools.profile.timing import back_to_back

        fn = self._rounds().fns[CANDIDATE]
        if self.pool is None or self.kept is None:
            back_to_back(fn, len(self.timing_sets), int(request["calls"]))
            return {}
        if self.window is None:
            raise RuntimeError("back-to-back calls with fresh values were asked for before timing was set up")
        if "stage" in request:
            return self._stage(str(request["stage"]), request)
        # Each call's values written just before it, and its outputs kept as it ends: no call's values
        # exist before the calls ahead of it were issued (a batch from the first call), and no output
        # can be made after its call (a batch at the last: review36_window_batch_at_last_call).
        calls, window, kept, model = int(request["calls"]), self.window, self.kept, self.model
        window.prepare(self.pool.request(int(request["seed"]), calls), each_call=True)
        synchronize(self.device)
        kept.reset()
        back_to_back(lambda call: model(*window.inputs(call)), calls, calls,
                     after=lambda output: kept.keep(flatten_outputs(output)))
        return {"digests": kept.digests()}

    def _stage(self, stage: str, request: dict[str, Any]) -> dict[str, Any]:
        """One step of a replayed window, in the order fill, run, keep (anything else is refused)."""
        window, kept, graph, pool = self.window, self.kept, self.graph, self.pool
        if window is None or kept is None or graph is None or pool is None:
            raise RuntimeError("a replayed window was asked for without a captured graph")
        expected = {"fill": None, "run": "fill", "keep": "run"}
        if stage not in expected or self.staged != expected[stage]:
            raise RuntimeError(f"a replayed window's {stage!r} step came after {self.staged!r}")
        self.staged = stage if stage != "keep" else None
        if stage == "fill":
            if int(request["calls"]) != graph.calls:
                raise RuntimeError("a replayed window's calls differ from its graph's")
            window.prepare(pool.request(int(request["seed"]), graph.calls))
        elif stage == "run":
            kept.reset()
            self.held = graph.replay()
        synchronize(self.device)
        if stage != "keep":
            return {}
        if not kept.keep_all(self.held):
            raise RuntimeError("a captured window's outputs share memory")  # refused when captured
        return {"digests": kept.digests()}

    def capture(self, request: dict[str, Any]) -> dict[str, Any]:
        """Its calls on a window's sets as one CUDA graph, untimed, before the windows (window_graph.py);
        whether that worked."""
        model, calls = self.model, int(request["calls"])
        self.graph, self.staged = None, None
        if self.window is not None and self.device.startswith("cuda"):
            self.graph = WindowGraph.capture(lambda inputs: model(*inputs), self.window, calls)
        return {"graph": self.graph is not None}

    def pick(self, request: dict[str, Any]) -> dict[str, Any]:
        """The kept outputs of the calls the parent picked, as raw bytes, to picked.sets."""
        if self.kept is None:
            raise RuntimeError("asked for kept outputs before timing with fresh values was set up")
        picked = [[self.kept.raw(int(index))] for index in request["calls"]]
        save_sets(Path(self.job["job_dir"]) / "picked.sets", picked)
        return {"picked": len(picked)}

    def profile(self) -> dict[str, Any]:
        from kernelloop.tools.profile import profiler

        rows = profiler.kernel_table(lambda: self.model(*self.timing_sets[0]))
        own_names = [name.split(":", 1)[1] for name in self.counter.launches]
        return {"kernels": [row.model_dump() for row in rows], "kernel_split": profiler.classify_kernels(rows, own_names),
                "launches": [{"kernel": name.split(":", 1)[1], **facts} for name, facts in self.counter.facts.items()]}

    def fresh(self, inputs_path: str) -> tuple[Code, str] | None:
        """Input sets it has never seen: the first written into the buffers it was called with most
        (so caching by pointer or id shows), any others (more scrutiny) as new tensors."""
        self.channel.phase("fresh")
        started = time.perf_counter()
        input_sets, _ = read_sets(inputs_path)
        outputs = []
        for index, inputs in enumerate(input_sets):
            out, _, found = run_one(self.model, inputs, self.device, self._specs(0),
                                    reuse=self.buffers if index == 0 else None)
            if found:
                return found
            outputs.append(out)
        self.costs["trials_s"] = self.costs.get("trials_s", 0.0) + time.perf_counter() - started
        save_sets(Path(self.job["job_dir"]) / "fresh.sets", outputs)
        return None


def run_job(job: dict[str, Any]) -> int:
    """Entry point in the forked child of the candidates' worker; returns the exit code. Never raises."""
    return serve(job, {"candidate": run_candidate, "build": build_job.run_build})
