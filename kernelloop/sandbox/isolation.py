"""How far the sandbox can shut a job in: bubblewrap around the zygote where it works, resource
limits on every child either way.

The zygote forks its children without exec, so bubblewrap can't wrap each child: it wraps the
zygote, and every child inherits the zygote's namespaces and mounts. In `bubblewrap` mode the
zygote (so every job) runs with

    no network              --unshare-net (loopback only)
    no view of other pids   --unshare-pid: the orchestrator's /proc/PID/environ (the API key)
                            and every other process of the user are out of sight
    a read-only filesystem  --ro-bind / /, except the verifier's work dir (job dirs, caches)
    hidden directories      fresh tmpfs over the user's home, /tmp, /run and the dirs the
                            caller names (the workspace: checkpoint DB, run dirs); the Python
                            install and the package are bound back read-only where they live there

In `plain` mode (bubblewrap missing, or no user namespaces for it) none of that is possible for
an unprivileged process; the static rules, the scrubbed environment and the limits below are
what stands. `KERNELLOOP_SANDBOX` picks: auto (default), bwrap (fail if unusable), plain.

Limits on every child, both modes: CPU time (a backstop for a child whose parent died), size of
any one file it writes, no core dumps, and (set in the job, applied by the harness) a cap on the
share of GPU memory it may allocate. Address space stays a per-job field (CPU jobs only).
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

Mode = Literal["bubblewrap", "plain"]
MODE_ENV = "KERNELLOOP_SANDBOX"
GPU_MEMORY_FRACTION_ENV = "KERNELLOOP_GPU_MEMORY_FRACTION"
DEFAULT_GPU_MEMORY_FRACTION = 0.9
DEFAULT_FILE_SIZE_BYTES = 8 << 30  # outputs.pt and a reference's saved inputs fit; a disk-filling file does not
# A child uses about one core (CPU jobs run one BLAS thread, GPU jobs wait on the device), so
# twice its wall-clock allowance is generous; the wall-clock timeouts stay the real limit.
CPU_TIME_FACTOR = 2.0
CPU_TIME_GRACE_S = 10  # SIGXCPU at the soft limit, SIGKILL this much later
PROBE_TIMEOUT_S = 20.0
INPUTS_DIR = "inputs"  # under the work dir: copies of job input files the sandbox can't otherwise see
# Namespaces shared by the probe and the real sandbox, so a probe that passes means they work.
NAMESPACE_FLAGS = ("--unshare-net", "--unshare-pid", "--unshare-ipc")
SANDBOX_USER_ENV = "KERNELLOOP_SANDBOX_USER"  # uid[:gid] the workers drop to when kernelloop runs as root
DEFAULT_SANDBOX_USER = "65534:65534"  # nobody:nogroup
MAX_SANDBOX_ID = 2**31 - 1  # past it ids wrap negative in some tools; -1 (4294967295) means "unchanged"
ROOT_START_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID")  # see privilege_flags


class IsolationError(RuntimeError):
    """The isolation asked for can't be had here; the message says why and what to do."""


# --------------------------------------------------------------------------- limits


@dataclass(frozen=True)
class ChildLimits:
    """Resource limits for one job's child. Travels in the job as `limits` (a plain dict)."""

    cpu_s: int  # RLIMIT_CPU soft limit, seconds of CPU time
    file_size_bytes: int  # RLIMIT_FSIZE: the largest file the child may write
    gpu_memory_fraction: float  # share of the GPU's memory the child's allocator may take

    def as_job(self) -> dict:
        return asdict(self)


def gpu_memory_fraction(explicit: float | None = None) -> float:
    """explicit > KERNELLOOP_GPU_MEMORY_FRACTION > 0.9; a value outside (0, 1] is one clear error."""
    raw = explicit if explicit is not None else os.environ.get(GPU_MEMORY_FRACTION_ENV) or DEFAULT_GPU_MEMORY_FRACTION
    try:
        fraction = float(raw)
    except ValueError:
        raise IsolationError(f"{GPU_MEMORY_FRACTION_ENV}={raw!r} is not a number: use a fraction like 0.9") from None
    if not 0.0 < fraction <= 1.0:
        raise IsolationError(f"GPU memory fraction {fraction:g} is outside (0, 1]: use a fraction like 0.9")
    return fraction


def child_limits(compile_timeout_s: float, run_timeout_s: float, gpu_fraction: float | None = None) -> ChildLimits:
    """Limits for a job whose phases may take compile_timeout_s, then run_timeout_s each
    (trials, timing, fresh inputs: three run phases at most)."""
    wall_s = compile_timeout_s + 3 * run_timeout_s
    return ChildLimits(cpu_s=int(CPU_TIME_FACTOR * wall_s) + 1, file_size_bytes=DEFAULT_FILE_SIZE_BYTES,
                       gpu_memory_fraction=gpu_memory_fraction(gpu_fraction))


def _lower_limit(which: int, soft: int, hard: int | None = None) -> None:
    """Set a limit, never above what the process already has (raising a hard limit needs root,
    and a shell's `ulimit` may already be lower than ours)."""
    _, current_hard = resource.getrlimit(which)
    cap = current_hard if current_hard != resource.RLIM_INFINITY else None
    hard = soft if hard is None else hard
    if cap is not None:
        soft, hard = min(soft, cap), min(hard, cap)
    resource.setrlimit(which, (soft, hard))


def apply_child_limits(limits: dict | None, memory_limit_bytes: int | None = None) -> None:
    """In the forked child, before the job runs: the limits of ChildLimits.as_job(), plus the
    address-space cap of CPU jobs (CUDA reserves far more address space than it uses)."""
    _lower_limit(resource.RLIMIT_CORE, 0)  # a crashing kernel must not leave gigabytes of core behind
    if limits:
        _lower_limit(resource.RLIMIT_CPU, int(limits["cpu_s"]), int(limits["cpu_s"]) + CPU_TIME_GRACE_S)
        _lower_limit(resource.RLIMIT_FSIZE, int(limits["file_size_bytes"]))
    if memory_limit_bytes:
        _lower_limit(resource.RLIMIT_AS, int(memory_limit_bytes))


# --------------------------------------------------------------------------- bubblewrap


@dataclass(frozen=True)
class Probe:
    """Whether bubblewrap can build the sandbox here; `note` says why not, or which binary."""

    usable: bool
    path: str | None
    note: str


@functools.cache
def probe_bubblewrap() -> Probe:
    """Run bubblewrap once with the sandbox's namespaces (cached for the process)."""
    path = shutil.which("bwrap")
    if path is None:
        return Probe(False, None, "bubblewrap (bwrap) is not installed: apt-get install bubblewrap")
    argv = [path, *NAMESPACE_FLAGS, *privilege_flags(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Probe(False, path, f"{path} could not run: {exc}")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        return Probe(False, path, f"{path} can't create namespaces here ({why}); "
                                  "unprivileged user namespaces may be disabled (kernel.unprivileged_userns_clone, "
                                  "or a container without them)")
    return Probe(True, path, f"{path} works")


def requested_mode(explicit: str | None = None) -> str:
    """explicit > KERNELLOOP_SANDBOX > 'auto'; one of auto, bwrap, plain."""
    wanted = (explicit if explicit is not None else os.environ.get(MODE_ENV) or "auto").strip().lower()
    if wanted not in ("auto", "bwrap", "plain"):
        raise IsolationError(f"{MODE_ENV}={wanted!r}: use auto, bwrap or plain")
    return wanted


def choose_mode(explicit: str | None = None) -> tuple[Mode, str]:
    """(mode, note): bubblewrap when asked for or available, else plain with the reason."""
    wanted = requested_mode(explicit)
    if wanted == "plain":
        return "plain", f"plain child processes ({MODE_ENV}=plain)"
    probe = probe_bubblewrap()
    if probe.usable:
        return "bubblewrap", f"bubblewrap: no network, read-only filesystem, own pid namespace ({probe.note})"
    if wanted == "bwrap":
        raise IsolationError(f"{MODE_ENV}=bwrap, but {probe.note}")
    return "plain", f"plain child processes: {probe.note}"


@dataclass(frozen=True)
class Mount:
    """One bubblewrap mount, applied in order: a later mount over a path wins."""

    kind: Literal["ro", "rw", "dev-bind", "dev", "tmpfs", "proc", "dir", "mask"]
    path: Path
    optional: bool = False  # bind only when the source exists (bwrap's *-try)

    def argv(self) -> list[str]:
        target = str(self.path)
        if self.kind == "tmpfs" and self.path == Path("/tmp"):
            # Sticky and open to all, as /tmp is: the worker, an unprivileged uid when we run as root,
            # writes its temporary files there (each job sees it read-only, confine.lock_down).
            return ["--perms", "1777", "--tmpfs", target]
        if self.kind in ("tmpfs", "proc", "dev"):  # fresh filesystems: a tmpfs, the namespace's procfs, a minimal /dev
            return [f"--{self.kind}", target]
        if self.kind == "mask":  # an empty file over one that holds settings (an API key in a .env)
            return ["--ro-bind", "/dev/null", target]
        if self.kind == "dir":  # a dir on the way to a bind, traversable by the sandbox user (bwrap's default is 0700)
            return ["--perms", "0755", "--dir", target]
        flag = {"ro": "--ro-bind", "rw": "--bind", "dev-bind": "--dev-bind"}[self.kind]
        return [flag + ("-try" if self.optional else ""), target, target]


def gpu_device_nodes() -> list[Path]:
    """The NVIDIA device nodes this host has (/dev/nvidia0, nvidiactl, nvidia-uvm, the caps dir...)."""
    dev = Path("/dev")
    return sorted(p for p in dev.glob("nvidia*")) + ([dev / "dri"] if (dev / "dri").is_dir() else [])


def privilege_flags() -> list[str]:
    """bubblewrap's flags for who runs inside. As a user: a user namespace, every capability
    dropped. As root, bubblewrap makes no user namespace of its own and would keep all of root's
    capabilities: it keeps three, which the worker uses in its first lines and then loses as it
    becomes the unprivileged sandbox user (zygote._drop_to; the kernel clears every capability as
    the uid leaves 0): CAP_SYS_ADMIN to lift bubblewrap's read-only covers off /proc/sys and the like
    (locked covers would keep each job from mounting a /proc of its own; no process of that uid can
    write under them), CAP_SETUID and CAP_SETGID to change uid."""
    if os.geteuid() != 0:
        return ["--unshare-user", "--cap-drop", "ALL"]
    return ["--cap-drop", "ALL", *[flag for cap in ROOT_START_CAPS for flag in ("--cap-add", cap)]]


def sandbox_user() -> tuple[int, int] | None:
    """(uid, gid) the workers drop to: None unless kernelloop runs as root, then KERNELLOOP_SANDBOX_USER
    or nobody (65534). A uid of 0 there is refused: root inside is what this prevents."""
    if os.geteuid() != 0:
        return None
    raw = os.environ.get(SANDBOX_USER_ENV) or DEFAULT_SANDBOX_USER
    uid, _, gid = raw.partition(":")
    try:
        ids = int(uid), int(gid or uid)
    except ValueError:
        raise IsolationError(f"{SANDBOX_USER_ENV}={raw!r}: use UID or UID:GID, e.g. 65534:65534") from None
    if 0 in ids:
        raise IsolationError(f"{SANDBOX_USER_ENV}={raw!r}: the sandbox user must not be root")
    # -1 (and 4294967295, the same uid_t) means "leave unchanged" to setresuid/setresgid: root kept.
    if not all(0 < value <= MAX_SANDBOX_ID for value in ids):
        raise IsolationError(f"{SANDBOX_USER_ENV}={raw!r}: each id must be from 1 to {MAX_SANDBOX_ID} "
                             "(-1 would leave the worker root)")
    return ids


def hand_to(path: Path, user: tuple[int, int] | None) -> None:
    """Make `path` (and everything under it) the sandbox user's, so its jobs can write there; the
    parent, root, still reads it. Links are changed, never followed."""
    if user is None or not os.path.lexists(path):
        return
    uid, gid = user
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            item = os.path.join(root, name)
            if os.lstat(item).st_uid != uid:
                os.lchown(item, uid, gid)
    if os.lstat(path).st_uid != uid:
        os.lchown(path, uid, gid)


def _closed_ways(targets: Sequence[Path]) -> list[Path]:
    """Dirs on the way to what the sandbox binds (the Python install, the work dir) that others may
    not pass (a root-only home holding pyenv, a 0700 temp dir): each becomes a fresh tmpfs with the
    binds made again through open dirs, so the sandbox user gets to them, and to nothing else there."""
    closed = set()
    for path in targets:
        for way in Path(path).parents:
            if way != Path("/") and way.is_dir() and not os.stat(way).st_mode & 0o001:
                closed.add(way)
    return sorted(closed, key=lambda p: len(p.parts))


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _python_paths() -> list[Path]:
    """What the zygote needs to start Python and import the package: the interpreter, the
    install prefixes, every import path of this process, and the package's own root."""
    package_root = Path(__file__).resolve().parents[2]
    found = [Path(sys.executable).parent, Path(sys.executable).resolve().parent, Path(sys.prefix),
             Path(sys.base_prefix), Path(sys.exec_prefix), package_root]
    found += [Path(entry) for entry in sys.path if entry and os.path.isabs(entry)]
    return [p.resolve() for p in found if p.exists()]


def sandbox_mounts(work_dir: Path, device: str, hide: Sequence[Path] = (), writable: Sequence[Path] = (),
                   read_only: Sequence[Path] = ()) -> list[Mount]:
    """The mounts of the zygote's sandbox, in order. `hide`: further dirs the jobs must not see
    (the workspace with its checkpoint DB). The work dir is the only writable place, with
    `writable` (compile caches shared by the workers of a host), but for its inputs dir and
    `read_only` (reference outputs only the parent writes); all must exist before the sandbox starts."""
    work_dir = Path(work_dir).resolve()
    mounts = [Mount("ro", Path("/"))]
    # A minimal /dev (null, zero, random, tty, shm...), and on a GPU worker the GPU's nodes alone:
    # never the host's disks, whoever the job's uid is on the host.
    mounts.append(Mount("dev", Path("/dev")))
    if device == "cuda":
        mounts += [Mount("dev-bind", node, optional=True) for node in gpu_device_nodes()]
    mounts.append(Mount("proc", Path("/proc")))
    hidden = [Path("/tmp"), Path.home()]
    # Unix sockets (a container runtime's, a session bus) stay reachable on a read-only mount.
    hidden += [Path(p) for p in ("/run", "/var/run") if not os.path.islink(p)]
    python = list(dict.fromkeys(_python_paths()))
    hidden += _closed_ways([*python, work_dir, *map(Path, writable), *map(Path, read_only), *map(Path, hide)])
    hidden = [p.resolve() for p in hidden if p.is_dir() and p.resolve() != Path("/")]
    mounts += [Mount("tmpfs", p) for p in dict.fromkeys(hidden)]
    # Never a hidden dir whole (a script run from /tmp puts /tmp on sys.path): that would undo the hiding.
    mounts += [Mount("ro", p) for p in python if any(_within(p, h) for h in hidden) and p not in hidden]
    if device == "cuda":  # the driver's persistence daemon, when it runs
        mounts.append(Mount("ro", Path("/run/nvidia-persistenced"), optional=True))
    # Hidden last, so nothing bound back above reopens them; the work dir is bound back after.
    mounts += [Mount("tmpfs", p.resolve()) for p in map(Path, hide)
               if p.is_dir() and not _within(p.resolve(), work_dir)]
    mounts.append(Mount("rw", work_dir))
    mounts += [Mount("rw", Path(p).resolve()) for p in writable if not _within(Path(p).resolve(), work_dir)]
    # Files staged for the jobs (a problem from a hidden dir) and the references: readable,
    # never rewritable by a job.
    mounts.append(Mount("ro", work_dir / INPUTS_DIR))
    mounts += [Mount("ro", Path(p).resolve()) for p in read_only]
    mounts += [Mount("mask", p) for p in settings_files(python) if visible(p, mounts)]
    return _with_ways_in(mounts)


def settings_files(python: Sequence[Path]) -> list[Path]:
    """Files the settings may be read from (a .env or kernelloop.toml, where an API key is put) in
    the working dir and the dirs on the import path: masked in the sandbox, which shows the rest.
    A link is masked where it leads (the file a read through it opens), never left open."""
    from kernelloop.sandbox.redact import SETTINGS_FILES

    dirs = dict.fromkeys([Path.cwd().resolve(), *python])
    found = [(d / name).resolve() for d in dirs for name in SETTINGS_FILES if (d / name).is_file()]
    return list(dict.fromkeys(found))


def _with_ways_in(mounts: list[Mount]) -> list[Mount]:
    """Before each bind into a fresh tmpfs, the dirs on its way there, made traversable: bubblewrap
    makes missing ones 0700, which only root gets through, and the sandbox user is not root."""
    out: list[Mount] = []
    made: set[Path] = set()
    for mount in mounts:
        if mount.kind in ("ro", "rw", "dev-bind", "tmpfs"):
            covering = [m.path for m in out if m.kind == "tmpfs" and _within(mount.path, m.path)]
            if covering:
                ways = [a for a in reversed(mount.path.parents) if _within(a, covering[-1]) and a not in made]
                out += [Mount("dir", a) for a in ways]
                made.update(ways)
            if mount.kind == "tmpfs":  # what was made under it is gone
                made = {d for d in made if not _within(d, mount.path)}
            made.add(mount.path)
        out.append(mount)
    return out


def visible(path: Path, mounts: Sequence[Mount]) -> bool:
    """Whether a host file shows inside the sandbox at the same path: the last mount that covers
    it decides (a bind shows the host's file, a tmpfs, /dev or /proc mount hides it)."""
    path = Path(path).resolve()
    covering = [m for m in mounts if _within(path, m.path)]
    return bool(covering) and covering[-1].kind in ("ro", "rw", "dev-bind")


def bubblewrap_argv(mounts: Sequence[Mount], work_dir: Path) -> list[str]:
    """bwrap and its options, to put in front of the zygote's own command."""
    probe = probe_bubblewrap()
    if not probe.usable or probe.path is None:
        raise IsolationError(probe.note)
    # No --die-with-parent: it is PR_SET_PDEATHSIG, which fires when the *thread* that started
    # bwrap exits, so a pool worker thread ending would kill a zygote other threads still use.
    # The zygote ends on its own when its stdin closes (the parent process died).
    argv = [probe.path, *NAMESPACE_FLAGS, *privilege_flags(), "--new-session"]
    for mount in mounts:
        argv += mount.argv()
    return argv + ["--chdir", str(Path(work_dir).resolve()), "--"]
