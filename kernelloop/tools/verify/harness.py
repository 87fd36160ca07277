"""The verifier's child side: what runs inside the sandboxed process forked for one job.

Two jobs. `reference` runs the problem's Model on seeded inputs and saves inputs, outputs and
the aten ops it dispatched. `candidate` loads ModelNew, runs it on those saved inputs with
poisoned memory, checks inputs and aliasing, and saves its outputs; the parent compares them
(it is the authority: nothing the candidate touches decides its own verdict).

A job writes `result.json` (and tensors to `.pt` files) in its job dir; progress goes to the
`phase` file so the parent can tell a slow compile from a hung kernel.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import triton  # noqa: F401  (preloaded so each fork starts warm)
from torch.utils._python_dispatch import TorchDispatchMode

from kernelloop.errors import error_line
from kernelloop.sandbox.runner import DEVICE_ENV, PRELOAD_ENV

# Modules jobs need, imported once here in the zygote rather than in each forked child: the
# launch counter's (every candidate job, about 0.3 s) and, on GPU workers, the compiler every
# timing job's torch.compile baseline uses (seconds). On GPU workers importing them asks
# torch.cuda.is_available(), which would initialise CUDA here and leave the forks unable to use it,
# unless it asks NVML instead: the runner sets PYTORCH_NVML_BASED_CUDA_CHECK=1 for them.
# KERNELLOOP_PRELOAD=0 leaves the imports to each child (GPU workers: to the standby's prepare()).
_LAUNCH_COUNTER_MODULES = ("torch.utils.cpp_extension", "triton.runtime.interpreter")
_COMPILER_MODULES = ("torch._dynamo", "torch._inductor.compile_fx")
_GPU_WORKER = os.environ.get(DEVICE_ENV) == "cuda"
if os.environ.get(PRELOAD_ENV, "1") != "0":
    for _name in _LAUNCH_COUNTER_MODULES + (_COMPILER_MODULES if _GPU_WORKER else ()):
        importlib.import_module(_name)
if torch.cuda.is_initialized():  # a fork of this process could not use CUDA
    raise RuntimeError("CUDA was initialised while the sandbox worker imported its modules")

from kernelloop.problem import import_source
from kernelloop.tools.verify.compare import compare_outputs, flatten_outputs
from kernelloop.tools.profile.stopwatch import Stopwatch

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


class OpRecorder(TorchDispatchMode):
    """Records the aten ops a forward dispatches (names without overload)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func._schema.name.split("::")[-1]] += 1
        return func(*args, **(kwargs or {}))

    def compute_ops(self) -> list[str]:
        return sorted(op for op in self.ops if op.rstrip("_") not in NON_COMPUTE_OPS and op not in NON_COMPUTE_OPS)


class LaunchCounter:
    """Counts launches of the candidate's own kernels: Triton JIT/interpreted functions and
    functions of extensions built with load_inline. Installed by the harness before the
    candidate is imported (the candidate may not monkeypatch; static checks enforce that)."""

    def __init__(self):
        self.launches: Counter[str] = Counter()

    def install(self) -> None:
        from triton.runtime import interpreter, jit

        for cls in (jit.JITFunction, interpreter.InterpretedFunction):
            self._wrap_run(cls)
        import torch.utils.cpp_extension as cpp_extension

        original_load_inline = cpp_extension.load_inline
        counter = self

        def counted_load_inline(*args, **kwargs):
            return _CountedExtension(original_load_inline(*args, **kwargs), counter)

        cpp_extension.load_inline = counted_load_inline

    def _wrap_run(self, cls) -> None:
        original_run = cls.run
        counter = self

        def run(self_, *args, **kwargs):
            if not kwargs.get("warmup", False):
                counter.launches[f"triton:{getattr(self_.fn, '__name__', 'kernel')}"] += 1
            return original_run(self_, *args, **kwargs)

        cls.run = run


class _CountedExtension:
    """Proxy over a load_inline module: each call of one of its functions is an own-kernel launch."""

    def __init__(self, module, counter: LaunchCounter):
        self._module, self._counter = module, counter

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self._counter.launches[f"ext:{name}"] += 1
            return attr(*args, **kwargs)

        return call


def _prepared_report(job_started: float) -> dict[str, float]:
    """What the standby's prepare() did ahead of this job, and how long it then idled (the part
    of its work that cost the job nothing)."""
    if not PREPARED:
        return {}
    report = {k: v for k, v in PREPARED.items() if k != "done_at"}
    return {**report, "prepared_idle_s": job_started - PREPARED["done_at"]}


def set_phase(job_dir: Path, phase: str) -> None:
    (job_dir / "phase").write_text(phase)


def seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def to_device(values: list, device: str) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def degenerate_output_warnings(outputs: list) -> list[str]:
    """A reference whose output is near zero or constant can be matched by a kernel that computes nothing."""
    warnings = []
    for index, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.numel() == 0:
            continue
        values = out.detach().double()
        if float(values.abs().max()) < 1e-6:
            warnings.append(f"output {index} of the reference is near zero (max |x| < 1e-6): zeros would pass elementwise checks")
        elif out.numel() > 1 and float(values.std()) == 0.0:
            warnings.append(f"output {index} of the reference is constant: a kernel could return it without computing")
    return warnings


def run_reference(job: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    device = job["device"]
    problem = import_source(Path(job["problem_path"]), "kernelloop_reference")
    seed_all(INIT_SEED)
    init_inputs = list(problem.get_init_inputs())
    model = problem.Model(*init_inputs).to(device)
    # Trial inputs from fresh seeds, then any extra shapes, then the set kept for after timing.
    trial_inputs = []
    for seed in job["seeds"]:
        seed_all(seed)
        trial_inputs.append(list(problem.get_inputs()))
    seed_all(job["seeds"][0])
    variants = [list(v) for v in problem.get_input_variants()] if hasattr(problem, "get_input_variants") else []
    input_sets = trial_inputs[:-1] + variants + trial_inputs[-1:]
    output_sets, ops = [], []
    with torch.no_grad():
        for index, inputs in enumerate(input_sets):
            recorder = OpRecorder()
            if index == 0:
                with recorder:
                    out = model(*to_device(inputs, device))
                ops = recorder.compute_ops()
            else:
                out = model(*to_device(inputs, device))
            synchronize(device)
            output_sets.append([o.detach().cpu() if isinstance(o, torch.Tensor) else o for o in flatten_outputs(out)])
    torch.save({"inputs": input_sets, "outputs": output_sets, "init_inputs": init_inputs}, job["out_path"])
    return {"ok": True, "ops": ops, "warnings": degenerate_output_warnings(output_sets[0]),
            "trials": len(input_sets)}


def poison(device: str, like: list) -> None:
    """Fill soon-to-be-reused allocator blocks with NaN so unwritten outputs show up.
    Effective with CUDA's caching allocator; on the CPU large blocks come back as fresh pages."""
    blocks = []
    for ref in like:
        if isinstance(ref, torch.Tensor):
            fill = float("nan") if ref.is_floating_point() else -7
            blocks.append(torch.full(ref.shape, fill, dtype=ref.dtype, device=device))
    del blocks


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def aliasing(outputs: list, inputs: list) -> str | None:
    spans = [storage_span(i) for i in inputs if isinstance(i, torch.Tensor) and i.untyped_storage().nbytes()]
    for index, out in enumerate(outputs):
        if isinstance(out, torch.Tensor) and out.untyped_storage().nbytes():
            lo, hi = storage_span(out)
            if any(lo < b_hi and b_lo < hi for b_lo, b_hi in spans):
                return f"aliases an input: output {index} shares memory with an input; return a new tensor"
    return None


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Raw bytes, so NaN inputs compare equal to themselves."""
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def mutated(inputs: list, pristine: list) -> str | None:
    for index, (now, before) in enumerate(zip(inputs, pristine)):
        if isinstance(now, torch.Tensor) and not torch.equal(_bits(now), _bits(before)):
            return f"writes to its inputs: input {index} changed during forward; kernels must leave inputs untouched"
    return None


def run_one(model, inputs_cpu: list, device: str, ref_outputs: list, reuse: list | None = None,
            costs: dict | None = None) -> tuple[list, str | None]:
    """One checked forward: device inputs, poisoned memory, input and alias checks.

    `reuse`: device tensors of an earlier call to copy the new values into, so a candidate that
    caches by data_ptr or id sees a pointer it knows holding values it hasn't seen. `costs`
    gets the forward's own seconds (JIT included) as "forward_s"."""
    if reuse is None:
        inputs = to_device([i.clone() if isinstance(i, torch.Tensor) else i for i in inputs_cpu], device)
    else:
        inputs = [old.copy_(new) if isinstance(old, torch.Tensor) else new for old, new in zip(reuse, inputs_cpu)]
    pristine = [i.clone() if isinstance(i, torch.Tensor) else i for i in inputs]
    poison(device, ref_outputs)
    forward_started = time.perf_counter()
    out = flatten_outputs(model(*inputs))
    synchronize(device)
    if costs is not None:
        costs["forward_s"] = time.perf_counter() - forward_started
    for index, o in enumerate(out):
        if type(o) is not torch.Tensor:
            return [], inputs, f"tensor subclass: output {index} is a {type(o).__name__}, not a plain torch.Tensor"
    problem = aliasing(out, inputs) or mutated(inputs, pristine)
    return [o.detach().cpu() for o in out], inputs, problem


def classify_exception(exc: BaseException) -> tuple[str, str]:
    text = error_line(exc).strip()[:400]
    if any(marker in text.lower() for marker in ("out of memory", "not enough memory", "allocate memory")):
        return "runtime_error", f"out of memory: {text}"
    # Triton front-end errors have their own types; MLIR pass failures surface as RuntimeError.
    if (type(exc).__name__ in ("CompilationError", "CompileTimeAssertionFailure")
            or "triton.compiler" in type(exc).__module__ or "PassManager::run failed" in text):
        return "compile_error", f"compile: Triton could not compile a kernel: {text}"
    return "runtime_error", f"raised {text}"


PREPARED: dict[str, float] = {}  # what prepare() did in this process, and when it finished


def prepare() -> None:
    """Run by the zygote's standby child before its job is known (see sandbox/zygote.py): the CUDA
    context and a cuBLAS handle (0.1-0.3 s in every fresh process), and whatever modules the
    zygote did not preload, get made while the sandbox is idle instead of while a job waits.
    Nothing to do without a visible GPU."""
    if not _GPU_WORKER or not torch.cuda.is_available():
        return
    if torch.cuda._is_in_bad_fork():  # the zygote touched CUDA: every job here would fail to use it
        print("kernelloop: the sandbox worker initialised CUDA before forking; jobs cannot use the GPU", file=sys.stderr)
        return
    steps = Stopwatch()
    ones = torch.ones(16, 16, device="cuda")
    torch.mm(ones, ones)
    torch.cuda.synchronize()
    steps.lap("prepare_context_s")
    missing = [name for name in _COMPILER_MODULES + _LAUNCH_COUNTER_MODULES if name not in sys.modules]
    for name in missing:
        importlib.import_module(name)
    if missing:
        steps.lap("prepare_imports_s")
    PREPARED.update(steps.laps, done_at=time.perf_counter())


def run_candidate(job: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    device = job["device"]
    steps = Stopwatch()  # where the child's setup goes, for the verifier's cost report
    counter = LaunchCounter()
    counter.install()
    steps.lap("hooks_s")
    try:
        candidate = import_source(Path(job["candidate_path"]), "kernelloop_candidate")
    except Exception as exc:  # import errors are the candidate's compile errors
        return {"status": "compile_error", "reason": f"compile: the candidate failed to import: {exc}".splitlines()[0]}
    if not hasattr(candidate, "ModelNew"):
        return {"status": "compile_error", "reason": "modelnew: the candidate defines no ModelNew"}
    steps.lap("import_s")
    # The reference's inputs and constructor args come from its file (memory-mapped): the
    # problem's code stays out of this process until timing needs the eager baseline.
    reference = torch.load(job["ref_path"], weights_only=True, mmap=True)
    steps.lap("load_s")
    if device.startswith("cuda"):
        torch.cuda.init()  # CUDA context creation lands in setup, not in the first call (at once if prepared)
        torch.cuda.synchronize()
        steps.lap("context_s")
    seed_all(INIT_SEED)
    try:
        model = candidate.ModelNew(*reference["init_inputs"]).to(device)
    except Exception as exc:
        return {"status": "compile_error",
                "reason": f"modelnew: ModelNew(*get_init_inputs()) failed: {error_line(exc)}"}
    input_sets, ref_sets = reference["inputs"], reference["outputs"]
    synchronize(device)
    steps.lap("model_s")
    try:
        with torch.no_grad():
            result = _check_candidate(model, input_sets, ref_sets, counter, job, job_dir)
        result.setdefault("overhead", {}).update(setup_s=steps.total(), **{f"setup_{k}": v for k, v in steps.laps.items()},
                                                 **_prepared_report(steps.started))
        return result
    except BaseException as exc:  # the candidate's failure is a verdict, never the harness's crash
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, SystemExit):
            return {"status": "runtime_error", "reason": f"exited: the candidate called sys.exit({exc.code})"}
        status, reason = classify_exception(exc)
        traceback.print_exc()
        return {"status": status, "reason": reason, "launches": dict(counter.launches)}


def _check_candidate(model, input_sets, ref_sets, counter: LaunchCounter, job: dict, job_dir: Path) -> dict[str, Any]:
    """Trials, then timing (GPU, only when the trials already look right), then the fresh-input check."""
    device = job["device"]
    costs: dict[str, float] = {}  # the candidate's own compile and run time, kept out of the verifier's fixed cost
    recorder = OpRecorder()
    outputs, first_inputs = [], None
    first_forward: dict[str, float] = {}  # the first call's forward alone (JIT included), beside moving data
    started = time.perf_counter()
    for index, inputs in enumerate(input_sets[:-1]):
        if index == 0:
            with recorder:
                out, first_inputs, found = run_one(model, inputs, device, ref_sets[index], costs=first_forward)
            set_phase(job_dir, "trials")
            costs["first_call_s"] = time.perf_counter() - started  # includes Triton's JIT compile
        else:
            out, _, found = run_one(model, inputs, device, ref_sets[index])
        if found:
            return {"status": "incorrect" if found.startswith("tensor subclass") else "rejected",
                    "reason": found, "launches": dict(counter.launches)}
        outputs.append(out)
    costs["trials_s"] = time.perf_counter() - started - costs["first_call_s"]
    timing = None
    gate_started = time.perf_counter()  # timing is spent on outputs that already look right
    timed = job.get("time_it") and device.startswith("cuda") and \
        all(compare_outputs(o, r, job.get("tolerance"), device).ok for o, r in zip(outputs, ref_sets))
    gate_s = time.perf_counter() - gate_started
    if timed:
        set_phase(job_dir, "timing")
        from kernelloop.tools.profile.measure import device_sets, measure  # GPU-only path, imported when used

        problem = import_source(Path(job["problem_path"]), "kernelloop_problem")  # the eager baseline
        timing_started = time.perf_counter()
        timed_sets = device_sets(input_sets[:-1], device)  # the fresh values stay unseen until after timing
        timing = measure(model, problem, timed_sets, device,
                         {**job, "init_seed": INIT_SEED, "own_kernel_names": sorted(counter.launches)})
        costs["timing_s"] = time.perf_counter() - timing_started
        # The fresh check writes new values into the buffers the timing loop called most.
        first_inputs = timed_sets[0]
    set_phase(job_dir, "fresh")
    fresh_started = time.perf_counter()
    fresh, _, found = run_one(model, input_sets[-1], device, ref_sets[-1], reuse=first_inputs)
    costs["trials_s"] += time.perf_counter() - fresh_started
    if found:
        return {"status": "rejected", "reason": found, "launches": dict(counter.launches)}
    save_started = time.perf_counter()
    torch.save({"trials": outputs, "fresh": fresh}, job_dir / "outputs.pt")
    return {"status": "ran", "launches": dict(counter.launches), "ops": recorder.compute_ops(),
            "timing": timing, "costs": costs, "overhead": {"save_s": time.perf_counter() - save_started, "gate_s": gate_s,
                                                          "first_forward_s": first_forward.get("forward_s", 0.0)}}


def run_baselines(job: dict[str, Any], job_dir: Path) -> dict[str, Any]:
    """Time eager, torch.compile and the problem's own baselines, no candidate (bench --baselines-only)."""
    from kernelloop.tools.profile.measure import measure_baselines

    problem = import_source(Path(job["problem_path"]), "kernelloop_problem")
    input_sets = []
    for seed in job["seeds"]:
        seed_all(seed)
        input_sets.append(list(problem.get_inputs()))
    set_phase(job_dir, "timing")
    with torch.no_grad():
        return {"status": "ran", "timing": measure_baselines(problem, input_sets, job["device"], {**job, "init_seed": INIT_SEED})}


JOBS = {"reference": run_reference, "candidate": run_candidate, "baselines": run_baselines}


def run_job(job: dict[str, Any]) -> int:
    """Entry point in the forked child; returns the exit code. Never raises."""
    job_dir = Path(job["job_dir"])
    set_phase(job_dir, "compile")
    try:
        gpu_fraction = (job.get("limits") or {}).get("gpu_memory_fraction")
        if gpu_fraction and job["device"].startswith("cuda"):  # before any candidate code can allocate
            torch.cuda.set_per_process_memory_fraction(float(gpu_fraction))
        result = JOBS[job["kind"]](job, job_dir)
    except SystemExit as exc:
        result = {"status": "runtime_error", "reason": f"exited: sys.exit({exc.code}) while loading"}
    except Exception as exc:
        traceback.print_exc()
        status, reason = classify_exception(exc)
        result = {"status": status, "reason": reason}
    sys.stdout.flush()
    sys.stderr.flush()
    result["written_at"] = time.time()  # the parent reports how long the process took to end after this
    (job_dir / "result.json").write_text(json.dumps(result, default=str))
    return 0
