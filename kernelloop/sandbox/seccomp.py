"""The seccomp filter every job runs under: system calls that only reach past the job are refused.

A classic-BPF program over `struct seccomp_data`, installed with prctl(PR_SET_SECCOMP) after
no_new_privs. Built here rather than through libseccomp: the verifier must run where only torch,
triton and nvidia-ml-py are installed (a bare GPU node has no libseccomp bindings), and a deny list
over two architectures is a short, fixed program. tests/sandbox/test_containment.py checks the numbers
against the kernel's headers where they are installed, and that each call is refused in a job.

What it refuses (EPERM), and why a kernel needs none of it:
  namespaces and mounts  unshare, setns, mount and the new mount API, pivot_root, chroot, and
                         clone with any CLONE_NEW* flag: a job can't build itself a new view of
                         the machine or regain capabilities in a fresh user namespace
  other processes        ptrace, process_vm_readv/writev, kcmp, pidfd_getfd, process_madvise
  the kernel itself      bpf, perf_event_open, kexec, module loading, keyrings, userfaultfd,
                         io_uring (its requests bypass this filter), reboot, swap, syslog, clocks,
                         quotas, acct, host and domain names, I/O ports, vhangup, file handles
clone3 gets ENOSYS, so the C library falls back to clone, whose flags a filter can read (clone3
passes them in memory it can't). A call made under another architecture's ABI (x32, i386) ends
the process: the numbers below would not mean the same there.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16
# BPF opcodes (linux/bpf_common.h)
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K
# Return values (linux/seccomp.h)
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1  # every thread of the process, and no_new_privs on each
X32_SYSCALL_BIT = 0x40000000
# Every CLONE_NEW* flag: NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
CLONE_NEW_FLAGS = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# name: (x86_64, aarch64); None where the architecture has no such call.
DENIED: dict[str, tuple[int | None, int | None]] = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272),
    "pidfd_getfd": (438, 438), "process_madvise": (440, 440),
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "bpf": (321, 280), "perf_event_open": (298, 241), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106), "add_key": (248, 217),
    "request_key": (249, 218), "keyctl": (250, 219), "userfaultfd": (323, 282), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "reboot": (169, 142), "swapon": (167, 224),
    "swapoff": (168, 225), "syslog": (103, 116), "settimeofday": (164, 170), "clock_settime": (227, 112),
    "clock_adjtime": (305, 266), "adjtimex": (159, 171), "quotactl": (179, 60), "acct": (163, 89),
    "sethostname": (170, 161), "setdomainname": (171, 162), "iopl": (172, None), "ioperm": (173, None),
    "vhangup": (153, 58), "name_to_handle_at": (303, 264), "open_by_handle_at": (304, 265),
    "lookup_dcookie": (212, 18), "uselib": (134, None), "fanotify_init": (300, 262),
}
CLONE = (56, 220)
CLONE3 = (435, 435)
# AUDIT_ARCH_* (linux/audit.h), and which column of the tables above it reads.
ARCHES = {"x86_64": (0xC000003E, 0), "amd64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1), "arm64": (0xC00000B7, 1)}
SECCOMP_SYSCALL = (317, 277)  # seccomp(2): (x86_64, aarch64)


class SeccompError(OSError):
    """The filter could not be installed here; the message says why."""


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def supported(machine: str | None = None) -> bool:
    return (machine or platform.machine()).lower() in ARCHES


def program(machine: str | None = None) -> bytes:
    """The filter for this architecture, as the kernel's `struct sock_filter` array."""
    arch = (machine or platform.machine()).lower()
    if arch not in ARCHES:
        raise SeccompError(f"no seccomp filter for the {arch} architecture (x86_64 and aarch64 have one)")
    audit_arch, column = ARCHES[arch]
    denied: list[int] = sorted({nr for numbers in DENIED.values() if (nr := numbers[column]) is not None})
    clone_nr, clone3_nr = CLONE[column], CLONE3[column]
    # Layout: [arch check][x32 check][deny jumps][clone jump][clone3 jump] ALLOW | clone check | DENY ENOSYS KILL
    head: list[tuple[int, int, int, int]] = [(LD_W_ABS, 0, 0, ARCH_OFFSET), (JEQ_K, 1, 0, audit_arch)]
    head.append((-1, 0, 0, 0))  # placeholder: jump to KILL
    head.append((LD_W_ABS, 0, 0, NR_OFFSET))
    if column == 0:
        head.append((-2, 0, 0, 0))  # placeholder: nr >= X32 bit -> KILL
    body = [(-3, 0, 0, nr) for nr in denied]  # nr == k -> DENY
    body.append((-4, 0, 0, clone_nr))  # -> clone check
    body.append((-5, 0, 0, clone3_nr))  # -> ENOSYS
    tail = [(RET_K, 0, 0, RET_ALLOW),
            (LD_W_ABS, 0, 0, ARG0_OFFSET),  # clone check: the low 32 bits of the flags
            (JSET_K, 0, 1, CLONE_NEW_FLAGS),
            (RET_K, 0, 0, RET_ERRNO | errno.EPERM),  # DENY (also the clone check's "set" branch)
            (RET_K, 0, 0, RET_ALLOW),
            (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS),
            (RET_K, 0, 0, RET_KILL_PROCESS)]
    insns = head + body + tail
    labels = {"allow": len(head) + len(body), "clone": len(head) + len(body) + 1,
              "deny": len(head) + len(body) + 3, "enosys": len(head) + len(body) + 5,
              "kill": len(head) + len(body) + 6}
    # The clone check's JSET jumps to DENY when a flag is set, else to the ALLOW after it.
    out = b""
    for index, (code, jt, jf, k) in enumerate(insns):

        def offset(label: str, at: int = index) -> int:
            distance = labels[label] - at - 1
            if not 0 <= distance <= 255:
                raise SeccompError(f"seccomp jump of {distance} does not fit a BPF instruction")
            return distance

        if code == -1:
            out += _insn(RET_K, 0, 0, RET_KILL_PROCESS)
        elif code == -2:
            out += _insn(JGE_K, offset("kill"), 0, X32_SYSCALL_BIT)
        elif code == -3:
            out += _insn(JEQ_K, offset("deny"), 0, k)
        elif code == -4:
            out += _insn(JEQ_K, offset("clone"), 0, k)
        elif code == -5:
            out += _insn(JEQ_K, offset("enosys"), 0, k)
        else:
            out += _insn(code, jt, jf, k)
    return out


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(machine: str | None = None) -> None:
    """no_new_privs, then the filter on every thread of the process (TSYNC): threads a library
    started earlier (the CUDA driver's, in a job prepared ahead) are bound as well."""
    arch = (machine or platform.machine()).lower()
    code = program(arch)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"no_new_privs refused: {errno.errorcode.get(err, '?')}")
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc.syscall.restype = ctypes.c_long
    done = libc.syscall(ctypes.c_long(SECCOMP_SYSCALL[ARCHES[arch][1]]), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))
    if done != 0:
        err = ctypes.get_errno()
        why = f"thread {done} could not be synchronised" if done > 0 else errno.errorcode.get(err, "?")
        raise SeccompError(err, f"seccomp filter refused: {why}")
