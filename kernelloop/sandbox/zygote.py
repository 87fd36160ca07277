"""The warm worker process: imports torch and triton once, then forks one child per job.

Run as `python -m kernelloop.sandbox.zygote MODULE`, started by runner.Zygote with a scrubbed
environment; MODULE (e.g. kernelloop.tools.verify.harness) is imported once and its `run_job(job) -> int`
runs in each child, so the sandbox knows nothing of what the jobs do. It never initialises CUDA
itself, so each forked child starts clean and initialises its own context.

Standby: the next job's child is forked ahead of time, as soon as the zygote is idle, and runs
MODULE's optional `prepare()` (the harness creates its CUDA context there) while the parent judges
the last job or waits for a model; the job then goes to it through a pipe. So a job's latency
holds no context creation, and a fresh process with nothing of any earlier job still runs each
job. Nothing overlaps a running job: the standby is forked only after the last child is reaped.

Preloads: the modules named in $KERNELLOOP_WORKER_PRELOAD are imported before the zygote says it
is ready (every job of this worker needs them); those in $KERNELLOOP_WORKER_PRELOAD_LATER are
imported in a background thread once the first child is forked, for later jobs only, so the first
job never waits for them. No fork happens while that thread runs (a child forked mid-import could
inherit a held import lock): the zygote joins it first. MODULE's optional `preload()` runs in a
thread beside the preload imports, joined before ready (the harness hashes Triton's library there).
KERNELLOOP_PRELOAD=0 turns these off.

Protocol: one JSON job per line on stdin; for each job it answers `{"pid": N}` once a child has
it and `{"exit": code}` once the child is reaped (a negative code is the signal that killed it).
While a job runs the parent may send `{"kill": N}`: the zygote SIGKILLs that child's process
group (the parent can't, when the zygote runs in its own pid namespace).

The job's channel: every child gets two pipes the zygote made before it forked, so nothing in
the job dir (which the candidate can swap for a symlink or a FIFO) carries a message. The
child's lines on its `up` pipe reach the parent as `{"msg": LINE}` (the raw text, at most
MAX_MESSAGE_BYTES: the parent parses it, since candidate code shares the child's fds); the
parent's `{"to_job": OBJ}` goes to the child's `down` pipe as one JSON line. A child that floods
its pipe, or leaves the parent's message unread, is killed. Whatever a child leaves
behind is killed when it exits, before the exit is reported: its process group, and any process
that left the group (a daemon: fork, setsid, fork), which the zygote, a child subreaper, inherits.
So nothing of a job can still touch its files while the parent reads them. Stdin closing (the
parent died) kills the running job and ends the zygote.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import sys
import threading
import time
from pathlib import Path

from kernelloop import bounded_json
from kernelloop.sandbox import confine
from kernelloop.sandbox.isolation import apply_child_limits

PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies
PR_SET_CHILD_SUBREAPER = 36  # prctl option: orphaned descendants become this process's children
# Rounds of looking for what a job left behind, stopping each find; a stopped process forks no more,
# so rounds are needed only for processes that forked while the last round looked.
ORPHAN_ROUNDS = 64
# The most a job waits for its standby's prepare(); the parent gives up on a fork after 60 s.
READY_TIMEOUT_S = 30.0
MAX_MESSAGE_BYTES = 1 << 20  # one line from a job; a longer one is a flood, and the job is killed
MAX_JOB_BYTES = 256 << 20  # all a job may send up its channel; past it the job is killed
PUMP_BYTES = 1 << 20  # read from a job's channel per turn of the zygote's loop
BOX_REPORT_TIMEOUT_S = 10.0  # the job's box is locked within milliseconds of the job reaching it
JOB_WRITABLE_ENV = "KERNELLOOP_JOB_WRITABLE"  # dirs every job of this worker may write, beside its own job dir


def _die_with_parent(parent_pid: int, own_pid_namespace: bool = False) -> None:
    """SIGKILL this child when its parent dies, so no job outlives a killed orchestrator."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # Its parent died before the line above took effect (pid 1 of a new namespace sees no parent: 0).
    if os.getppid() != (0 if own_pid_namespace else parent_pid):
        os._exit(70)


def _detach(parent_pid: int, keep: tuple[int, ...]) -> None:
    """First steps of every forked child: its own process group (the parent kills the whole group
    on timeout), death with the zygote, and none of the zygote's pipes but `keep`: the zygote's
    protocol, or a pipe a library opened there, would otherwise be shared by every job, so one job
    could write into what the next one reads. Device handles stay (NVML's, opened in the zygote
    for the fork-safe CUDA check: without them torch's allocator fails inside the child)."""
    os.setsid()
    _die_with_parent(parent_pid)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the zygote's stdin carries the parent's messages: never the child's to read
    os.close(devnull)
    for fd in _inherited_pipes():
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


def _inherited_pipes() -> list[int]:
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd listdir itself held, already closed
            if name.isdigit() and int(name) > 2 and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                found.append(int(name))
    return found


def _standby(job_fd: int, ready_fd: int, prepare, run_job, parent_pid: int, channel_fds: tuple[int, int],
             box_fd: int) -> None:
    """In a standby child: its own namespaces (the job becomes their pid 1, see confine.py),
    prepare, say so on `ready_fd`, then wait for one job on `job_fd`, lock the job's box down, say
    what holds on `box_fd`, and run it (the job names the child's channel fds). Never returns."""
    try:
        _detach(parent_pid, keep=(job_fd, ready_fd, box_fd, *channel_fds))
        boxed = _enter_box(box_fd, (job_fd, ready_fd, *channel_fds))
        if prepare is not None:
            try:
                prepare()
            except Exception:  # noqa: BLE001 - the job itself meets and reports whatever failed here
                import traceback

                traceback.print_exc()
        os.write(ready_fd, b"1")
        os.close(ready_fd)
        with os.fdopen(job_fd, "rb") as pipe:
            line = pipe.readline()
        if line.strip():
            job = json.loads(line)
            _lock(job, boxed, box_fd)
            _child(job, run_job)
    except BaseException:  # noqa: BLE001 - the standby itself failed: say why in the worker's log
        import traceback

        traceback.print_exc()
    finally:  # no job came (the zygote is closing), or the standby itself failed
        os._exit(70)


def _enter_box(box_fd: int, held: tuple[int, ...]) -> str:
    """New namespaces, then fork the job's process into them: this returns in that process (pid 1
    there, with its own /proc and /tmp), while the standby waits for it and exits as it did.
    Returns '' or why the job runs without namespaces of its own (then in the standby itself)."""
    try:
        confine.dumpable(True)  # its own uid_map is written through its /proc, which must be its uid's
        confine.enter_job_namespaces()
    except OSError as exc:
        confine.dumpable(False)
        return f"no namespaces of its own ({exc})"
    standby_pid = os.getpid()
    pid = os.fork()
    if pid == 0:
        _die_with_parent(standby_pid, own_pid_namespace=True)
        try:
            confine.enter_job_root()
        except OSError as exc:
            return f"no /proc or /tmp of its own ({exc})"
        return ""
    confine.dumpable(False)
    _write_all(box_fd, (json.dumps({"job_pid": pid}) + "\n").encode())
    # The job holds them now, and the zygote sees EOF when it ends. Named, not found through /proc:
    # the standby shares the job's mounts, and the /proc there is the job's, without the standby.
    for fd in (box_fd, *held):
        with contextlib.suppress(OSError):
            os.close(fd)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:  # end as it ended, so the zygote reports the same signal
        _lower_core_limit()
        with contextlib.suppress(OSError, ValueError):  # SIGKILL and SIGSTOP can't be given a handler
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(code)


def _lower_core_limit() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _lock(job: dict, boxed: str, box_fd: int) -> None:
    """Lock the job's box (confine.lock_down) and report it on `box_fd`, before any of its code runs.
    A box that can't be built is reported as such; the job still runs (judged as not isolated)."""
    report: dict = {"namespaces": boxed or "own", "ns": confine.namespace_ids()}
    writable = [job["job_dir"], *[p for p in os.environ.get(JOB_WRITABLE_ENV, "").split(os.pathsep) if p]]
    try:
        report["writable_outside_job"] = confine.lock_down(writable, mounts=not boxed)
    except OSError as exc:
        report["error"] = str(exc)
    _write_all(box_fd, (json.dumps(report) + "\n").encode())
    os.close(box_fd)


def _child(job: dict, run_job) -> None:
    """In the forked child, detached: enter the job's dirs and limits, then run it. Never returns."""
    code = 70
    try:
        job_dir = job["job_dir"]
        scratch = os.path.join(job_dir, "scratch")
        os.makedirs(scratch, exist_ok=True)
        os.chdir(scratch)
        for fd, name in ((1, "stdout.txt"), (2, "stderr.txt")):
            out = os.open(os.path.join(job_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, fd)
            os.close(out)
        os.environ["TMPDIR"] = scratch
        import tempfile

        tempfile.tempdir = scratch  # not the /tmp the worker or the standby cached: read-only in the job
        os.environ.update(job.get("env") or {})  # e.g. its own compile caches
        apply_child_limits(job.get("limits"), job.get("memory_limit_bytes"))
        code = run_job(job)
    except BaseException:  # noqa: BLE001 - the child reports through result.json and its exit code
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class _Lines:
    """JSON lines from a raw fd, readable alongside select() (a buffered sys.stdin is not)."""

    def __init__(self, fd: int):
        self.fd = fd
        self.closed = False
        self._buffer = b""

    def pending(self) -> bytes | None:
        """The next complete line already read, if any."""
        if b"\n" not in self._buffer:
            return None
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def fill(self) -> None:
        """Read what is there (call when select says so); EOF sets `closed`."""
        chunk = os.read(self.fd, 65536)
        self.closed = not chunk
        self._buffer += chunk

    def next(self) -> bytes | None:
        """Block for the next line; None once stdin is closed."""
        while True:
            line = self.pending()
            if line is not None or self.closed:
                return line
            self.fill()


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in sight, from /proc (ppid is the 4th field, after the
    parenthesised name, which may itself hold spaces or parentheses)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        found[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _descendants() -> set[int]:
    tree: set[int] = set()
    parents, frontier = _parents(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - tree
        tree |= frontier
    return tree


def _end_orphans() -> None:
    """End every process the zygote has under it; between jobs these can only be what a job left
    behind outside its process group. Stop them all first, as often as new ones show (a stopped
    process can't fork, so this ends), then kill: killing generation by generation let a chain
    87 deep outlive 64 rounds."""
    stopped: set[int] = set()
    for _ in range(ORPHAN_ROUNDS):
        found = _descendants() - stopped
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= found
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # reap them as they come to the subreaper
        while True:
            os.waitpid(-1, 0)


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group is empty already
        os.killpg(pid, signal.SIGKILL)


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of `data` to a pipe; False when its reader is gone."""
    try:
        while data:
            data = data[os.write(fd, data):]
    except BrokenPipeError:
        return False
    return True


class _Standby:
    """The next job's child, forked ahead; it says when prepare() is done, then takes one job.
    `up_fd` (read) and `down_fd` (write) are the zygote's ends of the job's channel."""

    def __init__(self, prepare, run_job):
        job_read, self._job_fd = os.pipe()
        self._ready_fd, ready_write = os.pipe()
        self.up_fd, up_write = os.pipe()
        down_read, self.down_fd = os.pipe()
        self._child_fds = (down_read, up_write)
        self._box_fd, box_write = os.pipe()  # where the standby names the job's pid and the job its box
        zygote_pid = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            for fd in (self._job_fd, self._ready_fd, self.up_fd, self.down_fd, self._box_fd):
                os.close(fd)
            _standby(job_read, ready_write, prepare, run_job, zygote_pid, self._child_fds, box_write)
        for fd in (job_read, ready_write, down_read, up_write, box_write):
            os.close(fd)
        os.set_blocking(self.up_fd, False)
        os.set_blocking(self.down_fd, False)

    def take(self, job: dict) -> bool:
        """Hand it the job once it is prepared; False (it is ended and reaped) when it died in
        prepare() or took longer than READY_TIMEOUT_S."""
        ready, _, _ = select.select([self._ready_fd], [], [], READY_TIMEOUT_S)
        prepared = bool(ready) and os.read(self._ready_fd, 1) == b"1"  # b"": it died first
        os.close(self._ready_fd)
        job = {**job, "channel_fds": list(self._child_fds)}  # the same numbers in the forked child
        handed = prepared and _write_all(self._job_fd, (json.dumps(job) + "\n").encode())
        os.close(self._job_fd)
        if not handed:
            self._end()
            self.close_channel()
            with contextlib.suppress(OSError):
                os.close(self._box_fd)
        return handed

    def box(self) -> dict:
        """What holds for the job it was handed, once the job has locked its box (before any of the
        job's code runs): the job's report of its namespaces, checked against the zygote's own, and
        what the zygote reads of the job's process from outside (confine.measure)."""
        reports: dict = {}
        deadline = time.monotonic() + BOX_REPORT_TIMEOUT_S
        buffer = b""
        while "namespaces" not in reports and (left := deadline - time.monotonic()) > 0:
            if not select.select([self._box_fd], [], [], left)[0]:
                break
            chunk = os.read(self._box_fd, 65536)
            if not chunk:  # the job died before it reported: nothing of it ran
                break
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                with contextlib.suppress(ValueError, TypeError):  # JsonBoundError is a ValueError
                    reports.update(bounded_json.loads(line, "the job's box report", MAX_MESSAGE_BYTES, max_depth=16))
        os.close(self._box_fd)
        return _box_summary(reports, self.pid)

    def dismiss(self) -> None:
        """No job will come (the zygote is closing): end it and reap it."""
        os.close(self._ready_fd)
        os.close(self._job_fd)
        os.close(self._box_fd)
        self._end()
        self.close_channel()

    def close_channel(self) -> None:
        for fd in (self.up_fd, self.down_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _end(self) -> None:
        _kill_group(self.pid)
        with contextlib.suppress(ProcessLookupError):  # not yet in its own group, or gone
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _box_summary(reports: dict, standby_pid: int) -> dict:
    """The containment in force for one job, from the reports on its box pipe and /proc."""
    if "namespaces" not in reports:
        return {"isolated": False, "why": "the job reported no box before it ended"}
    job_pid = int(reports.get("job_pid") or standby_pid)
    try:
        held = confine.measure(job_pid)
    except (OSError, KeyError, ValueError) as exc:
        return {"isolated": False, "why": f"the job's process could not be read ({exc})"}
    mine = confine.namespace_ids()
    theirs = reports.get("ns") or {}
    held["own_namespaces"] = sorted(k for k in ("user", "pid", "net", "ipc", "mnt") if theirs.get(k) and
                                    theirs.get(k) != mine.get(k))
    held["writable_outside_job"] = reports.get("writable_outside_job", [])
    missing = [k for k in ("user", "pid", "net", "ipc", "mnt") if k not in held["own_namespaces"]]
    why = []
    if reports.get("error"):
        why.append(str(reports["error"]))
    if reports["namespaces"] != "own":
        why.append(str(reports["namespaces"]))
    elif missing:
        why.append(f"shares the worker's {', '.join(missing)} namespace")
    if int(held["capabilities"] or "0", 16):
        why.append(f"holds capabilities {held['capabilities']}")
    if not held["seccomp"] or not held["no_new_privs"]:
        why.append("no seccomp filter" if not held["seccomp"] else "no no_new_privs")
    if held["writable_outside_job"]:
        why.append(f"can write {', '.join(held['writable_outside_job'][:3])}")
    held["isolated"] = not why
    if why:
        held["why"] = "; ".join(why)
    return held


class _Relay:
    """The zygote's side of one job's channel: the child's lines up to the parent, the parent's
    messages down to the child. Both ends are non-blocking: a job can stall neither the zygote
    nor, through it, the parent."""

    def __init__(self, standby: _Standby, protocol):
        self.up_fd, self.down_fd, self.protocol = standby.up_fd, standby.down_fd, protocol
        self.up_open = True
        self.sent = 0  # bytes the child has sent up its channel
        self._buffer = b""

    def pump_up(self) -> bool:
        """Forward the child's complete lines; False when it floods: a line over MAX_MESSAGE_BYTES, or
        more than MAX_JOB_BYTES in all. Reads at most PUMP_BYTES a call, so the zygote goes back to
        its other fds (the parent's kill) however fast the child writes."""
        pumped = 0
        while self.up_open and pumped < PUMP_BYTES:
            try:
                chunk = os.read(self.up_fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.up_open = False
                break
            pumped += len(chunk)
            self.sent += len(chunk)
            if self.sent > MAX_JOB_BYTES:
                return False
            self._buffer += chunk
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                if line.strip():
                    self.protocol.write(json.dumps({"msg": line.decode("utf-8", "replace")}) + "\n")
            if len(self._buffer) > MAX_MESSAGE_BYTES:
                return False
        return True

    def send_down(self, message) -> bool:
        """One line to the child; False when it can't take it (its pipe is full or closed)."""
        data = (json.dumps(message) + "\n").encode()
        try:
            return os.write(self.down_fd, data) == len(data)
        except (BlockingIOError, BrokenPipeError):
            return False

    def close(self) -> None:
        for fd in (self.up_fd, self.down_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def _wait_for_child(pid: int, lines: _Lines, relay: _Relay) -> int:
    """Wait for the job's child, relaying its channel and obeying `{"kill": pid}` meanwhile;
    stdin closing kills it. Returns its exit code (negative: the signal)."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            while (line := lines.pending()) is not None:
                message = json.loads(line) if line.strip() else {}
                if message.get("kill") == pid:
                    _kill_group(pid)
                elif "to_job" in message and not relay.send_down(message["to_job"]):
                    _kill_group(pid)  # it does not read what it is sent: not a job that follows the protocol
            if lines.closed:
                _kill_group(pid)
            watched = [pidfd] + ([] if lines.closed else [lines.fd]) + ([relay.up_fd] if relay.up_open else [])
            ready, _, _ = select.select(watched, [], [])
            if relay.up_fd in ready and not relay.pump_up():
                _kill_group(pid)
            if pidfd in ready:
                # Still a zombie, so its pid can't have been reused: end what it left in its group, then reap.
                _kill_group(pid)
                _, status = os.waitpid(pid, 0)
                _end_orphans()
                relay.pump_up()  # its last lines, written before it exited
                return os.waitstatus_to_exitcode(status)
            if lines.fd in ready:
                lines.fill()
    finally:
        os.close(pidfd)
        relay.close()


def _preloading() -> bool:
    return os.environ.get("KERNELLOOP_PRELOAD", "1") != "0"


def _modules(variable: str) -> list[str]:
    if not _preloading():
        return []
    return [name for name in os.environ.get(variable, "").split(",") if name.strip()]


def _import_all(names: list[str]) -> None:
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a job that needs it meets the error itself
            import traceback

            traceback.print_exc()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # a fork of this process could not use CUDA
        raise RuntimeError(f"CUDA was initialised while the sandbox worker imported {names}")


class _Alongside:
    """One function run in a thread from now until `join()`, which raises what it raised."""

    def __init__(self, work):
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(work,), daemon=True) if callable(work) else None
        if self.thread is not None:
            self.thread.start()

    def _run(self, work) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the zygote's main thread
            self.error = exc

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
        if self.error is not None:
            raise self.error


class _Later:
    """Imports for later jobs in a background thread, joined before every fork."""

    def __init__(self, names: list[str]):
        self.names = names
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        if self.names and self.thread is None:
            self.thread = threading.Thread(target=_import_all, args=(self.names,), daemon=True)
            self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join()
            torch = sys.modules.get("torch")
            if torch is not None and torch.cuda.is_initialized():  # no fork of this process could use CUDA now
                print(f"kernelloop: CUDA was initialised while the sandbox worker imported {self.names}", file=sys.stderr)
                os._exit(70)


def _drop_to(user: str) -> None:
    """Started as root (bubblewrap keeps root's uid where it makes no user namespace): become the
    unprivileged uid:gid named, with no supplementary groups; the kernel clears every capability as
    the uid leaves 0. Nothing of a job's, nor torch, has run yet."""
    uid, _, gid = user.partition(":")
    confine.uncover_proc()
    os.setgroups([])
    os.setresgid(int(gid or uid), int(gid or uid), int(gid or uid))
    os.setresuid(int(uid), int(uid), int(uid))
    # Belt and braces behind the parent's parse (isolation.sandbox_user): -1 means "unchanged" to
    # these calls, so check what was reached rather than trust what was asked.
    if 0 in (*os.getresuid(), *os.getresgid()) or os.getgroups():
        print(f"kernelloop: the sandbox worker is still root after dropping to {user}", file=sys.stderr)
        os._exit(71)


def main() -> None:
    started = time.perf_counter()
    drop = [arg.split("=", 1)[1] for arg in sys.argv[2:] if arg.startswith("--drop-to=")]
    if drop:
        _drop_to(drop[0])
    confine.dumpable(False)
    # The protocol gets its own copy of stdout; fd 1 then points at stderr so stray prints
    # from imported libraries can't corrupt it.
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    protocol = os.fdopen(protocol_fd, "w", buffering=1)

    import importlib

    # Descendants orphaned by a job come to the zygote, not to init, so _end_orphans finds them.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    module = importlib.import_module(sys.argv[1])
    # The job module's own preload() (compiles and hashing: mostly outside the GIL) runs beside the
    # preload imports (Python, under it), both before the zygote is ready and forks.
    alongside = _Alongside(getattr(module, "preload", None) if _preloading() else None)
    _import_all(_modules("KERNELLOOP_WORKER_PRELOAD"))
    alongside.join()
    later = _Later(_modules("KERNELLOOP_WORKER_PRELOAD_LATER"))

    protocol.write(json.dumps({"ready": True, "pid": os.getpid(),
                               "import_s": time.perf_counter() - started}) + "\n")
    lines = _Lines(sys.stdin.fileno())
    prepare = getattr(module, "prepare", None)
    # --no-standby: each job's child is forked (and prepared) only once the job has come.
    ahead = "--no-standby" not in sys.argv[2:]  # flags after MODULE: --no-standby, --drop-to=UID:GID
    standby = _Standby(prepare, module.run_job) if ahead else None
    if standby is not None:
        later.start()
    while (line := lines.next()) is not None:
        job = json.loads(line) if line.strip() else {}
        if "kind" not in job:  # a blank line, or a kill that came after its job ended
            continue
        if standby is None:
            later.join()
            standby = _Standby(prepare, module.run_job)
            later.start()
        if not standby.take(job):  # prepare() crashed or hung: this job gets a child that skips it
            later.join()
            standby = _Standby(None, module.run_job)
            standby.take(job)
        box = standby.box()
        pid, relay, standby = standby.pid, _Relay(standby, protocol), None
        protocol.write(json.dumps({"pid": pid, "box": box}) + "\n")
        code = _wait_for_child(pid, lines, relay)
        if lines.closed:  # the parent is gone: nobody to tell
            return
        protocol.write(json.dumps({"exit": code}) + "\n")
        if select.select([lines.fd], [], [], 0)[0]:  # the parent may be closing us already: no standby then
            lines.fill()
        if lines.closed and lines.pending() is None:
            break
        if ahead:
            later.join()
            standby = _Standby(prepare, module.run_job)  # prepares while the parent judges
    if standby is not None:
        standby.dismiss()
    later.join()


if __name__ == "__main__":
    main()
    # Skip the interpreter's teardown (a second or more with torch imported): nothing is left to
    # flush but the protocol, and the parent waits for this exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
