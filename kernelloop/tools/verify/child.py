"""What every verifier job's process shares, the trusted job's (trusted_child.py) and the
candidate's (harness.py): the worker's preloads, the standby's preparation, the entry point
`serve`, and the classifier of exceptions. Each worker imports only its own job module, so the
trusted worker never loads the candidate's harness.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch
import triton  # noqa: F401  (preloaded so each fork starts warm)

from kernelloop.errors import error_line
from kernelloop.records import STATUS_OF, Code
from kernelloop.sandbox.channel import Channel
from kernelloop.sandbox.runner import DEVICE_ENV, PER_JOB_CACHE_ENV, PRELOAD_NOW_ENV
from kernelloop.tools.profile.stopwatch import Stopwatch

# Modules jobs need, which the Verifier has the zygote import once rather than each forked child
# (sandbox/zygote.py: $KERNELLOOP_WORKER_PRELOAD before it is ready, ..._LATER in the background):
# the launch counter's (every candidate job, about 0.3 s) and, on GPU workers that time, the
# compiler the torch.compile baseline uses (seconds: the trusted worker only, and in the
# background, so the first verification never waits for it). On GPU workers importing them asks
# torch.cuda.is_available(), which would initialise CUDA there and leave the forks unable to use
# it, unless it asks NVML instead: the runner sets PYTORCH_NVML_BASED_CUDA_CHECK=1 for them.
# KERNELLOOP_PRELOAD=0 leaves the imports to each child (GPU workers: to the standby's prepare()).
LAUNCH_COUNTER_MODULES = ("torch.utils.cpp_extension", "triton.runtime.interpreter")
COMPILER_MODULES = ("torch._dynamo", "torch._inductor.compile_fx")
_GPU_WORKER = os.environ.get(DEVICE_ENV) == "cuda"
if torch.cuda.is_initialized():  # a fork of this process could not use CUDA
    raise RuntimeError("CUDA was initialised while the sandbox worker imported its modules")


def classify_exception(exc: BaseException) -> tuple[Code, str]:
    """(code, one-line reason) of an exception the candidate's code raised; its status is STATUS_OF[code]."""
    text = error_line(exc).strip()[:400]
    if any(marker in text.lower() for marker in ("out of memory", "not enough memory", "allocate memory")):
        return Code.out_of_memory, f"out of memory: {text}"
    # Seen on the H100 once the child no longer shared the zygote's pipes: an allocation too large
    # for the GPU reached the caching allocator's out-of-memory report, whose NVML query then failed.
    if "CUDACachingAllocator" in text and "nvmlInit" in text:
        return Code.out_of_memory, f"out of memory (the allocator's report of it failed: {text[:200]})"
    # Triton front-end errors have their own types; MLIR pass failures surface as RuntimeError.
    if (type(exc).__name__ in ("CompilationError", "CompileTimeAssertionFailure")
            or "triton.compiler" in type(exc).__module__ or "PassManager::run failed" in text):
        return Code.compile_failed, f"compile: Triton could not compile a kernel: {text}"
    return Code.raised, f"raised {text}"


PREPARED: dict[str, float] = {}  # what prepare() did in this process, and when it finished
PRELOADED: dict[str, float] = {}  # what preload() did in the zygote, inherited by every fork


def preload() -> None:
    """Run once by a GPU zygote beside its preload imports, before it is ready (sandbox/zygote.py):
    the hash of Triton's own library that keys its caches (`triton_key`, computed once per process:
    0.42 s of a candidate's first launch on an H200 node), so every forked job inherits it. Only a
    value in memory: a job can't change the zygote's. No CUDA."""
    if not _GPU_WORKER or os.environ.get("TRITON_INTERPRET") == "1":
        return
    from triton.runtime.cache import triton_key

    steps = Stopwatch()
    triton_key()
    steps.lap("preload_triton_key_s")
    PRELOADED.update(steps.laps)


def _load_triton_driver(steps: Stopwatch) -> None:
    """Build and load Triton's CUDA driver helpers (cuda_utils: 0.36 s of gcc in every fresh process)
    in this process, and compile the kernel that digests timed outputs (kept_outputs.py: every timed
    job's first digest compiled it while the job waited), from a private temporary dir deleted once
    they are loaded. Its digests are commitments the parent checks with its own torch ops, so a
    kernel the candidate tampers with can only make them fail.

    Per process, never in the zygote: a job can open its own mapping of the library for writing
    (/proc/self/map_files, seen in bubblewrap on an H200 node), and a mapping the zygote made would be
    the same file in every later job (tests/fixtures/cheats/rewrite_triton_driver.py zeroed it, and
    the next candidate crashed). Here the file is this process's alone."""
    import shutil
    import tempfile

    from kernelloop.tools.verify.kept_outputs import warm_digest

    build = tempfile.mkdtemp(prefix="kernelloop-driver-")
    saved = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = build
    try:
        triton.runtime.driver.active.utils  # noqa: B018 - builds and loads the driver helpers
        steps.lap("prepare_driver_s")
        warm_digest("cuda")  # compiled and loaded: the job's first digest finds it in memory
        steps.lap("prepare_digest_s")
    except Exception as exc:  # noqa: BLE001 - no driver here after all: the job meets it as before
        print(f"kernelloop: Triton's driver was not loaded ahead: {error_line(exc)}", file=sys.stderr)
    finally:
        if saved is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = saved
        shutil.rmtree(build, ignore_errors=True)


def prepare() -> None:
    """Run by the zygote's standby child before its job is known (see sandbox/zygote.py): the CUDA
    context and a cuBLAS handle (0.1-0.3 s in every fresh process), Triton's driver helpers, and
    whatever modules the zygote did not preload, get made while the sandbox is idle instead of while
    a job waits. Nothing to do without a visible GPU."""
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
    # The candidates' worker: each job's Triton cache starts empty, so every job would build the
    # helpers on its first launch. A trusted job reads them from its kept cache, and a reference
    # job never launches Triton: it does not wait for them.
    if os.environ.get(PER_JOB_CACHE_ENV) == "1" and os.environ.get("TRITON_INTERPRET") != "1":
        _load_triton_driver(steps)
    wanted = [name for name in os.environ.get(PRELOAD_NOW_ENV, "").split(",") if name]
    missing = [name for name in wanted if name not in sys.modules]
    for name in missing:
        importlib.import_module(name)
    if missing:
        steps.lap("prepare_imports_s")
    PREPARED.update(steps.laps, done_at=time.perf_counter())


def _profiled(run, job: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """The job, under cProfile where $KERNELLOOP_PROFILE_JOBS names a directory: a developer's view of
    where a job's time goes (benchmarks/cold_verify.py --profile-jobs). Never read by a verdict."""
    where = os.environ.get("KERNELLOOP_PROFILE_JOBS")
    if not where:
        return run(job, channel)
    import cProfile

    profiler = cProfile.Profile()
    try:
        return profiler.runcall(run, job, channel)
    finally:
        with contextlib.suppress(OSError):  # a sandbox that can't write there loses the profile, not the job
            profiler.dump_stats(os.path.join(where, f"{job['kind']}-{os.getpid()}.prof"))



def serve(job: dict[str, Any], jobs: Mapping[str, Callable[[dict[str, Any], Channel], dict[str, Any]]]) -> int:
    """A worker's entry point in the forked child: runs `jobs[job["kind"]]` and reports its result on
    the job's channel; returns the exit code. Never raises."""
    channel = Channel.from_job(job)
    try:
        gpu_fraction = (job.get("limits") or {}).get("gpu_memory_fraction")
        if gpu_fraction and job["device"].startswith("cuda"):  # before any candidate code can allocate
            torch.cuda.set_per_process_memory_fraction(float(gpu_fraction))
        result = _profiled(jobs[job["kind"]], job, channel)
    except SystemExit as exc:
        result = {"status": "runtime_error", "code": Code.exited.value, "reason": f"exited: sys.exit({exc.code}) while loading"}
    except Exception as exc:
        traceback.print_exc()
        code, reason = classify_exception(exc)
        result = {"status": STATUS_OF[code].value, "code": code.value, "reason": reason}
    sys.stdout.flush()
    sys.stderr.flush()
    result["written_at"] = time.time()  # the parent reports how long the process took to end after this
    try:
        channel.result(result)
    except BrokenPipeError:  # nobody is listening any more
        return 0
    return 0
