"""The Verifier's sandbox workers, as specs: which dirs, caches and preloads each gets.

Three roles: the candidates' worker; the trusted worker, for the reference jobs of the user's own
problems; and the problems' worker, for the reference jobs of problems from outside (an MCP or
LangChain caller's, a directory bench was pointed at: problem_meta.py). That one runs code nobody
vouched for, so it gets what a candidate's worker gets of the trusted cache: its bytecode
read-only and compile caches of each job's own, never a file a later trusted job or this process
would load; its work dir (reference outputs) is its own, as hidden from candidates as the trusted one.

No torch here, so the CLI can start both workers before its own process imports torch
(`prestart`): the parent's import, the trusted worker's and the candidates' worker's then run at
once. The Verifier makes its workers from the same specs (`take` hands it a prestarted one that
matches exactly, else it starts one), so a prestarted worker is the one it would have made.

Preloads by role, so the first verification never waits for what only later ones use:
  both workers         torch._dynamo, before they are ready: every job enters a dispatch mode (the op
                       recorder) and the trusted one runs the problem on the meta device, and torch
                       imports torch._dynamo the first time either happens (TorchDispatchMode.__enter__
                       is wrapped in torch._disable_dynamo). In each job's child that cost 1.0-1.5 s on
                       a 2-core CPU and 4.4-5.8 s on an H100 node, whose torch has no bytecode cache
                       (benchmarks/cold_verify.py --profile-jobs); in the worker it is paid once, while
                       the parent imports
  candidates' worker   the launch counter's modules, before it is ready (every candidate job needs
                       them); never the compiler (a candidate's job does not compile baselines)
  trusted worker       on a GPU worker that times, the compiler in the background once its first job
                       (this problem's reference) is forked, for the reference jobs of later problems.
                       The first reference job imports the compiler itself, asked ahead while the
                       candidate compiles (`warm_up`). Where bytecode is kept, the launch counter's
                       modules too, in the background: the candidates' worker can't write their
                       bytecode, and compiled them from source in every run

Bytecode: jobs never write .pyc files. Where torch was installed without them, the trusted worker
keeps what it compiles in the persistent trusted cache (only there: no candidate can write it), and
the candidates' worker reads it, read-only: a second process then skips recompiling torch's sources
(trusted_cache.py, "Bytecode"; the CLI's own process uses it too). The first time, spare cores
fill it ahead of both workers' imports (precompile.py).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kernelloop.sandbox.isolation import choose_mode
from kernelloop.sandbox.runner import Zygote
from kernelloop.tools.verify import precompile, trusted_cache

CANDIDATE_MODULE = "kernelloop.tools.verify.harness"  # the candidate's child
TRUSTED_MODULE = "kernelloop.tools.verify.trusted_child"  # reference jobs and baselines: never the harness
# The same names as child.LAUNCH_COUNTER_MODULES and COMPILER_MODULES (child.py imports torch).
LAUNCH_COUNTER_MODULES = ("torch.utils.cpp_extension", "triton.runtime.interpreter")
COMPILER_MODULES = ("torch._dynamo", "torch._inductor.compile_fx")
DISPATCH_MODULES = ("torch._dynamo",)  # what the first dispatch mode or meta-device run imports


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker is made from; two equal specs make the same worker."""

    device: str
    work_dir: Path
    gpu_index: int | None
    hide: tuple[Path, ...]
    standby: bool
    cache_dir: Path | None
    per_job_cache: bool
    preload: tuple[str, ...] = ()
    preload_later: tuple[str, ...] = ()
    bytecode_dir: Path | None = None
    bytecode_writes: bool = False
    module: str = TRUSTED_MODULE  # what its forked children run (sandbox/zygote.py)
    read_only: tuple[Path, ...] = ()  # dirs its jobs may read, never write (the build products)

    def start(self, wait: bool = True) -> Zygote:
        if self.bytecode_writes:  # the first time, the spare cores compile ahead of this worker's imports
            precompile.start(self.bytecode_dir)
        return Zygote(self.module, self.device, self.work_dir, self.gpu_index, hide=list(self.hide), standby=self.standby,
                      cache_dir=self.cache_dir, per_job_cache=self.per_job_cache, preload=self.preload,
                      preload_later=self.preload_later, wait=wait, bytecode_dir=self.bytecode_dir,
                      bytecode_writes=self.bytecode_writes, read_only=self.read_only)


def builds_dir(workspace: Path) -> Path:
    """Where a workspace's build products are kept (build_store.py): only the parent writes there."""
    return workspace / "verifier" / "builds"


@dataclass
class Layout:
    """Where one Verifier's files go, and its two workers' specs."""

    root: Path
    trusted_root: Path
    trusted_cache_dir: Path
    cache_root: Path | None  # the persistent trusted cache (None: off)
    cache_note: str
    candidate: WorkerSpec = field(init=False)
    trusted: WorkerSpec = field(init=False)
    problems: WorkerSpec = field(init=False)  # reference jobs of problems from outside


def layout(device: str, workspace: Path, gpu_index: int | None, standby: bool, time_it: bool,
           isolation: str | None = None, lane: int = 0) -> Layout:
    """`device` is 'cpu' or 'cuda' (resolved), `workspace` resolved. `lane`: which of several
    Verifiers on one device (LocalPool's workers_per_device); each has dirs of its own."""
    name = f"{device}{'' if gpu_index is None else gpu_index}{f'-w{lane}' if lane else ''}"
    root = workspace / "verifier" / name
    # The trusted job's files (reference outputs among them) live beside, never inside, the
    # candidates' work dir: where bubblewrap runs, the candidates' sandbox can't see them.
    trusted_root = workspace / "verifier" / f"{name}-trusted"
    mode, _ = choose_mode(isolation)
    cache_root, note = trusted_cache.trusted_cache_root(mode, root)
    # Compile caches: each candidate job has its own (nothing one writes reaches the next); the
    # trusted jobs use one the candidates can't see: the persistent trusted cache where it is on,
    # else one per workspace (hidden from the candidates with the workspace, where bubblewrap runs).
    trusted_cache_dir = (cache_root / f"compile-{device}" if cache_root is not None
                         else workspace / "verifier" / f"cache-{device}-trusted")
    made = Layout(root, trusted_root, trusted_cache_dir, cache_root, note)
    preloading = os.environ.get("KERNELLOOP_PRELOAD", "1") != "0"
    preload = (*DISPATCH_MODULES, *LAUNCH_COUNTER_MODULES) if preloading else ()
    hide = (workspace,) + ((cache_root,) if cache_root is not None else ())
    if cache_root is not None:
        cache_root.mkdir(parents=True, exist_ok=True)  # a dir to hide must exist before the sandbox starts
    # Bytecode of torch and the rest, compiled once by the trusted worker, kept in the trusted cache.
    bytecode = trusted_cache.kept_bytecode_dir(cache_root)
    # The compile stage's products (build_stage.py): read-only for candidates, hidden from the rest.
    builds = builds_dir(workspace)
    builds.mkdir(parents=True, exist_ok=True)
    made.candidate = WorkerSpec(device, root, gpu_index, hide, standby, None, True, preload=preload,
                                bytecode_dir=bytecode, module=CANDIDATE_MODULE, read_only=(builds,))
    later = tuple(m for m in COMPILER_MODULES if m not in DISPATCH_MODULES) if device == "cuda" and time_it else ()
    if bytecode is not None:
        # Only the trusted worker writes bytecode: it imports the candidates' worker's own preloads
        # too (in the background), so that worker finds them compiled next time, not from source.
        later += tuple(m for m in LAUNCH_COUNTER_MODULES if m not in later)
    made.trusted = WorkerSpec(device, trusted_root, gpu_index, (workspace,), standby, trusted_cache_dir, False,
                              preload=DISPATCH_MODULES if preloading else (), preload_later=later,
                              bytecode_dir=bytecode, bytecode_writes=True)
    compiler = tuple(m for m in later if m in COMPILER_MODULES)
    made.problems = WorkerSpec(device, workspace / "verifier" / f"{name}-problems", gpu_index, hide, standby, None,
                               True, preload=DISPATCH_MODULES if preloading else (), preload_later=compiler,
                               bytecode_dir=bytecode)
    return made


_started: dict[WorkerSpec, Zygote] = {}
_lock = threading.Lock()


def prestart(device: str, workspace: Path, gpu_index: int | None = None, standby: bool = True,
             time_it: bool = True) -> None:
    """Start a Verifier's two workers now, without waiting for them; the Verifier made later with
    the same options takes them. This process then imports from the bytecode they keep, where they
    keep any (trusted_cache.use_kept_bytecode; the CLI took it earlier). Anything that fails here is
    left for the Verifier to meet."""
    try:
        made = layout(device, workspace, gpu_index, standby, time_it)
        for spec in (made.trusted, made.candidate):
            with _lock:
                if spec not in _started:
                    _started[spec] = spec.start(wait=False)
    except Exception:  # noqa: BLE001 - the Verifier starts its own and reports what is wrong
        return
    trusted_cache.use_kept_bytecode(made.trusted.bytecode_dir)


def take(spec: WorkerSpec, wait: bool = True) -> Zygote:
    """The prestarted worker of `spec`, else a new one."""
    with _lock:
        zygote = _started.pop(spec, None)
    if zygote is not None and zygote.alive():
        if wait:
            zygote.wait_ready()
        return zygote
    if zygote is not None:
        zygote.close()
    return spec.start(wait=wait)


def discard() -> None:
    """Close prestarted workers no Verifier took."""
    with _lock:
        left = list(_started.values())
        _started.clear()
    for zygote in left:
        zygote.close()
