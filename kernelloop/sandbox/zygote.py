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

Protocol: one JSON job per line on stdin; for each job it answers `{"pid": N}` once a child has
it and `{"exit": code}` once the child is reaped (a negative code is the signal that killed it).
While a job runs the parent may send `{"kill": N}`: the zygote SIGKILLs that child's process
group (the parent can't, when the zygote runs in its own pid namespace). Whatever a child leaves
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
import time
from pathlib import Path

from kernelloop.sandbox.isolation import apply_child_limits

PR_SET_PDEATHSIG = 1  # prctl option: the signal a process gets when its parent dies
PR_SET_CHILD_SUBREAPER = 36  # prctl option: orphaned descendants become this process's children
# Rounds of killing inherited orphans after a job: each round's kills orphan the next generation.
ORPHAN_ROUNDS = 64
# The most a job waits for its standby's prepare(); the parent gives up on a fork after 60 s.
READY_TIMEOUT_S = 30.0


def _die_with_parent(parent_pid: int) -> None:
    """SIGKILL this child when the zygote dies, so no job outlives a killed orchestrator."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the zygote died before the line above took effect
        os._exit(70)


def _detach(protocol_fd: int, parent_pid: int) -> None:
    """First steps of every forked child: its own process group (the parent kills the whole group
    on timeout), death with the zygote, and none of the zygote's protocol fds."""
    os.setsid()
    _die_with_parent(parent_pid)
    os.close(protocol_fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the zygote's stdin carries the parent's messages: never the child's to read


def _standby(job_fd: int, ready_fd: int, protocol_fd: int, prepare, run_job, parent_pid: int) -> None:
    """In a standby child: prepare, say so on `ready_fd`, then wait for one job on `job_fd` and run
    it. Never returns."""
    try:
        _detach(protocol_fd, parent_pid)
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
            _child(json.loads(line), run_job)
    finally:  # no job came (the zygote is closing), or the standby itself failed
        os._exit(70)


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
        os.environ["TMPDIR"] = scratch
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


def _children() -> list[int]:
    """The zygote's live children, from /proc (ppid is the 4th field, after the parenthesised name)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:  # it ended while we looked
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == me:
            found.append(int(entry))
    return found


def _end_orphans() -> None:
    """Kill and reap every child the zygote has; between jobs these can only be what a job left
    behind outside its process group."""
    for _ in range(ORPHAN_ROUNDS):
        children = _children()
        if not children:
            break
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


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
    """The next job's child, forked ahead; it says when prepare() is done, then takes one job."""

    def __init__(self, protocol_fd: int, prepare, run_job):
        job_read, self._job_fd = os.pipe()
        self._ready_fd, ready_write = os.pipe()
        zygote_pid = os.getpid()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._job_fd)
            os.close(self._ready_fd)
            _standby(job_read, ready_write, protocol_fd, prepare, run_job, zygote_pid)
        os.close(job_read)
        os.close(ready_write)

    def take(self, job: dict) -> bool:
        """Hand it the job once it is prepared; False (it is ended and reaped) when it died in
        prepare() or took longer than READY_TIMEOUT_S."""
        ready, _, _ = select.select([self._ready_fd], [], [], READY_TIMEOUT_S)
        prepared = bool(ready) and os.read(self._ready_fd, 1) == b"1"  # b"": it died first
        os.close(self._ready_fd)
        handed = prepared and _write_all(self._job_fd, (json.dumps(job) + "\n").encode())
        os.close(self._job_fd)
        if not handed:
            self._end()
        return handed

    def dismiss(self) -> None:
        """No job will come (the zygote is closing): end it and reap it."""
        os.close(self._ready_fd)
        os.close(self._job_fd)
        self._end()

    def _end(self) -> None:
        _kill_group(self.pid)
        with contextlib.suppress(ProcessLookupError):  # not yet in its own group, or gone
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


def _wait_for_child(pid: int, lines: _Lines) -> int:
    """Wait for the job's child, obeying `{"kill": pid}` meanwhile; stdin closing kills it.
    Returns its exit code (negative: the signal)."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            while (line := lines.pending()) is not None:
                if line.strip() and json.loads(line).get("kill") == pid:
                    _kill_group(pid)
            if lines.closed:
                _kill_group(pid)
            ready, _, _ = select.select([pidfd] + ([] if lines.closed else [lines.fd]), [], [])
            if pidfd in ready:
                # Still a zombie, so its pid can't have been reused: end what it left in its group, then reap.
                _kill_group(pid)
                _, status = os.waitpid(pid, 0)
                _end_orphans()
                return os.waitstatus_to_exitcode(status)
            lines.fill()
    finally:
        os.close(pidfd)


def main() -> None:
    started = time.perf_counter()
    # The protocol gets its own copy of stdout; fd 1 then points at stderr so stray prints
    # from imported libraries can't corrupt it.
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    protocol = os.fdopen(protocol_fd, "w", buffering=1)

    import importlib

    # Descendants orphaned by a job come to the zygote, not to init, so _end_orphans finds them.
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    module = importlib.import_module(sys.argv[1])

    protocol.write(json.dumps({"ready": True, "pid": os.getpid(),
                               "import_s": time.perf_counter() - started}) + "\n")
    lines = _Lines(sys.stdin.fileno())
    prepare = getattr(module, "prepare", None)
    # --no-standby: each job's child is forked (and prepared) only once the job has come.
    ahead = "--no-standby" not in sys.argv[2:]
    standby = _Standby(protocol_fd, prepare, module.run_job) if ahead else None
    while (line := lines.next()) is not None:
        job = json.loads(line) if line.strip() else {}
        if "kind" not in job:  # a blank line, or a kill that came after its job ended
            continue
        if standby is None:
            standby = _Standby(protocol_fd, prepare, module.run_job)
        if not standby.take(job):  # prepare() crashed or hung: this job gets a child that skips it
            standby = _Standby(protocol_fd, None, module.run_job)
            standby.take(job)
        pid, standby = standby.pid, None
        protocol.write(json.dumps({"pid": pid}) + "\n")
        code = _wait_for_child(pid, lines)
        if lines.closed:  # the parent is gone: nobody to tell
            return
        protocol.write(json.dumps({"exit": code}) + "\n")
        if ahead:
            standby = _Standby(protocol_fd, prepare, module.run_job)  # prepares while the parent judges
    if standby is not None:
        standby.dismiss()


if __name__ == "__main__":
    main()
