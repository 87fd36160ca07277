"""The compile stage: candidates' load_inline builds run ahead of the GPU, on every CPU core.

Today's cost of a CUDA candidate is nearly all nvcc (50-80 s), paid inside its GPU job while the
GPU waits. Here each candidate that calls load_inline first gets a build job (build_job.py): a
sandboxed CPU job with the candidates' containment (the same worker spec, no GPU visible), one of
N at once (N = cores by default), each in a warm worker of its own. What it built is admitted
into the store (build_store.py), keyed by the candidate's source and the toolchain; its run job
then loads it from there, read-only, without rebuilding. The pool (pool.py) sends candidates
through this stage and hands them to the GPU workers as they are ready, so the GPU times one
candidate while the next ones compile.

- A load_inline call that fails to build is a compile_error verdict here: no GPU slot is taken.
  A build job that runs past the compile limit is a timeout verdict (the run job would build the
  same sources under the same limit).
- Anything else that goes wrong (the import needs a GPU, the job crashed, its claim does not
  hold) only means no product: the run job judges the candidate, building as it always did.
- Triton is not compiled here: it JITs at the first launch, for the launching GPU and the
  launch's argument types (build_job.py).

The toolchain key holds what makes a build differ: torch and its CUDA, Python, the C++ compiler's
and nvcc's versions, the CUDA arch list (on a GPU pool, the arch list load_inline would pick for
the pool's GPUs, handed to the build job since it sees none) and the C++ ABI.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelloop.errors import error_line
from kernelloop.problem import Candidate
from kernelloop.records import Code, Status, Verdict
from kernelloop.sandbox import redact
from kernelloop.sandbox.runner import JobOutcome, SandboxError, Zygote, new_job_dir, remove_job_dir
from kernelloop.tools.verify import workers
from kernelloop.tools.verify.build_store import BuildStore, Product

STAGE_VERSION = 1  # bump when what a build job makes changes: old products are never served again
RUN_SLACK_S = 10.0  # a build job has no run phase; this is its grace past the compile limit
BUILD_FILE_BYTES = 512 << 20  # the largest file a build may write (objects, libraries)
FEEDBACK_LINES = 25
BUILD_NICE = 10  # on a GPU pool, build jobs yield the CPU to the job being timed
BUILD_PRELOAD = ("torch.utils.cpp_extension",)  # what every build job imports; never the dispatch modes


def wants_build(candidate: Candidate) -> bool:
    """Whether a candidate goes through the stage: it names load_inline (one that reaches it in a
    way this misses builds in its run job, as before)."""
    return "load_inline" in candidate.source


def _version(program: str, line: int) -> str:
    """One line of `program --version` (the C++ compiler's first, nvcc's last: its build), or 'none'."""
    try:
        done = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "none"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[line] if lines else "none"


def cuda_arch_list(gpu_indices: list[int]) -> str | None:
    """The arch list load_inline would pick with these GPUs visible (cpp_extension._get_cuda_arch_flags:
    each GPU's capability, capped at the newest torch was built for, sorted, the last with +PTX), or
    $TORCH_CUDA_ARCH_LIST where set. None without CUDA."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if not gpu_indices or not torch.cuda.is_available():
        return None
    built = [int("".join(ch for ch in arch.split("_")[1] if ch.isdigit())) for arch in torch.cuda.get_arch_list()
             if arch.startswith("sm_")]
    newest = max((sm // 10, sm % 10) for sm in built) if built else (99, 9)
    arches = sorted({"{}.{}".format(*min(newest, torch.cuda.get_device_capability(i))) for i in gpu_indices})
    arches[-1] += "+PTX"
    return ";".join(arches)


@functools.lru_cache(maxsize=8)
def toolchain(arch_list: str | None) -> str:
    """What a product's key holds of the machine (see the module's docstring), as one JSON line."""
    from torch.utils.cpp_extension import CUDA_HOME, get_cxx_compiler

    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else None
    facts = {"stage": STAGE_VERSION, "torch": torch.__version__, "cuda": torch.version.cuda,
             "python": sys.version.split()[0], "cxx": _version(get_cxx_compiler(), 0),
             "nvcc": _version(nvcc, -1) if nvcc and os.path.exists(nvcc) else "none",
             "arch": arch_list, "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI)}
    return json.dumps(facts, sort_keys=True)


def product_key(source: str, chain: str) -> str:
    return hashlib.sha256(f"{chain}\0{source}".encode()).hexdigest()


@dataclass
class Built:
    """What the stage did for one candidate: a product to hand over, a verdict (the candidate fails
    here), or neither (its run job builds, as without the stage; `note` says why)."""

    product: Product | None = None
    verdict: Verdict | None = None
    note: str = ""
    reused: bool = False  # found in the store, built for an earlier verification of the same source
    wait_s: float = 0.0  # queued for a build slot
    build_s: float = 0.0  # the build job, start to end


@dataclass(frozen=True)
class StageCounts:
    waiting: int  # candidates queued for a build slot
    building: int  # build jobs running


class BuildStage:
    """N sandboxed build workers for one pool. Thread-safe: `build` blocks for a free slot."""

    def __init__(self, spec: workers.WorkerSpec, workspace: Path, slots: int, arch_list: str | None,
                 compile_timeout_s: float = 180.0, keep_jobs: bool = False):
        """`spec`: the candidates' worker spec (the box the build jobs get, on the CPU); `slots`: build
        jobs at once; `arch_list`: TORCH_CUDA_ARCH_LIST for the builds (cuda_arch_list), None on the CPU."""
        if slots < 1:
            raise ValueError("a build stage needs at least one slot")
        # The candidates' worker spec on the CPU: same box, no GPU, nothing of the store visible.
        self.specs = [dataclasses.replace(spec, device="cpu", gpu_index=None, read_only=(), preload=BUILD_PRELOAD,
                                          work_dir=workspace / "verifier" / f"build{i}") for i in range(slots)]
        self.store = BuildStore(workers.builds_dir(workspace))
        self.arch_list = arch_list
        self.device = spec.device  # what the verdicts say: the pool's device, though the builds ran on the CPU
        self.compile_timeout_s = compile_timeout_s
        self.keep_jobs = keep_jobs
        self._zygotes: list[Zygote | None] = [None] * slots
        self._idle = list(range(slots))
        self._cond = threading.Condition()
        self._waiting = self._building = 0
        self._closed = False

    @property
    def slots(self) -> int:
        return len(self.specs)

    def counts(self) -> StageCounts:
        with self._cond:
            return StageCounts(self._waiting, self._building)

    def key(self, candidate: Candidate) -> str:
        return product_key(candidate.source, toolchain(self.arch_list))

    def build(self, candidate: Candidate) -> Built:
        """The candidate's product (built now, or kept from an earlier build of its source), or its
        compile_error/timeout verdict, or neither. Never raises for a bad candidate."""
        key = self.key(candidate)
        kept = self.store.get(key)
        if kept is not None and self.store.check(kept) is None:
            return Built(product=kept, reused=True)
        if kept is not None:
            self.store.discard(key)
        queued = time.perf_counter()
        with self._cond:
            self._waiting += 1
            while not self._idle and not self._closed:
                self._cond.wait()
            self._waiting -= 1
            if self._closed:
                return Built(note="the build stage is closed")
            slot = self._idle.pop(0)
            self._building += 1
            if all(z is None for z in self._zygotes):  # the first build starts every slot's worker at once
                self._start_all()
        wait_s = time.perf_counter() - queued
        try:
            built = self._build_in(slot, candidate, key)
        finally:
            with self._cond:
                self._building -= 1
                self._idle.append(slot)
                self._cond.notify()
        built.wait_s = wait_s
        return built

    def hand_over(self, built: Built) -> tuple[dict | None, str | None]:
        """Just before the run job starts: the product's job field if it still hashes as admitted,
        else (None, why), having dropped it: the run job then builds its own."""
        if built.product is None:
            return None, None
        found = self.store.check(built.product)
        if found is None:
            return built.product.job_field(), None
        self.store.discard(built.product.key)
        return None, f"its build product was refused ({found}); its job built the extension itself"

    def start(self, wait: bool = False) -> None:
        """Start every slot's build worker now, all at once (a GPU pool does, as it opens); `wait`
        for them to be ready. A worker that fails to start is met, and reported, by its first build."""
        with self._cond:
            if all(z is None for z in self._zygotes):
                self._start_all()
            zygotes = list(self._zygotes)
        for zygote in zygotes if wait else ():
            if zygote is not None:
                try:
                    zygote.wait_ready()
                except SandboxError:
                    pass

    def _start_all(self) -> None:
        for index, spec in enumerate(self.specs):
            try:
                self._zygotes[index] = spec.start(wait=False)
            except SandboxError:  # met again, and reported, by the slot's build
                self._zygotes[index] = None

    def _zygote(self, slot: int) -> Zygote:
        zygote = self._zygotes[slot]
        if zygote is not None and not zygote.alive():  # a build job took its worker down
            zygote.close()
            zygote = None
        if zygote is None:
            zygote = self._zygotes[slot] = self.specs[slot].start(wait=False)
        zygote.wait_ready()
        return zygote

    def _build_in(self, slot: int, candidate: Candidate, key: str) -> Built:
        started = time.perf_counter()
        try:
            zygote = self._zygote(slot)
        except SandboxError as exc:
            return Built(note=f"no build worker ({error_line(exc)})")
        job_dir = new_job_dir(zygote.work_dir / "jobs", "build-")
        (job_dir / "candidate.py").write_text(candidate.source)
        job = {"kind": "build", "device": "cpu", "candidate_path": str(job_dir / "candidate.py"),
               "build_env": {"TORCH_CUDA_ARCH_LIST": self.arch_list} if self.arch_list else {},
               "nice": BUILD_NICE if self.device == "cuda" else 0}
        try:
            session = zygote.start(job, job_dir, self.compile_timeout_s, RUN_SLACK_S,
                                   file_size_bytes=BUILD_FILE_BYTES, disk_budget=True)
            while session.receive() is not None:
                pass
            outcome = session.finish()
            built = self._judge(outcome, key, job_dir, zygote.mode)
        except SandboxError as exc:
            built = Built(note=f"the build worker failed ({error_line(exc)})")
        finally:
            if not self.keep_jobs:
                remove_job_dir(job_dir)
        built.build_s = time.perf_counter() - started
        return built

    def _judge(self, outcome: JobOutcome, key: str, job_dir: Path, mode: str) -> Built:
        result = outcome.result if isinstance(outcome.result, dict) else {}
        if outcome.timed_out:
            return Built(verdict=self._verdict(
                Status.timeout, Code.timed_out, f"timed out after {self.compile_timeout_s:g}s while building its "
                "extensions ahead of the GPU (killed with its process group)", outcome, mode))
        status = result.get("status")
        if status == "compile_error" and isinstance(result.get("reason"), str):
            return Built(verdict=self._verdict(Status.compile_error, Code.compile_failed, result["reason"][:500],
                                               outcome, mode))
        if status != "built":
            why = result.get("reason") if isinstance(result.get("reason"), str) else f"exit code {outcome.exit_code}"
            return Built(note=f"nothing built ahead ({str(why)[:200]})")
        if not result.get("calls"):
            return Built(note="no load_inline call ran as it was imported")
        admitted = self.store.admit(key, job_dir, result.get("calls"), toolchain(self.arch_list))
        if isinstance(admitted, str):
            return Built(note=f"its build was not admitted: {admitted}")
        return Built(product=admitted)

    def _verdict(self, status: Status, code: Code, reason: str, outcome: JobOutcome, mode: str) -> Verdict:
        secrets = redact.secrets()
        reason = redact.redact(reason, secrets)
        stderr = "\n".join(outcome.stderr_tail.strip().splitlines()[-FEEDBACK_LINES:])
        verdict = Verdict(status=status, reason=reason, code=code, device=self.device, isolation=mode,
                          feedback=reason + (f"\n\nstderr (end):\n{stderr}" if stderr else ""),
                          stdout_tail=outcome.stdout_tail, stderr_tail=outcome.stderr_tail, containment=outcome.box)
        if not outcome.box.get("isolated"):
            verdict.warnings.append(f"not isolated: {outcome.box.get('why', 'no report of its box')}")
        verdict.cost_s = {"build_s": outcome.elapsed_s}
        return verdict

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            zygotes, self._zygotes = self._zygotes, [None] * self.slots
        for zygote in zygotes:
            if zygote is not None:
                zygote.close(wait=False)
        for zygote in zygotes:
            if zygote is not None:
                zygote.close()


def clear_builds(workspace: Path) -> None:
    """Drop every kept product of a workspace (tests, benchmarks that measure a cold stage)."""
    shutil.rmtree(workers.builds_dir(workspace), ignore_errors=True)
