"""Verifier workers behind one interface, used by solve, bench and the MCP server alike.

- LocalPool: one Verifier per local GPU (or one on the CPU). The default; multi-GPU on one
  host needs nothing else.
- RayPool: one GPU actor per GPU of a Ray cluster, each holding a Verifier; the static checks
  run as Ray CPU tasks beside them, so a candidate that does not parse or breaks a rule never
  queues for a GPU. (The Triton compile itself happens where the kernel runs: Triton JITs for
  the GPU it launches on, inside that actor's sandbox.) Ray is an optional extra, imported
  only when a RayPool is made.

`pool.verify(candidate, problem)` is thread-safe: it waits for an idle worker, preferring one
that has seen this problem (references are shared on disk by the workers of a workspace; the
one that saw it has them loaded already), so many solve threads or bench workers can share one pool.

A LocalPool sends a candidate that calls load_inline through its compile stage first
(build_stage.py: N sandboxed CPU build jobs at once, N = cores by default), then to a device
worker, whose job loads what was built instead of building it. So as many callers as
`parallel_callers` keep both stages busy: the GPU times one candidate while the next ones compile,
and a build that fails is a compile_error without a GPU slot. `queues()` says how many wait where.

This module, like the verifier it holds, needs only torch: no agent-side package.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch

from kernelloop.config.workspace import workspace_dir
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Verdict
from kernelloop.sandbox.isolation import GPU_MEMORY_FRACTION_ENV, MODE_ENV, IsolationError, choose_mode
from kernelloop.sandbox.runner import PRELOAD_ENV
from kernelloop.tools.verify.build_stage import BuildStage, Built, cuda_arch_list, wants_build
from kernelloop.tools.verify.verifier import Verifier, VerifierOptions, precheck, split_device

if TYPE_CHECKING:
    from typing_extensions import Unpack

RAY_HINT = "install the optional extra: pip install 'kernelloop[ray]' (ray>=2.30,<3)"
AFFINITY_PROBLEMS = 64  # problems remembered per worker when choosing one that has the reference cached


class PoolError(ValueError):
    """A pool that can't be made as asked (unknown device, no GPU, no Ray, no cluster). One line."""


@dataclass
class WorkerStats:
    """What one worker has done since the pool opened."""

    slot: str  # 'cpu', 'cuda:N' (local) or 'ray:N' (a Ray GPU actor)
    served: int = 0  # verify and time_baselines calls run on it (pre-checked rejections never reach one)
    busy_s: float = 0.0  # wall time spent serving them, s
    node: str | None = None  # Ray actors: the id of the Ray node the actor runs on, once it has started; local: None


@dataclass(frozen=True)
class QueueCounts:
    """Where a pool's candidates are now (for a progress display); a snapshot, counts of candidates."""

    compile_waiting: int = 0  # queued for a build slot of the compile stage
    compiling: int = 0  # build jobs running
    device_waiting: int = 0  # built (or needing no build), queued for a device worker
    device_busy: int = 0  # being verified on a device worker


W = TypeVar("W")


class _Workers(Generic[W]):
    """Idle/busy bookkeeping: borrow a worker for one job, preferring one that has seen the problem."""

    def __init__(self, workers: Sequence[W], slots: Sequence[str]):
        self.workers, self.slots = list(workers), list(slots)
        self.stats = [WorkerStats(slot) for slot in slots]
        self._idle = list(range(len(self.workers)))  # front: idle the longest
        self._seen: list[list[str]] = [[] for _ in self.workers]
        self._cond = threading.Condition()
        self._closed = False
        self.waiting = 0  # callers waiting for an idle worker

    def busy(self) -> int:
        with self._cond:
            return len(self.workers) - len(self._idle)

    @contextmanager
    def borrow(self, key: str) -> Iterator[W]:
        with self._cond:
            self.waiting += 1
            while not self._idle and not self._closed:
                self._cond.wait()
            self.waiting -= 1
            if self._closed:
                raise PoolError("the verifier pool is closed")
            index = next((i for i in self._idle if key in self._seen[i]), self._idle[0])
            self._idle.remove(index)
        started = time.perf_counter()
        try:
            yield self.workers[index]
        finally:
            with self._cond:
                seen = self._seen[index]
                if key in seen:
                    seen.remove(key)
                seen.append(key)
                del seen[:-AFFINITY_PROBLEMS]
                self.stats[index].served += 1
                self.stats[index].busy_s += time.perf_counter() - started
                self._idle.append(index)
                self._cond.notify()

    def close(self) -> list[W]:
        """Refuse new borrows; returns the workers to close."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        return self.workers


class VerifierPool(ABC):
    """Verifier workers behind one interface. Thread-safe; close() (or `with`) stops the workers."""

    device: str  # what the workers verify on: 'cpu' or 'cuda'
    shared: bool = False  # several workers per GPU (correctness only): nothing is timed on it
    _workers: _Workers
    _stage: BuildStage | None = None  # the compile stage (local pools), None where off

    @property
    def slots(self) -> list[str]:
        """One label per worker ('cpu', 'cuda:N', 'ray:N'): as many parallel callers as keep it busy."""
        return list(self._workers.slots)

    @property
    def size(self) -> int:
        return len(self._workers.slots)

    @property
    def parallel_callers(self) -> int:
        """How many callers of verify at once keep every stage busy: the device workers, and the
        compile stage's build slots ahead of them."""
        return self.size + (self._stage.slots if self._stage is not None else 0)

    def stats(self) -> list[WorkerStats]:
        return [replace(s) for s in self._workers.stats]

    def queues(self) -> QueueCounts:
        stage = self._stage.counts() if self._stage is not None else None
        return QueueCounts(compile_waiting=stage.waiting if stage else 0, compiling=stage.building if stage else 0,
                           device_waiting=self._workers.waiting, device_busy=self._workers.busy())

    def verify(self, candidate: Candidate, problem: Problem, time_left_s: float | None = None) -> Verdict:
        """Judge one candidate: its build in the compile stage (where it has one), then the first
        idle worker; blocks until each is free. Never raises for a bad candidate. `time_left_s`:
        the caller's budget from now (a run's), the waits for a build and a worker included; its
        device job is cut there (Verifier.verify)."""
        deadline = None if time_left_s is None else time.monotonic() + time_left_s
        early = self._precheck(candidate)
        if early is not None:
            return early
        built = self._stage.build(candidate) if self._stage is not None and wants_build(candidate) else None
        if built is not None and built.verdict is not None:
            return built.verdict
        with self._workers.borrow(problem.sha256) as worker:
            prebuilt, refused = self._stage.hand_over(built) if self._stage is not None and built else (None, None)
            left = None if deadline is None else deadline - time.monotonic()
            verdict = self._verify_on(worker, candidate, problem, prebuilt, left)
        return _with_build(verdict, built, refused) if built is not None else verdict

    def time_baselines(self, problem: Problem) -> dict[str, Any]:
        """Verifier.time_baselines on an idle worker (GPU only): {"timings": {name: TimingStats}, ...}."""
        if self.device != "cuda":
            raise PoolError("timing baselines needs a CUDA GPU (--device cuda)")
        if self.shared:
            raise PoolError("timing baselines needs its GPU alone: this pool shares each GPU among workers")
        with self._workers.borrow(problem.sha256) as worker:
            return self._time_baselines_on(worker, problem)

    @abstractmethod
    def _precheck(self, candidate: Candidate) -> Verdict | None: ...

    @abstractmethod
    def _verify_on(self, worker: Any, candidate: Candidate, problem: Problem, prebuilt: dict | None,
                   time_left_s: float | None) -> Verdict:
        ...

    @abstractmethod
    def _time_baselines_on(self, worker: Any, problem: Problem) -> dict[str, Any]: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _sandbox_mode() -> str:
    try:
        return choose_mode(None)[0]
    except IsolationError:  # bubblewrap asked for and missing: each verify says so
        return "none"


def _with_build(verdict: Verdict, built: Built, refused: str | None) -> Verdict:
    """The compile stage's share of a verdict: its costs, and a product refused at hand-over."""
    verdict.cost_s = {**verdict.cost_s, "build_wait_s": built.wait_s, "build_s": built.build_s,
                      "build_reused": float(built.reused)}
    notes = [f"compile stage: {note}" for note in (built.note, refused) if note]
    verdict.warnings = [*verdict.warnings, *notes]
    return verdict


# --------------------------------------------------------------------------- local GPUs


def local_devices(device: str = "auto") -> list[str]:
    """'auto' -> every GPU ('cuda:0', ...) or ['cpu']; 'cuda' -> every GPU; 'cuda:N' and 'cpu' as given."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cpu" or (device == "auto" and count == 0):
        return ["cpu"]
    if device in ("auto", "cuda"):
        if count == 0:
            raise PoolError("--device cuda asked for, but torch sees no CUDA GPU here")
        return [f"cuda:{i}" for i in range(count)]
    if device.startswith("cuda:") and device[5:].isdigit():
        if int(device[5:]) >= count:
            raise PoolError(f"--device {device}: torch sees {count} CUDA GPU(s) here")
        return [device]
    raise PoolError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")


def check_sharing(device: str, workers_per_device: int, time_it: bool) -> None:
    """Several workers may share a GPU only when none of them times: a PoolError otherwise."""
    if workers_per_device < 1:
        raise PoolError(f"workers per device must be at least 1, got {workers_per_device}")
    if workers_per_device > 1 and time_it and device != "cpu":
        raise PoolError(f"{workers_per_device} workers per GPU would time candidates side by side: timing needs "
                        "its GPU alone; share a GPU only for correctness (--no-timing)")


class LocalPool(VerifierPool):
    """One Verifier per device in `devices` ('cpu' or 'cuda:N'), each with its own warm sandbox worker.

    workers_per_device: Verifiers per device, each with dirs and sandbox workers of its own (a lane);
    more than one only for correctness (time_it=False) on a GPU: a timed candidate has its GPU alone,
    or its speedup would measure its neighbours. On the CPU, timing is never done, so lanes are free.
    start_now: start every device's sandbox workers as the pool opens, all at once (default: on GPUs;
    on the CPU, where one worker serves, they start with the first verify as before).
    compile_workers: build jobs at once in the compile stage (build_stage.py); None: one per core,
    0: no compile stage (every candidate builds in its own device job, as before).
    """

    def __init__(self, devices: Sequence[str], workspace: str | Path | None = None, start_now: bool | None = None,
                 workers_per_device: int = 1, compile_workers: int | None = None,
                 **verifier_options: Unpack[VerifierOptions]):
        kinds = {split_device(d)[0] for d in devices}
        if not devices or len(kinds) != 1 or not kinds <= {"cpu", "cuda"} or len(set(devices)) != len(devices):
            raise PoolError(f"a local pool needs distinct devices of one kind ('cpu' or 'cuda:N'), got {list(devices)}")
        self.device = kinds.pop()
        check_sharing(self.device, workers_per_device, verifier_options.get("time_it", True))
        self.shared = workers_per_device > 1
        self.static_checks = verifier_options.get("static_checks", True)
        space = workspace_dir(workspace)
        slots = [d for d in devices for _ in range(workers_per_device)]
        lanes = [lane for _ in devices for lane in range(workers_per_device)]
        workers = [Verifier(device=self.device, gpu_index=split_device(d)[1], workspace=space, lane=lane,
                            **verifier_options) for d, lane in zip(slots, lanes)]
        self._workers = _Workers(workers, slots)
        builders = len(os.sched_getaffinity(0)) if compile_workers is None else compile_workers
        if builders < 0:
            raise PoolError(f"compile_workers must be 0 or more, got {builders}")
        gpus = [i for i in (split_device(d)[1] for d in devices) if i is not None]
        # Only where the candidates' sandbox can be kept from writing the store (bubblewrap), as for the trusted cache.
        self.stage_note = "" if builders else "compile stage off (compile_workers=0)"
        if builders and _sandbox_mode() != "bubblewrap":
            builders, self.stage_note = 0, "compile stage off: the sandbox is plain, so a candidate could write the build store"
        if builders:
            self._stage = BuildStage(workers[0].layout.candidate, space, builders, cuda_arch_list(gpus),
                                     compile_timeout_s=workers[0].compile_timeout_s,
                                     keep_jobs=verifier_options.get("keep_jobs", False))
        if (self.device == "cuda") if start_now is None else start_now:
            self._start_all(workers)
            if self._stage is not None and self.device == "cuda":  # on the CPU, with the first build
                self._stage.start()

    @staticmethod
    def _start_all(workers: list[Verifier]) -> None:
        # Every device's sandbox workers start now, all at once, waiting for none: their start (imports,
        # CUDA context) runs beside the caller's own set-up and the other devices', not inside the first
        # verify on each device. A worker that fails to start is met, and reported, by its first verify.
        for worker in workers:
            try:
                worker.start_workers()
            except Exception:  # noqa: BLE001 - the first verify on it starts it again and says what is wrong
                pass

    def _precheck(self, candidate: Candidate) -> Verdict | None:
        return precheck(candidate, self.device, self.static_checks)

    def _verify_on(self, worker: Any, candidate: Candidate, problem: Problem, prebuilt: dict | None,
                   time_left_s: float | None) -> Verdict:
        return worker.verify(candidate, problem, prebuilt, time_left_s)

    def _time_baselines_on(self, worker: Any, problem: Problem) -> dict[str, Any]:
        return worker.time_baselines(problem)

    def close(self) -> None:
        """Every worker closed at once (each waits a few seconds at most for its sandbox workers), so
        closing a pool of many workers (Ctrl-C on a bench) takes as long as its slowest, not their sum."""
        if self._stage is not None:
            self._stage.close()
        closing = [threading.Thread(target=worker.close, daemon=True) for worker in self._workers.close()]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join()


# --------------------------------------------------------------------------- Ray


def _import_ray():
    try:
        import ray
    except ImportError:
        raise PoolError(f"--ray needs Ray, which is not installed: {RAY_HINT}") from None
    return ray


class _VerifierActor:
    """Lives in a Ray worker: one Verifier on the GPU Ray gave this actor (or on the CPU)."""

    def __init__(self, device: str, workspace: str, index: int, options: VerifierOptions):
        # Ray sets CUDA_VISIBLE_DEVICES to this actor's one GPU, which is cuda:0 here; the sandbox
        # gives each job that entry of it (sandbox/runner.child_visible_device).
        gpu_index = 0 if device == "cuda" else None
        self.root = Path(workspace) / "ray" / f"{socket.gethostname()}-{index}"
        self.verifier = Verifier(device=device, gpu_index=gpu_index, workspace=self.root, **options)

    def _problem(self, name: str, filename: str, source: str, sha256: str, trusted: bool) -> Problem:
        """The problem written here from its source: the driver's path may not exist on this node.
        A problem from outside stays one here too: never imported in this actor."""
        path = self.root / "problems" / sha256[:16] / filename
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source)
        return Problem(path=path.resolve(), source=source, name=name, trusted=trusted)

    def verify(self, candidate_source: str, name: str, filename: str, source: str, sha256: str,
               trusted: bool = True, time_left_s: float | None = None) -> Verdict:
        return self.verifier.verify(Candidate(source=candidate_source),
                                    self._problem(name, filename, source, sha256, trusted), time_left_s=time_left_s)

    def time_baselines(self, name: str, filename: str, source: str, sha256: str, trusted: bool = True) -> dict[str, Any]:
        return self.verifier.time_baselines(self._problem(name, filename, source, sha256, trusted))

    def close(self) -> None:
        self.verifier.close()

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def _problem_args(problem: Problem) -> tuple[str, str, str, str, bool]:
    return problem.name, problem.path.name, problem.source, problem.sha256, problem.trusted


RAY_CONNECT_TIMEOUT_S = 5.0


def _check_reachable(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """An address nothing answers at fails here in seconds: ray.init would retry, printing, for minutes."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "auto")
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise PoolError(f"--ray {address}: not an address; use auto, local, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise PoolError(f"--ray {address}: nothing answers there within {timeout_s:g} s ({exc.strerror or exc}); "
                        "start the cluster (`ray start --head`) or fix the address") from None


class RayPool(VerifierPool):
    """One Verifier actor per GPU of a Ray cluster (or `cpu_workers` CPU actors), static checks as CPU tasks.

    address: 'auto' (a running cluster, as `ray start` left it), 'local' (start one here), or
    'ray://HOST:PORT' / 'HOST:PORT'. Ignored when Ray is already initialized in this process.
    device: 'auto' (GPU actors when the cluster has GPUs, else CPU actors), 'cuda' or 'cpu'.
    workspace: each actor works under WORKSPACE/ray/<host>-<n>; the path must be writable on every node.
    verify_on: the device the actors' Verifiers use when it differs from where they were placed;
        tests place actors on declared GPUs of a CPU machine and verify on its CPU.
    """

    def __init__(self, address: str = "auto", device: str = "auto", *, workspace: str | Path | None = None,
                 cpu_workers: int = 1, verify_on: str | None = None, **verifier_options: Unpack[VerifierOptions]):
        _check_reachable(address)
        ray = _import_ray()
        self._ray = ray
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            try:
                if address == "local":
                    ray.init(address="local", logging_level="ERROR", include_dashboard=False)
                else:
                    ray.init(address=address, logging_level="ERROR")
            except ConnectionError as exc:
                raise PoolError(f"--ray {address}: no Ray cluster to connect to ({str(exc).splitlines()[0]}); "
                                f"start one with `ray start --head` or use --ray local") from None
        try:
            self._start_actors(device, workspace, cpu_workers, verify_on, verifier_options)
        except BaseException:
            self._shutdown_ray()
            raise

    def _start_actors(self, device: str, workspace: str | Path | None, cpu_workers: int, verify_on: str | None,
                      options: VerifierOptions) -> None:
        ray = self._ray
        gpus = int(ray.cluster_resources().get("GPU", 0))
        placed = "cuda" if device == "auto" and gpus else "cpu" if device == "auto" else device
        if placed not in ("cpu", "cuda"):
            raise PoolError(f"unknown device {device!r} for a Ray pool: use auto, cpu or cuda")
        if placed == "cuda" and gpus == 0:
            raise PoolError("--device cuda with --ray: the Ray cluster has no GPU resources")
        if verify_on not in (None, "cpu", placed):
            raise PoolError(f"verify_on={verify_on!r}: actors placed on {placed} can verify on {placed} or the CPU")
        self.device = verify_on or placed
        self.static_checks = options.get("static_checks", True)
        root = str(workspace_dir(workspace).resolve())
        actor_class = ray.remote(_VerifierActor)
        # An actor has its node's environment (as `ray start` found it there), not this one's: the
        # sandbox settings given here go with it, or KERNELLOOP_SANDBOX=bwrap on the driver would
        # quietly run plain processes on a node without bubblewrap (a local Verifier refuses).
        env = {name: os.environ[name] for name in (MODE_ENV, GPU_MEMORY_FRACTION_ENV, PRELOAD_ENV) if os.environ.get(name)}
        actor_env: dict[str, Any] = {"runtime_env": {"env_vars": env}} if env else {}
        if placed == "cuda":
            # num_cpus=0: a GPU actor is placed by its GPU; the CPUs stay free for the check tasks.
            actors = [actor_class.options(num_gpus=1, num_cpus=0, **actor_env).remote(self.device, root, i, options)
                      for i in range(gpus)]
            slots = [f"ray:{i}" for i in range(gpus)] if self.device == "cuda" else ["cpu"] * gpus
            self._check_task = ray.remote(num_cpus=1)(precheck)
        else:
            if cpu_workers < 1:
                raise PoolError("cpu_workers must be at least 1")
            actors = [actor_class.options(num_cpus=1, **actor_env).remote(self.device, root, i, options)
                      for i in range(cpu_workers)]
            slots = ["cpu"] * cpu_workers
            self._check_task = None  # the CPU actors hold the CPUs: checks run in the caller instead
        self._workers = _Workers(actors, slots)
        # Where each actor landed, asked now and read when it has answered: an actor still waiting
        # for its GPU holds up neither the start nor the other actors.
        self._node_refs = [actor.node_id.remote() for actor in actors]

    def _record_nodes(self) -> None:
        ready, _ = self._ray.wait(self._node_refs, num_returns=len(self._node_refs), timeout=0)
        for stats, ref in zip(self._workers.stats, self._node_refs):
            if stats.node is None and ref in ready:
                try:
                    stats.node = self._ray.get(ref)
                except self._ray.exceptions.RayError:  # an actor that died starting: it ran nowhere
                    pass

    def stats(self) -> list[WorkerStats]:
        if not self._workers._closed:  # after close(), as close() recorded them (Ray may be shut down)
            self._record_nodes()
        return super().stats()

    def _precheck(self, candidate: Candidate) -> Verdict | None:
        if self._check_task is None:
            return precheck(candidate, self.device, self.static_checks)
        return self._ray.get(self._check_task.remote(candidate, self.device, self.static_checks))

    def _verify_on(self, worker: Any, candidate: Candidate, problem: Problem, prebuilt: dict | None,
                   time_left_s: float | None) -> Verdict:
        # No compile stage on Ray: a product would have to be on the GPU actor's node.
        return self._ray.get(worker.verify.remote(candidate.source, *_problem_args(problem), time_left_s=time_left_s))

    def _time_baselines_on(self, worker: Any, problem: Problem) -> dict[str, Any]:
        return self._ray.get(worker.time_baselines.remote(*_problem_args(problem)))

    def close(self) -> None:
        actors = self._workers.close()
        # Let each actor stop its sandbox worker; a dead or hung actor is killed all the same.
        self._ray.wait([actor.close.remote() for actor in actors], num_returns=len(actors), timeout=30)
        self._record_nodes()
        for actor in actors:
            self._ray.kill(actor)
        self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()


# --------------------------------------------------------------------------- one entry point


def make_pool(device: str = "auto", ray: str | None = None, *, workspace: str | Path | None = None,
              workers_per_device: int = 1, compile_workers: int | None = None,
              **verifier_options: Unpack[VerifierOptions]) -> VerifierPool:
    """The pool for `--device DEVICE [--ray ADDRESS]`: local GPUs (or the CPU) unless `ray` names a cluster.
    workers_per_device > 1 (local only) needs time_it=False on a GPU (LocalPool).

    verifier_options go to every Verifier (strict, time_it, compile_timeout_s, run_timeout_s, ...).
    compile_workers: the local pool's compile stage (LocalPool); a Ray pool has none.
    """
    if ray:
        if workers_per_device != 1:
            raise PoolError("--workers-per-gpu is for local GPUs; a Ray pool has one actor per GPU")
        return RayPool(ray, device, workspace=workspace, **verifier_options)
    return LocalPool(local_devices(device), workspace=workspace, workers_per_device=workers_per_device,
                     compile_workers=compile_workers, **verifier_options)
