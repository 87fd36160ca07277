"""Each job in a box of its own: namespaces, a read-only view, no capabilities, seccomp.

The zygote forks without exec, so bubblewrap wraps only the zygote; this module does the rest per
job, with plain system calls (ctypes: Python 3.11 has no os.unshare):

  standby (S, forked from the zygote, single-threaded)
      unshare(user, pid, net, ipc, mount), mapping its own uid and gid to themselves: it is root of
      nothing, but holds capabilities over the new namespaces, enough to build the job's view
  job (J, S's only child: pid 1 of the new pid namespace)
      `enter_job_root`  at once: private mounts, its own /proc (only itself in it; /proc/sys and the
                        like bound read-only, as bubblewrap does), a fresh /dev/shm
      the harness's prepare() (CUDA context) while idle
      `lock_down`       once its job is known: the job dir and the dirs the worker keeps writable
                        are bound over themselves; every other writable mount is made read-only;
                        capabilities, the bounding and ambient sets dropped; seccomp (seccomp.py)
                        with no_new_privs, on every thread
  then the job's code.

So a job sees no other process (the zygote's channel, the parent's environment), reaches no
network, can write only its own job dir (its TMPDIR too) and a private /dev/shm, can't mount, unshare, ptrace or gain a
capability back, and everything it starts dies with it (pid 1 of a namespace takes it all along).
`measure` reads what holds from outside the job (the zygote reads /proc/PID/status), so the report
in every verdict is not the job's claim.

What stays: threads a library started in prepare() (the CUDA driver's) keep the new namespaces'
capabilities, which act only on those namespaces; seccomp binds them too (TSYNC). `measure` counts them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from pathlib import Path

from kernelloop.sandbox import seccomp

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = (0x20000, 0x08000000, 0x10000000, 0x20000000,
                                                                      0x40000000)
JOB_NAMESPACES = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWNS
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 0x400, 0x800, 0x200000, 0x1000000
# Per-mount options as /proc/self/mountinfo prints them; a remount must repeat the locked ones.
MOUNT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
               "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
MNT_DETACH = 2
SHM_BYTES = 1 << 30  # each job's own /dev/shm
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 4, 24, 47, 4
# What bubblewrap covers read-only in a /proc it mounts: the host's sysctls, sysrq, IRQs, buses.
PROC_COVERED = ("sys", "sysrq-trigger", "irq", "bus")
_LIBC = ctypes.CDLL(None, use_errno=True)


class ConfineError(OSError):
    """A step of the job's box failed; the message names it."""


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise ConfineError(err, f"{what}: {errno.errorcode.get(err, str(err))}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = (lambda s: None if s is None else s.encode())
    _check(_LIBC.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def enter_job_namespaces() -> None:
    """In the standby, before it forks the job: new user, pid, net, ipc and mount namespaces, with
    this process's uid and gid mapped to themselves. Must be called single-threaded."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_LIBC.unshare(JOB_NAMESPACES), "unshare")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def enter_job_root() -> None:
    """In the job (pid 1 of its namespace), first thing: mounts private to it, its own /proc, and a
    /dev/shm of its own."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_COVERED:
        path = f"/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # A /dev/shm of its own. Not /tmp: a workspace may lie under it; the job's /tmp is made read-only
    # with the rest (lock_down), and its TMPDIR is its own scratch dir.
    if os.path.isdir("/dev/shm"):  # sized: a job can't fill the host's memory through it
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={SHM_BYTES}")


def uncover_proc() -> None:
    """Lift bubblewrap's read-only covers off /proc/sys and the like (root mode, in the worker before
    it drops to the sandbox user; see isolation.privilege_flags). Each job covers its own /proc again."""
    for name in PROC_COVERED:
        _LIBC.umount2(f"/proc/{name}".encode(), MNT_DETACH)  # not covered (a user's bubblewrap): nothing to lift


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def writable_mounts() -> list[tuple[str, int]]:
    """(mount point, its flags) of every mount now writable in this namespace and reachable by its
    path: of several mounts on one point only the last (the one on top) counts."""
    top: dict[str, list[str]] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = _unescape(fields[4])
        top.pop(point, None)  # keep the order of the last mount on each point
        top[point] = fields[5].split(",")
    return [(point, sum(MOUNT_FLAGS.get(o, 0) for o in options)) for point, options in top.items() if "rw" in options]


def lock_down(writable: list[str], mounts: bool = True) -> list[str]:
    """In the job, once its job is known and before its code runs: only `writable` (its job dir,
    caches the worker keeps) and its private /dev/shm stay writable (`mounts`: the job has a mount
    namespace of its own to change); then no capabilities, no new privileges, seccomp. Returns the
    mount points still writable beside those (none, where the box holds)."""
    keep = [os.path.realpath(p) for p in writable if os.path.isdir(p)]
    private = {"/dev/shm", "/proc", *keep}
    if mounts:
        for path in keep:  # a mount of its own, which the read-only remounts below leave writable
            _mount(path, path, None, MS_BIND | MS_REC)
        for point, flags in reversed(writable_mounts()):  # innermost first
            if point in private or point.startswith("/proc/"):
                continue
            with contextlib.suppress(ConfineError):  # reported below if it stays writable
                _mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)
    still = [point for point, _ in writable_mounts() if point not in private and not point.startswith("/proc/")]
    drop_capabilities()
    seccomp.install()
    return still


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """No capability left to this thread: ambient cleared, bounding set emptied, then capset to zero."""
    _LIBC.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM where none is held: nothing to drop
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words
    data = (_CapData * 2)()
    _check(_LIBC.capset(ctypes.byref(header), data), "capset")


def dumpable(flag: bool) -> None:
    """Not dumpable: nobody of this uid without CAP_SYS_PTRACE may open this process's /proc files
    (its fds, memory, environment), so a job that shares the zygote's pid namespace (plain mode)
    can't reopen the zygote's channel through /proc. A standby is dumpable only while it writes its
    own uid_map (a non-dumpable process's /proc files belong to root)."""
    _LIBC.prctl(PR_SET_DUMPABLE, int(flag), 0, 0, 0)


def namespace_ids() -> dict[str, str]:
    """This process's namespaces, as /proc/self/ns names them (compared with the zygote's own)."""
    found = {}
    for name in ("user", "pid", "net", "ipc", "mnt"):
        with contextlib.suppress(OSError):
            found[name] = os.readlink(f"/proc/self/ns/{name}")
    return found


def _status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def measure(pid: int) -> dict:
    """What holds for the job `pid`, read from outside it: its uids, capabilities (every thread),
    no_new_privs, seccomp, and whether its pid namespace is its own (NSpid one level deeper than
    the zygote's) and its user namespace is not the zygote's (uid_map)."""
    status = _status(pid)
    mine = _status(os.getpid())  # the zygote's own, to compare pid namespace depth
    threads_with_caps = 0
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError):
                if int(_status(int(task)).get("CapEff", "0"), 16) and task != str(pid):
                    threads_with_caps += 1
    own_pid_ns = len(status.get("NSpid", "").split()) > len(mine.get("NSpid", "").split())
    return {"uid": int(status["Uid"].split()[1]), "gid": int(status["Gid"].split()[1]),
            "groups": [int(group) for group in status.get("Groups", "").split()], "capabilities": status.get("CapEff", ""),
            "threads_with_capabilities": threads_with_caps, "no_new_privs": status.get("NoNewPrivs") == "1",
            "seccomp": status.get("Seccomp") == "2", "own_pid_namespace": own_pid_ns}
