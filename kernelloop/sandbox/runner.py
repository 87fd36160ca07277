"""Parent side of the sandbox: start a warm zygote, run jobs in forked children, enforce timeouts.

A job runs in a child of the zygote, in its own process group, with the scrubbed environment
the zygote was started with, its scratch dir as cwd, stdout/stderr captured to files and the
limits of isolation.child_limits. The parent kills the whole group when a phase overruns its
timeout; whatever the child does (hang, segfault, os._exit, OOM), the parent gets a JobOutcome
and carries on. Where bubblewrap works the zygote runs inside it (isolation.py): no network, a
read-only filesystem but for the work dir, its own pid namespace; job pids are then the
namespace's, so the zygote kills a job's group on the parent's word (`{"kill": PID}`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from kernelloop import bounded_json, progress
from kernelloop.sandbox import held_files
from kernelloop.sandbox.isolation import (
    INPUTS_DIR,
    ChildLimits,
    bubblewrap_argv,
    child_limits,
    choose_mode,
    hand_to,
    sandbox_mounts,
    sandbox_user,
    visible,
)
from kernelloop.sandbox.redact import redact, secret_looking, secrets
from kernelloop.sandbox.safe_io import JobDir, read_tail
from kernelloop.sandbox.zygote import JOB_WRITABLE_ENV, MAX_MESSAGE_BYTES

DEVICE_ENV = "KERNELLOOP_DEVICE"  # set for the zygote: the device its jobs run on
PER_JOB_CACHE_ENV = "KERNELLOOP_PER_JOB_CACHE"  # set for a worker whose jobs each get their own compile caches
PRELOAD_ENV = "KERNELLOOP_PRELOAD"  # passed through: 0 leaves the job module's preloads to each child
# Set for the zygote (comma-separated module names): what it imports before it says it is ready,
# and what it imports in the background once its first child is forked (for later jobs only).
PRELOAD_NOW_ENV = "KERNELLOOP_WORKER_PRELOAD"
PRELOAD_LATER_ENV = "KERNELLOOP_WORKER_PRELOAD_LATER"
# Variables a child may see; everything else (API keys, tokens, cloud credentials, the
# user's shell state) is dropped. Secret-looking names are dropped even if listed here.
ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                 "CC", "CXX", "TORCH_CUDA_ARCH_LIST", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
                 "VIRTUAL_ENV", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED",
                 "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS",
                 PRELOAD_ENV, "KERNELLOOP_PROFILE_JOBS")
OUTPUT_TAIL_BYTES = 4000
PHASE_POLL_S = 0.05
# A candidate's job dir: at most this many times its file-size limit, plus room for its compile
# caches, checked this often (JobSession._over_disk_budget).
DISK_BUDGET_FILES = 4
DISK_BUDGET_SLACK_BYTES = 2 << 30
DISK_BUDGET_ENTRIES = 200_000
DISK_CHECK_S = 0.5
# The sandbox worker's lines wrap what a job sent as a JSON string: escaped, up to six bytes a byte.
_WORKER_LINE_BYTES = 6 * MAX_MESSAGE_BYTES + 4096
KILL_WAIT_S = 30.0  # after a kill, how long the zygote has to report the exit before the sandbox goes


class SandboxError(RuntimeError):
    """The sandbox itself (not the candidate) failed: the zygote died or would not start."""


@dataclass
class JobOutcome:
    """What happened to one child: exit code (negative = signal), timeout, result, output tails."""

    exit_code: int | None
    timed_out: bool
    phase: str
    elapsed_s: float
    result: dict | None
    stdout_tail: str = ""
    stderr_tail: str = ""
    job_dir: Path | None = None
    notes: list[str] = field(default_factory=list)
    ended_at: float = 0.0  # wall clock (time.time) when the parent learnt the job ended
    box: dict = field(default_factory=dict)  # the containment that held for it (Zygote._containment)


def cache_env(cache_dir: Path) -> dict[str, str]:
    """Where compilers (Triton, torch extensions, inductor) and anything using HOME keep their files."""
    return {"HOME": str(cache_dir), "TRITON_CACHE_DIR": str(cache_dir / "triton"),
            "TORCH_EXTENSIONS_DIR": str(cache_dir / "torch_extensions"),
            "TORCHINDUCTOR_CACHE_DIR": str(cache_dir / "inductor"), "XDG_CACHE_HOME": str(cache_dir / "xdg")}


def scrubbed_env(device: str, cache_dir: Path, gpu_index: int | None = None, preload: Sequence[str] = (),
                 preload_later: Sequence[str] = (), bytecode_dir: Path | None = None,
                 bytecode_writes: bool = False, per_job_cache: bool = False) -> dict[str, str]:
    """The jobs' environment: an allowlist of the parent's (no secrets), and their caches. Bytecode
    is read from `bytecode_dir` where one is given (PYTHONPYCACHEPREFIX), and written there only
    with `bytecode_writes` (trusted workers); never written anywhere else."""
    env = {k: v for k, v in os.environ.items()
           if k in ENV_ALLOWLIST and not secret_looking(k)}
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    env.update(cache_env(cache_dir))
    env["PYTHONUNBUFFERED"] = "1"
    if bytecode_dir is not None:
        env["PYTHONPYCACHEPREFIX"] = str(bytecode_dir)
    if bytecode_dir is None or not bytecode_writes:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[DEVICE_ENV] = device  # the job module may preload what this device's jobs need
    if per_job_cache:  # each job compiles into an empty cache of its own: what it always builds, its standby may build ahead
        env[PER_JOB_CACHE_ENV] = "1"
    env[PRELOAD_NOW_ENV], env[PRELOAD_LATER_ENV] = ",".join(preload), ",".join(preload_later)
    if device == "cuda":  # is_available() by NVML: a zygote that asks stays fork-safe for CUDA
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton kernels run on the CPU, correctness only
        # One thread: the interpreter runs numpy per program, and BLAS threads fighting over
        # few cores made one matmul forward 3-5x slower.
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = child_visible_device(gpu_index)
    return env


def child_visible_device(gpu_index: int | None) -> str:
    """The CUDA_VISIBLE_DEVICES of a job on torch's cuda:`gpu_index` (None: 0) in this process: that
    one GPU. The parent's own CUDA_VISIBLE_DEVICES (a scheduler's, Ray's, a user's) renumbers its GPUs
    from 0, so index N is its N-th entry (an index, a UUID or a MIG id), never physical GPU N."""
    index = gpu_index or 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    ids = [part.strip() for part in visible.split(",") if part.strip()]
    if index >= len(ids):
        raise ValueError(f"cuda:{index} asked for, but CUDA_VISIBLE_DEVICES={visible!r} shows {len(ids)} GPU(s)")
    return ids[index]


class Zygote:
    """A warm process that has imported `job_module` (and so torch, triton) and forks a child per job.

    hide: directories the jobs must not see (the workspace with its checkpoint DB), where
    bubblewrap works. isolation: auto | bwrap | plain (None: $KERNELLOOP_SANDBOX, else auto).
    limits: the children's resource limits (None: from each run's timeouts). standby: fork and
    prepare each job's child ahead, while idle (zygote.py); off only to measure what it saves.
    cache_dir: the jobs' compile caches (Triton, inductor, extensions; default WORK_DIR/cache),
    which workers of one host may share. per_job_cache: each job gets its own caches in its job
    dir instead, so nothing one job compiles or writes there can reach the next (candidates).
    read_only: dirs the jobs may read but not write, where bubblewrap works.
    preload: modules the zygote imports before it is ready (every job of this worker needs them);
    preload_later: modules it imports in the background once its first child is forked, for later
    jobs only (the first job does not wait for them). wait: False returns at once, with the
    zygote still starting; the first use (or `wait_ready()`) waits for it, so several start together.
    bytecode_dir: where imports find compiled bytecode (PYTHONPYCACHEPREFIX) instead of compiling
    every module's source in every new worker; bytecode_writes: they keep what they compile there
    (only a trusted worker, in a dir no candidate can write: a planted .pyc would run in the
    trusted process); without it the dir is bound read-only where bubblewrap works.
    """

    def __init__(self, job_module: str, device: str, work_dir: Path, gpu_index: int | None = None,
                 hide: Sequence[Path] = (), isolation: str | None = None, limits: ChildLimits | None = None,
                 standby: bool = True, cache_dir: Path | None = None, read_only: Sequence[Path] = (),
                 per_job_cache: bool = False, preload: Sequence[str] = (), preload_later: Sequence[str] = (),
                 wait: bool = True, bytecode_dir: Path | None = None, bytecode_writes: bool = False):
        self.device = device
        self.per_job_cache = per_job_cache
        self.work_dir = Path(work_dir).resolve()
        self.cache_dir = Path(cache_dir).resolve() if cache_dir else self.work_dir / "cache"
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / INPUTS_DIR).mkdir(parents=True, exist_ok=True)
        # The bytecode dir: writable for the worker that keeps it, read-only for one that only reads it.
        keeps = [Path(bytecode_dir)] if bytecode_dir is not None and bytecode_writes else []
        reads = [Path(bytecode_dir)] if bytecode_dir is not None and not bytecode_writes else []
        writable, read_only = [self.cache_dir, *keeps], [*read_only, *reads]
        for path in [*keeps, *read_only]:  # a bind's source must exist before the sandbox starts
            Path(path).mkdir(parents=True, exist_ok=True)
        self.limits = limits
        self.mode, self.mode_note = choose_mode(isolation)
        self.mounts = (sandbox_mounts(self.work_dir, device, hide, writable=writable, read_only=read_only)
                       if self.mode == "bubblewrap" else [])
        # As root, the jobs' uid on the host is an unprivileged one, which must own what they write.
        # Only inside bubblewrap, whose mounts show that uid the Python install wherever it lies (a
        # root-only home too); a plain worker as root stays root, and says so (not isolated).
        self.user = sandbox_user() if self.mode == "bubblewrap" else None
        for path in writable:
            hand_to(path, self.user)
        # -P: no cwd on sys.path, and cwd is /: nothing a job could write is ever imported from.
        command = [sys.executable, "-P", "-m", "kernelloop.sandbox.zygote", job_module,
                   *([] if standby else ["--no-standby"]),
                   *([f"--drop-to={self.user[0]}:{self.user[1]}"] if self.user else [])]
        if self.mounts:
            command = bubblewrap_argv(self.mounts, Path("/")) + command
        self._log = open_log(self.work_dir / "zygote.log")
        self._started = time.perf_counter()
        env = scrubbed_env(device, self.cache_dir, gpu_index, preload, preload_later, bytecode_dir, bytecode_writes,
                           per_job_cache)
        # What every job of this worker may write beside its own job dir (confine.lock_down).
        env[JOB_WRITABLE_ENV] = "" if per_job_cache else os.pathsep.join(str(Path(p).resolve()) for p in writable)
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env, cwd="/",
            start_new_session=True,  # Ctrl-C in the terminal reaches us, not the zygote mid-job
        )
        self._buffer = b""
        self.start_s: float | None = None  # seconds from launch to ready, once ready
        self.import_s = 0.0
        if wait:
            self.wait_ready()

    def wait_ready(self) -> float:
        """Wait until the zygote has imported its modules; returns how long this call waited."""
        if self.start_s is not None:
            return 0.0
        waited = time.perf_counter()
        hello = self._read_message(timeout_s=300)
        if hello is None or not hello.get("ready"):
            self.start_s = -1.0  # never again: close() and alive() must not wait for a hello
            self.close()
            last = read_tail(self.work_dir / "zygote.log", 300).strip().splitlines()
            raise SandboxError(f"the sandbox worker did not start ({self.mode}"
                               f"{': ' + last[-1] if last else ''}); see {self.work_dir / 'zygote.log'}")
        self.start_s = time.perf_counter() - self._started
        self.import_s = float(hello.get("import_s", 0.0))
        return time.perf_counter() - waited

    @property
    def ready(self) -> bool:
        return self.start_s is not None and self.start_s >= 0

    @property
    def own_pid_namespace(self) -> bool:
        """Job pids are the sandbox's own (bubblewrap), not the host's: only the zygote may signal them."""
        return self.mode == "bubblewrap"

    @property
    def _stdin(self) -> IO[bytes]:
        """The zygote's stdin: a pipe, as Popen was asked for (stdin=PIPE), so never None."""
        if self.proc.stdin is None:
            raise RuntimeError("the sandbox worker has no stdin pipe")
        return self.proc.stdin

    @property
    def _stdout(self) -> IO[bytes]:
        """The zygote's stdout: a pipe, as Popen was asked for (stdout=PIPE), so never None."""
        if self.proc.stdout is None:
            raise RuntimeError("the sandbox worker has no stdout pipe")
        return self.proc.stdout

    def _read_message(self, timeout_s: float | None) -> dict | None:
        """Next JSON line from the zygote, or None on timeout or EOF."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with selectors.DefaultSelector() as selector:
            selector.register(self._stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if remaining == 0.0 or not selector.select(remaining):
                    return None
                chunk = os.read(self._stdout.fileno(), 65536)
                if not chunk:
                    return None
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:  # the worker's own line; what a job sent travels in it as a string, bounded again when read
            message = bounded_json.loads(line, "the sandbox worker's line", _WORKER_LINE_BYTES, max_depth=8)
        except bounded_json.JsonBoundError:
            message = None
        return message if isinstance(message, dict) else {}

    def _await_fork(self, timeout_s: float) -> dict | None:
        """The zygote's {"pid": N} for the job just sent. Lines before it are an earlier job's, come
        after that job's session stopped reading (an exit reported past KILL_WAIT_S, a line relayed
        as it died): that job is over, and they are dropped."""
        deadline = time.monotonic() + timeout_s
        while (message := self._read_message(max(0.0, deadline - time.monotonic()))) is not None:
            if "pid" in message:
                return message
        return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, job: dict, job_dir: Path, compile_timeout_s: float, run_timeout_s: float,
            phases: Sequence[str] = ()) -> JobOutcome:
        """Run one job in a fresh child to its end (a job that reports one result and exits; it may
        mark the first of `phases` itself)."""
        session = self.start(job, job_dir, compile_timeout_s, run_timeout_s, phases)
        while session.receive() is not None:
            pass
        return session.finish()

    def start(self, job: dict, job_dir: Path, compile_timeout_s: float, run_timeout_s: float,
              phases: Sequence[str] = (), file_size_bytes: int = 0, disk_budget: bool = False) -> JobSession:
        """Start one job in a fresh child and return the parent's side of it: messages both ways,
        forward-only phases (`phases`, after "compile"), the timeouts, and at the end its outcome.
        `file_size_bytes`: the largest file the job must be able to write, where that is over the
        default limit (a multi-GB output). `disk_budget`: that size is the job's exact limit, even
        under the default, and its job dir may hold at most DISK_BUDGET_FILES times it plus
        DISK_BUDGET_SLACK_BYTES (compile caches); past that the job is killed (a candidate's job)."""
        self.wait_ready()
        if not self.alive():
            raise SandboxError("the sandbox worker has exited")
        if self.mounts and self.work_dir not in Path(job_dir).resolve().parents:
            raise SandboxError(f"job dir {job_dir} is outside the sandbox's work dir {self.work_dir}")
        job_dir.mkdir(parents=True, exist_ok=True)
        hand_to(job_dir, self.user)
        held = JobDir(job_dir)  # opened before any job code runs: what the parent reads goes through it
        limits = self.limits or child_limits(compile_timeout_s, run_timeout_s)
        if file_size_bytes > limits.file_size_bytes or (disk_budget and file_size_bytes):
            limits = dataclasses.replace(limits, file_size_bytes=file_size_bytes)
        job = {**self._stage_inputs(job), "job_dir": str(job_dir), "limits": limits.as_job()}
        if self.per_job_cache:
            job["env"] = cache_env(job_dir / "cache")
        started = time.monotonic()
        try:
            self._send(job)
        except BrokenPipeError:
            raise SandboxError("the sandbox worker exited before the job started") from None
        forked = self._await_fork(timeout_s=60)
        if forked is None:  # its stdout closed or it hangs: give a dying zygote a moment to be seen dead
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=1)
        if forked is None and not self.alive():  # died as the job began: the job's doing, reported as its crash
            ended = self._outcome(None, False, "compile", started, held, ["the sandbox worker died as the job started"])
            held.close()
            return JobSession(self, None, held, started, compile_timeout_s, run_timeout_s, phases, ended=ended)
        if forked is None:
            held.close()
            raise SandboxError("the sandbox worker did not fork a child")
        session = JobSession(self, forked["pid"], held, started, compile_timeout_s, run_timeout_s, phases)
        session.box = self._containment(forked.get("box"))
        if disk_budget:
            session.disk_budget_bytes = DISK_BUDGET_FILES * limits.file_size_bytes + DISK_BUDGET_SLACK_BYTES
        session.kind = str(job.get("kind", "job"))
        progress.report(session.kind, session.phase)
        return session

    def _containment(self, box: object) -> dict:
        """The zygote's report of a job's box, with what only the parent knows: the sandbox mode
        and the job's uid on the host. Isolated = bubblewrap's read-only, hidden filesystem, and a
        box of its own for the job (confine.py) with nothing missing."""
        held = dict(box) if isinstance(box, dict) else {"isolated": False, "why": "the worker reported no box"}
        held["sandbox"] = self.mode
        held["host_uid"] = self.user[0] if self.user else os.geteuid()
        why = [str(held["why"])] if held.get("why") else []
        if self.mode != "bubblewrap":
            why.insert(0, "plain mode: no read-only filesystem or hidden workspace (bubblewrap)")
        held["host_gid"] = self.user[1] if self.user else os.getegid()
        if held["host_uid"] == 0:
            why.append("runs as root on the host")
        elif held["host_gid"] == 0:
            why.append("runs in group root on the host")
        held["isolated"] = not why
        if why:
            held["why"] = "; ".join(why)
        return held

    @staticmethod
    def _outcome(exit_code: int | None, timed_out: bool, phase: str, started: float, held: JobDir,
                 notes: list[str], result: dict | None = None) -> JobOutcome:
        known = secrets()  # once for both tails
        return JobOutcome(exit_code=exit_code, timed_out=timed_out, phase=phase, elapsed_s=time.monotonic() - started,
                          result=result, stdout_tail=redact(held.read_tail("stdout.txt", OUTPUT_TAIL_BYTES), known),
                          stderr_tail=redact(held.read_tail("stderr.txt", OUTPUT_TAIL_BYTES), known), job_dir=held.path,
                          notes=notes, ended_at=time.time())

    def _send(self, message: dict) -> None:
        self._stdin.write((json.dumps(message) + "\n").encode())
        self._stdin.flush()

    def _stage_inputs(self, job: dict) -> dict:
        """Files the job names (`*_path` keys) that the sandbox hides (a problem in the workspace,
        in /tmp or the home dir) are copied into the read-only inputs dir, named by content."""
        staged = dict(job)
        for key, value in job.items():
            if not (key.endswith("_path") and isinstance(value, str) and self.mounts and Path(value).is_file()):
                continue
            if visible(Path(value), self.mounts):
                continue
            data = Path(value).read_bytes()
            copy = self.work_dir / INPUTS_DIR / hashlib.sha256(data).hexdigest()[:16] / Path(value).name
            if not copy.is_file():
                copy.parent.mkdir(parents=True, exist_ok=True)
                tmp = copy.with_name(f".{copy.name}.{os.getpid()}.tmp")
                tmp.write_bytes(data)
                os.replace(tmp, copy)
            staged[key] = str(copy)
        return staged

    def _kill_group(self, pid: int) -> None:
        """SIGKILL a job's process group: from here with host pids; through the zygote inside a
        pid namespace (a dead zygote has taken the namespace, and the group, with it)."""
        if not self.own_pid_namespace:
            with contextlib.suppress(ProcessLookupError):  # already gone: nothing to kill
                os.killpg(pid, signal.SIGKILL)
        elif self.alive():
            try:
                self._send({"kill": pid})
            except BrokenPipeError:  # the zygote went meanwhile
                self._kill_sandbox()
        else:
            self._kill_sandbox()

    def _kill_sandbox(self) -> None:
        """End bubblewrap and everything in the sandbox (pid 1 of a namespace takes the rest with it)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self, wait: bool = True) -> None:
        """Stop the zygote (it ends its standby and exits once its stdin closes). wait=False only
        tells it to, so several stop at once; a later close() waits."""
        if self.proc.poll() is None and not self.ready:  # still importing (or failed): nothing of a job to wind down
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.poll() is None and not self._stdin.closed:
            self._stdin.close()
        if not wait:
            return
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


class JobSession:
    """One running job as the parent sees it.

    `receive()` returns the child's next message (a dict; phase marks are kept here, not
    returned), or None once the job has ended: it exited, or a phase overran its limit (then its
    process group is killed). Phases only move forward through "compile", then `phases`, in that
    order: the job may mark only the first move (its first call done, out of "compile"); the
    parent moves it on as it asks for more (`advance`), so a job can neither restart its clock
    nor jump to a phase with a longer limit. Only time
    the parent spends waiting on the child counts against a phase, and all of it together against
    the job's hard cap (compile + run limits). `finish()` ends the job and returns its outcome;
    the outcome's `result` is the last `{"result": ...}` the child sent."""

    def __init__(self, zygote: Zygote, pid: int | None, held: JobDir, started: float, compile_timeout_s: float,
                 run_timeout_s: float, phases: Sequence[str] = (), ended: JobOutcome | None = None):
        self.zygote, self.pid, self.dir, self.job_dir, self.started = zygote, pid, held, held.path, started
        self.compile_timeout_s, self.run_timeout_s = compile_timeout_s, run_timeout_s
        self.order = ["compile", *phases]
        self.phase, self.phase_waited_s, self.waited_s = "compile", 0.0, 0.0
        self.result: dict | None = None
        self.notes: list[str] = []
        self.exit_code: int | None = None
        self.timed_out = False
        self.outcome = ended
        self.kind = "job"  # the job's kind ('candidate', 'reference', ...), for progress reports
        self.box: dict = {}
        self.disk_budget_bytes: int | None = None  # what its job dir may hold (Zygote.start)
        self._disk_checked_at = 0.0
        self._host_pid: int | None = None  # the job's pid as the host sees it, found at the first disk check
        # A caller's own end (time.monotonic()), before any limit: a run's budget. Past it the job
        # is killed as at a limit, and `cut_at_deadline` says why.
        self.deadline: float | None = None
        self.cut_at_deadline = False
        # The first line past the parent's bounds (too long, nested too deep): the job was killed for it.
        self.refused: bounded_json.JsonBoundError | None = None

    @property
    def _job_pid(self) -> int:
        """The job's pid, to kill its group: only a session that ended as it began has none, and it is never killed."""
        if self.pid is None:
            raise RuntimeError("a job session with no pid was asked to kill its job")
        return self.pid

    @property
    def ended(self) -> bool:
        return self.outcome is not None or self.exit_code is not None or self.timed_out

    def _limit_left(self) -> float:
        limit = self.compile_timeout_s if self.phase == "compile" else self.run_timeout_s
        hard_cap = self.compile_timeout_s + self.run_timeout_s
        left = min(limit - self.phase_waited_s, hard_cap - self.waited_s)
        if self.deadline is not None and self.deadline - time.monotonic() < left:
            left = self.deadline - time.monotonic()
            self.cut_at_deadline = left <= 0
        return left

    def restart_clock(self) -> None:
        """For a trusted job that serves many requests (the reference job): each request gets the
        whole limit. Never called for a candidate's job, whose clock only runs forward."""
        self.phase_waited_s = self.waited_s = 0.0

    def send(self, message: dict) -> bool:
        """A message to the job; False when it has ended (nothing is sent then)."""
        if self.ended:
            return False
        try:
            self.zygote._send({"to_job": message})
        except BrokenPipeError:
            self.notes.append("the sandbox worker died while the job ran")
            self.exit_code = self.exit_code if self.exit_code is not None else -signal.SIGKILL
            return False
        return True

    def receive(self, timed: bool = False) -> dict | None:
        """The job's next message, or None once it has ended. `timed`: the parent's clock is running
        around this wait (the timing phase), so the disk budget's walk of the job dir (milliseconds)
        runs only while no message has come, every DISK_CHECK_S, never between a message's arrival
        and its return (it once added milliseconds to a back-to-back window of 21 calls)."""
        while not self.ended:
            left = self._limit_left()
            if left <= 0:
                self._time_out()
                return None
            waited = time.monotonic()
            message = self.zygote._read_message(timeout_s=min(left, DISK_CHECK_S if timed else PHASE_POLL_S * 20))
            over_budget = (not timed or message is None) and self._over_disk_budget()
            # The disk budget's walks are the parent's time on this job too: they count against its limits.
            spent = time.monotonic() - waited
            self.phase_waited_s += spent
            self.waited_s += spent
            if over_budget:
                continue
            if message is None:
                if not self.zygote.alive():  # the candidate killed its parent: end its group, report, restart later
                    self.zygote._kill_group(self._job_pid)
                    self.notes.append("the sandbox worker died while the job ran")
                    self.exit_code = -signal.SIGKILL
                continue
            if "exit" in message:
                self.exit_code = message["exit"]
                return None
            parsed = self._parse_job_line(message.get("msg"))
            if parsed is None:
                continue
            if "phase" in parsed:
                if self.phase == "compile" and len(self.order) > 1 and parsed["phase"] == self.order[1]:
                    self.advance(self.order[1])
            elif "result" in parsed:
                self.result = parsed["result"] if isinstance(parsed["result"], dict) else None
            else:
                return parsed
        return None

    def _over_disk_budget(self) -> bool:
        """Every half second: a job dir holding more than its budget ends the job (a job that fills
        the host's disk, file by file under the size limit, is killed within a second)."""
        if self.disk_budget_bytes is None or time.monotonic() - self._disk_checked_at < DISK_CHECK_S:
            return False
        self._disk_checked_at = time.monotonic()
        used = dir_usage(self.job_dir, DISK_BUDGET_ENTRIES)
        held = self._held_unlinked_bytes() if used is not None else 0
        if used is not None and held is not None and used + held <= self.disk_budget_bytes:
            return False
        self.notes.append(f"its job dir holds over {DISK_BUDGET_ENTRIES} entries" if used is None else
                          f"its processes hold over {held_files.MAX_ENTRIES} descriptors and mappings" if held is None
                          else f"its job dir grew past its disk budget of {self.disk_budget_bytes >> 20} MiB")
        self._kill_and_reap()
        return True

    def _held_unlinked_bytes(self) -> int | None:
        """What the job's processes hold in files they unlinked (held_files.py): no name shows them;
        None where they hold more descriptors and mappings than one walk reads."""
        if self._host_pid is None and self.pid is not None:
            self._host_pid = (held_files.host_pid(self.pid, self.zygote.proc.pid) if self.zygote.own_pid_namespace
                              else self.pid)
        if self._host_pid is None:
            return 0
        return held_files.unlinked_bytes(held_files.descendants(self._host_pid), os.fstat(self.dir.fd).st_dev)

    def advance(self, phase: str) -> None:
        """Move to a later phase (its limit starts now); an earlier or unknown one is ignored."""
        if phase in self.order and self.order.index(phase) > self.order.index(self.phase):
            self.phase, self.phase_waited_s = phase, 0.0
            progress.report(self.kind, phase)

    def _time_out(self) -> None:
        self.timed_out = True
        self._kill_and_reap()

    def _kill_and_reap(self) -> None:
        """Kill the job's group and wait for the zygote to report its exit; lines the job wrote
        before it died are dropped."""
        self.zygote._kill_group(self._job_pid)
        message = self.zygote._read_message(timeout_s=KILL_WAIT_S)
        while message is not None and "exit" not in message:
            message = self.zygote._read_message(timeout_s=KILL_WAIT_S)
        if message is None and self.zygote.own_pid_namespace:  # a zygote that can't kill: take the sandbox down
            self.zygote._kill_sandbox()
        self.exit_code = message["exit"] if message else None

    def _parse_job_line(self, line: object) -> dict | None:
        """`_parse_job_line`, where a line over the bounds ends the job with a note (its verdict's)."""
        try:
            return _parse_job_line(line)
        except bounded_json.JsonBoundError as exc:
            self.notes.append(f"the job sent a line the parent refused to read ({exc}); it was killed")
            self.refused = self.refused or exc
            self._kill_and_reap()
            return None

    def finish(self, wait_s: float = 0.0) -> JobOutcome:
        """End the job and return what happened: wait up to `wait_s` for its result (after the
        parent told it it is done), then kill what is left of it."""
        if self.outcome is not None:
            return self.outcome
        deadline = time.monotonic() + wait_s
        while not self.ended and self.result is None and (left := deadline - time.monotonic()) > 0:
            message = self.zygote._read_message(timeout_s=left)
            if message is None:
                break
            if "exit" in message:
                self.exit_code = message["exit"]
            else:
                parsed = self._parse_job_line(message.get("msg"))
                if parsed is not None and isinstance(parsed.get("result"), dict):
                    self.result = parsed["result"]
        if not self.ended:
            self._kill_and_reap()
        result = None if self.timed_out else self.result
        self.outcome = self.zygote._outcome(self.exit_code, self.timed_out, self.phase, self.started, self.dir,
                                            self.notes, result)
        self.outcome.box = self.box
        self.dir.close()
        return self.outcome


def _parse_job_line(line: object) -> dict | None:
    """A line the job sent, if it is a JSON object; anything else is dropped (the candidate shares
    the job's process and may write what it likes on the channel). One over the bounds (longer than
    a message may be, nested deeper than any the parent reads) raises JsonBoundError."""
    if not isinstance(line, str):
        return None
    try:
        parsed = bounded_json.loads(line, "a line the job sent", MAX_MESSAGE_BYTES)
    except bounded_json.JsonBoundError as exc:
        if exc.over_bounds:
            raise
        return None
    return parsed if isinstance(parsed, dict) else None


def dir_usage(path: Path, max_entries: int) -> int | None:
    """Bytes of disk under `path` (allocated blocks, links not followed), walked without recursion;
    None when it holds more than `max_entries` entries."""
    total, seen, stack = 0, 0, [str(path)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    return None
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
    return total


def open_log(path: Path) -> IO[bytes]:
    """The zygote's log, opened for appending without following a link planted in its place."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise SandboxError(f"{path} can't be opened as the worker's log ({exc.strerror}): the workspace was "
                           "tampered with; remove it") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SandboxError(f"{path} is not a regular file: the workspace was tampered with; remove it")
    return os.fdopen(fd, "ab")


UNCLEAN = ".unclean"  # in a jobs root: the job dirs the parent could not remove, one name a line


def new_job_dir(root: Path, prefix: str) -> Path:
    """A fresh job dir under `root`; refused (SandboxError, one line) while `root` holds a job dir an
    earlier job left that the parent still can't remove: nothing a job left carries to the next."""
    root.mkdir(parents=True, exist_ok=True)
    _clean_leftovers(root)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=root))


def _clean_leftovers(root: Path) -> None:
    marker = root / UNCLEAN
    if not marker.is_file():
        return
    with contextlib.suppress(OSError):
        names = [name for name in marker.read_text(errors="replace").splitlines()[:1000] if name.strip()]
        left = [name for name in dict.fromkeys(names)
                if "/" not in name and name not in (".", "..") and not remove_job_dir(root / name, mark=False)]
        if not left:
            marker.unlink()
            return
        raise SandboxError(f"{root / left[0]}: a job dir the sandbox could not remove (an earlier job's); "
                           f"remove it (and {marker}) before running here again")


def remove_job_dir(job_dir: Path, mark: bool = True) -> bool:
    """Remove a job's dir whatever the job left in it, and say whether it is gone. Modes first: a job
    running as the parent's user (or as nobody, when the parent is root and drops to it) can leave
    dirs of mode 000 or 0111, which `rm` can't list or empty; `chmod -R u+rwx` (coreutils: links
    not followed, any depth) gives them back to their owner. Then coreutils' rm walks a tree of any
    depth without recursion (shutil.rmtree recurses per level, and a job's 5000-deep chain of dirs
    made it raise RecursionError out of verify()); never across a mount. A dir still there is
    written into its root's UNCLEAN list (`mark`), and new_job_dir refuses that root until it is gone."""
    for command in (["chmod", "-R", "u+rwx", "--", str(job_dir)], ["rm", "-rf", "--one-file-system", "--", str(job_dir)]):
        if not os.path.lexists(job_dir):
            break
        if command[0] == "chmod" and os.path.islink(job_dir):  # chmod follows a link it is named; rm removes it
            continue
        try:
            subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=120, check=False)
        except (OSError, subprocess.SubprocessError):
            pass
    if os.path.lexists(job_dir):
        with contextlib.suppress(Exception):  # noqa: BLE001 - cleaning up must never cost the verdict
            shutil.rmtree(job_dir, ignore_errors=True)
    gone = not os.path.lexists(job_dir)
    if not gone and mark:
        with contextlib.suppress(OSError), open(job_dir.parent / UNCLEAN, "a") as handle:
            handle.write(job_dir.name + "\n")
    return gone
