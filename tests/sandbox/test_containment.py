"""Containment by construction: each job in a box of its own (sandbox/confine.py, seccomp.py),
whoever runs kernelloop. These run as the suite runs (root in CI), and again as an unprivileged user
where the test can switch to one."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelloop.sandbox import seccomp
from kernelloop.sandbox.isolation import probe_bubblewrap
from kernelloop.sandbox.runner import Zygote

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEM = FIXTURES / "problems" / "relu.py"
BWRAP = probe_bubblewrap()
needs_bwrap = pytest.mark.skipif(not BWRAP.usable, reason=f"bubblewrap unusable here: {BWRAP.note}")
NAMESPACES = ["ipc", "mnt", "net", "pid", "user"]
ZEROS = """
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def zero_kernel(out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.zeros([BLOCK], dtype=tl.float32), mask=offsets < n_elements)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        zero_kernel[(triton.cdiv(x.numel(), 1024),)](out, x.numel(), BLOCK=1024)
        return out
"""


# --------------------------------------------------------------------------- seccomp


def _kernel_numbers(header: Path, prefix: str = "__NR_") -> dict[str, int]:
    numbers = {}
    for line in header.read_text().splitlines():
        match = re.match(rf"#define {prefix}(\w+)\s+(\d+)\b", line)
        if match:
            numbers[match.group(1)] = int(match.group(2))
    return numbers


@pytest.mark.parametrize("column, header", [(0, "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
                                            (1, "/usr/include/asm-generic/unistd.h")])
def test_the_filter_names_each_call_by_the_kernels_own_number(column, header):
    if not Path(header).is_file():
        pytest.skip(f"{header} is not installed (linux-libc-dev)")
    known = _kernel_numbers(Path(header))
    known.update(_kernel_numbers(Path(header), "__NR3264_"))
    for name, numbers in {**seccomp.DENIED, "clone": seccomp.CLONE, "clone3": seccomp.CLONE3}.items():
        if numbers[column] is not None:
            assert known.get(name) == numbers[column], f"{name}: {numbers[column]} where the kernel says {known.get(name)}"


def _in_filtered_child(code: str) -> dict:
    """Run `code` (which sets `result`) in a forked child under the filter; its result as a dict."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        scope: dict = {"ctypes": ctypes, "os": os}
        try:
            seccomp.install()
            exec(code, scope)  # noqa: S102 - test code
            os.write(write, json.dumps(scope["result"]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(text)


@pytest.mark.skipif(not seccomp.supported(), reason="no filter for this architecture")
def test_the_filter_refuses_what_reaches_past_the_job_and_keeps_what_kernels_need():
    got = _in_filtered_child("""
libc = ctypes.CDLL(None, use_errno=True)
def call(*args):
    done = libc.syscall(*args)
    return 0 if done >= 0 else ctypes.get_errno()
import platform, subprocess, threading
col = 0 if platform.machine() == 'x86_64' else 1
from kernelloop.sandbox import seccomp as s
result = {name: call(s.DENIED[name][col], 0, 0, 0, 0, 0) for name in ('unshare', 'setns', 'mount', 'ptrace', 'bpf',
          'process_vm_writev', 'perf_event_open', 'keyctl', 'io_uring_setup', 'pivot_root')}
result['clone_newuser'] = call(s.CLONE[col], 0x10000000 | 17, 0, 0, 0, 0)
result['clone3'] = call(s.CLONE3[col], 0, 0)
pid = os.fork()
if pid == 0:
    os._exit(7)
result['fork'] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
box = []
thread = threading.Thread(target=lambda: box.append(1)); thread.start(); thread.join()
result['thread'] = box
result['subprocess'] = subprocess.run(['true']).returncode
grep = subprocess.run(['grep', '^Seccomp:', '/proc/self/status'], capture_output=True, text=True)
result['seccomp_in_child'] = grep.stdout.split()[1]
""")
    for name in ("unshare", "setns", "mount", "ptrace", "bpf", "process_vm_writev", "perf_event_open", "keyctl",
                 "io_uring_setup", "pivot_root", "clone_newuser"):
        assert got[name] == errno.EPERM, (name, got[name])
    assert got["clone3"] == errno.ENOSYS  # so the C library falls back to clone, whose flags the filter reads
    assert got["fork"] == 7 and got["thread"] == [1] and got["subprocess"] == 0
    assert got["seccomp_in_child"] == "2"  # inherited across exec


# --------------------------------------------------------------------------- the box of one job


def _box_of_a_job(tmp_path: Path, mode: str) -> tuple[dict, dict]:
    work_dir = tmp_path / "ws" / "verifier" / "cpu"
    zygote = Zygote("tests.sandbox.sandbox_probe", "cpu", work_dir, hide=[tmp_path / "ws"], isolation=mode)
    try:
        outside = work_dir / "planted.txt"
        actions = {
            "procs": ["listdir", "/proc"],
            "write_work_dir": ["write", str(outside)],
            "write_tmp": ["write", "/tmp/kernelloop-box-test"],
            "write_own": ["write", str(work_dir / "jobs" / "j" / "mine.txt")],
            "status": ["shell", "grep -E '^(CapEff|Seccomp):' /proc/self/status"],
            "tempfile": ["tempfile", None],
        }
        outcome = zygote.run({"kind": "probe", "actions": actions}, work_dir / "jobs" / "j", 30, 30)
    finally:
        zygote.close()
    assert outcome.exit_code == 0, outcome.stderr_tail
    assert not outside.exists()
    return outcome.box, outcome.result


@needs_bwrap
def test_a_job_in_bubblewrap_is_boxed_whoever_runs_us(tmp_path):
    box, got = _box_of_a_job(tmp_path, "bwrap")
    assert box["isolated"], box
    assert box["own_namespaces"] == NAMESPACES
    assert box["host_uid"] != 0 and int(box["capabilities"], 16) == 0 and box["seccomp"] and box["no_new_privs"]
    assert box["writable_outside_job"] == []
    pids = [int(p) for p in eval(got["procs"][4:]) if p.isdigit()]  # noqa: S307 - the probe's own list repr
    assert 1 in pids and len(pids) <= 3, pids  # itself (pid 1 of its namespace), and nothing of the worker's
    assert got["write_work_dir"].startswith("OSError") and got["write_tmp"].startswith("OSError")
    assert got["write_own"] == "ok: written"
    # Temporary files go to its own scratch dir, though the worker had cached /tmp (read-only here)
    assert got["tempfile"].startswith(f"ok: {tmp_path / 'ws' / 'verifier' / 'cpu' / 'jobs' / 'j'}"), got["tempfile"]
    assert "CapEff:\t0000000000000000" in got["status"] and "Seccomp:\t2" in got["status"]


def test_a_plain_job_still_gets_seccomp_and_says_it_is_not_isolated(tmp_path):
    box, got = _box_of_a_job(tmp_path, "plain")
    assert not box["isolated"] and "plain mode" in box["why"]
    assert box["seccomp"] and box["no_new_privs"] and int(box["capabilities"], 16) == 0


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root")
def test_the_same_box_holds_when_an_unprivileged_user_runs_us():
    """The suite's own Python, started as nobody: where that user can reach the install, the same
    job gets the same box (bubblewrap then makes the user namespace itself), and attacks on the box
    get the verdicts they get as root."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="kernelloop-nobody-"))  # pytest's own tmp dirs are root's alone
    tmp_path.chmod(0o777)
    try:
        _as_nobody(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _as_nobody(tmp_path: Path) -> None:
    site = [p for p in sys.path if p.endswith("site-packages")]
    script = (f"import json, sys; sys.path[:0] = {[str(Path(__file__).resolve().parents[2]), *site]!r}; "
              "from pathlib import Path; from tests.sandbox.test_containment import _box_of_a_job, _attacks; "
              f"print(json.dumps([*_box_of_a_job(Path({str(tmp_path)!r}), 'bwrap'), _attacks(Path({str(tmp_path)!r}))]))")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(site)}
    # This interpreter, or the system's of the same version where nobody can't reach this one (pyenv under /root).
    for python in (sys.executable, f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"):
        try:
            done = subprocess.run([python, "-c", script], user=65534, group=65534, extra_groups=[], cwd="/",
                                  capture_output=True, text=True, timeout=300, env=env)
        except OSError:
            continue
        if "Permission denied" not in done.stderr and "No module named" not in done.stderr:
            break
    else:
        pytest.skip("nobody can reach no Python install with this suite's packages")
    assert done.returncode == 0, done.stderr[-2000:]
    box, got, found = json.loads(done.stdout.strip().splitlines()[-1])
    assert box["isolated"] and box["own_namespaces"] == NAMESPACES and box["host_uid"] == 65534, box
    # The attacks on the box get the verdicts they get as root, and later jobs are judged right.
    verdicts = {name: status for name, (status, _) in found.items()}
    assert verdicts == {"channel_takeover_via_proc": "correct", "plant_package_in_workdir": "correct",
                        "root_remount_and_write": "correct", "honest": "correct", "zeros": "incorrect"}, found


def _attacks(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """A few of the box's attack fixtures, then an honest and a zeros kernel, in one Verifier with
    the static rules off: each one's verdict status and reason (and the end of its stderr)."""
    from kernelloop.tools.verify.verifier import Verifier

    def seen(source: str) -> tuple[str, str]:
        verdict = _verify(verifier, source)
        return verdict.status.value, f"{verdict.reason} | {verdict.stderr_tail[-600:]}"

    found = {}
    with Verifier(device="cpu", workspace=tmp_path / "attacks", time_it=False, compile_timeout_s=30,
                  run_timeout_s=30, static_checks=False) as verifier:
        for name in ("channel_takeover_via_proc", "plant_package_in_workdir", "root_remount_and_write"):
            found[name] = seen((FIXTURES / "cheats" / f"{name}.py").read_text())
        found["honest"] = seen((FIXTURES / "honest" / "relu_triton.py").read_text())
        found["zeros"] = seen(ZEROS)
    return found


# --------------------------------------------------------------------------- attacks, with the rules off


@pytest.fixture(scope="module")
def unlinted(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    workspace = tmp_path_factory.mktemp("containment")
    with Verifier(device="cpu", workspace=workspace, time_it=False, compile_timeout_s=30, run_timeout_s=30,
                  static_checks=False) as verifier:
        yield verifier


def _verify(verifier, source: str):
    from kernelloop.problem import Candidate, Problem

    return verifier.verify(Candidate(source=source, path=None), Problem.from_file(PROBLEM))


@needs_bwrap
def test_a_channel_takeover_leaves_later_jobs_judged_right(unlinted):
    """The review's attack: a job answered for the jobs after it, so an honest kernel came out
    incorrect and a zeros kernel correct. Now it finds no pipe but its own."""
    from kernelloop.records import Status

    attack = _verify(unlinted, (FIXTURES / "cheats" / "channel_takeover_via_proc.py").read_text())
    assert attack.status is Status.correct, attack.reason  # its output turns to zeros if it reached a pipe
    assert attack.containment["isolated"]
    honest = _verify(unlinted, (FIXTURES / "honest" / "relu_triton.py").read_text())
    zeros = _verify(unlinted, ZEROS)
    assert honest.status is Status.correct, honest.reason
    assert zeros.status is Status.incorrect, zeros.reason


@needs_bwrap
def test_plants_and_swaps_leave_the_workspace_as_it_was(unlinted):
    from kernelloop.records import Status

    for name in ("plant_package_in_workdir", "swap_workspace_symlinks"):
        verdict = _verify(unlinted, (FIXTURES / "cheats" / f"{name}.py").read_text())
        assert verdict.status is Status.correct, f"{name}: {verdict.reason}"
    work_dir = unlinted.root
    assert not (work_dir / "kernelloop").exists() and not (work_dir / "sitecustomize.py").exists()
    assert (work_dir / "zygote.log").is_file() and not (work_dir / "zygote.log").is_symlink()
    assert not any(p.is_symlink() for p in work_dir.iterdir())
    assert _verify(unlinted, (FIXTURES / "honest" / "relu_triton.py").read_text()).status is Status.correct


def test_strict_refuses_to_judge_without_isolation(tmp_path, monkeypatch):
    from kernelloop.records import Code, Status
    from kernelloop.tools.verify.verifier import Verifier

    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain")
    with Verifier(device="cpu", workspace=tmp_path, time_it=False, strict=True) as verifier:
        verdict = _verify(verifier, (FIXTURES / "honest" / "relu_triton.py").read_text())
    assert verdict.status is Status.rejected and verdict.code is Code.not_isolated
    assert "not isolated" in verdict.reason or "was not isolated" in verdict.reason


def test_every_verdict_says_what_held(tmp_path, monkeypatch):
    from kernelloop.tools.verify.verifier import Verifier

    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain")
    with Verifier(device="cpu", workspace=tmp_path, time_it=False) as verifier:
        verdict = _verify(verifier, (FIXTURES / "honest" / "relu_triton.py").read_text())
    assert verdict.containment["sandbox"] == "plain" and not verdict.containment["isolated"]
    assert any(w.startswith("not isolated: plain mode") for w in verdict.warnings)


@needs_bwrap
def test_a_project_dotenv_never_reaches_a_verdict(monkeypatch):
    """The red team's hole: run from a project whose .env (0644) holds the key, a job read and
    printed it. The file is masked in the sandbox, and the parent cuts its secrets from every tail."""
    import shutil
    import tempfile

    from kernelloop.records import Status
    from kernelloop.tools.verify.verifier import Verifier

    secret = "sk-test-DOTENV-5678"
    project = Path(tempfile.mkdtemp(prefix="kernelloop-project-"))
    try:
        project.chmod(0o755)
        (project / ".env").write_text(f"KERNELLOOP_API_KEY={secret}\n")
        (project / "kernelloop.toml").write_text(f'api_key = "{secret}"\n')
        monkeypatch.chdir(project)
        with Verifier(device="cpu", workspace=project / "ws", time_it=False, static_checks=False) as verifier:
            verdict = _verify(verifier, (FIXTURES / "cheats" / "redteam_read_project_dotenv.py").read_text())
            printer = _verify(verifier, (FIXTURES / "honest" / "relu_triton.py").read_text().replace(
                "        return out", f"        print({secret!r}, flush=True)\n        return out"))
    finally:
        shutil.rmtree(project, ignore_errors=True)
    assert verdict.status is Status.correct, verdict.reason  # its output turns to zeros if it read either file
    text = "\n".join((verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail))
    assert secret not in text
    # A secret that reaches a job some other way (here, its own source) is cut from what it prints.
    assert secret not in printer.stdout_tail and "[redacted]" in printer.stdout_tail


@needs_bwrap
def test_a_linked_project_dotenv_never_reaches_a_job(monkeypatch):
    """review36: run from a project whose .env is a link to a secrets file outside /tmp and home (both hidden
    in the box), the link was left unmasked (only plain files were), so a job read the key through it and
    printed it one character apart, past every redaction. The file a link leads to is masked too."""
    import shutil
    import tempfile

    from kernelloop.records import Status
    from kernelloop.tools.verify.verifier import Verifier

    secret = "sk-test-LINKED-4321"
    repo = Path(__file__).resolve().parents[2]  # visible in the box (read-only), unlike /tmp and home
    project = Path(tempfile.mkdtemp(prefix="r36-linked-project-", dir=repo))
    store = Path(tempfile.mkdtemp(prefix="r36-linked-secrets-", dir=repo))
    try:
        for made in (project, store):
            made.chmod(0o755)
        (store / "kl.env").write_text(f"KERNELLOOP_API_KEY={secret}\n")
        (store / "kl.toml").write_text(f'api_key = "{secret}"\n')
        (project / ".env").symlink_to(store / "kl.env")
        (project / "kernelloop.toml").symlink_to(store / "kl.toml")
        monkeypatch.chdir(project)
        with Verifier(device="cpu", workspace=Path(tempfile.mkdtemp(prefix="r36-ws-")), time_it=False,
                      static_checks=False) as verifier:
            verdict = _verify(verifier, (FIXTURES / "cheats" / "review36_read_linked_dotenv.py").read_text())
    finally:
        shutil.rmtree(project, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
    text = "\n".join((verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail))
    assert " ".join(secret) not in text and secret not in text, verdict.stdout_tail[-1000:]
    assert verdict.status is Status.correct, verdict.reason  # its output turns to zeros if it read either file


def test_a_job_dir_of_any_depth_is_removed_without_recursion(tmp_path):
    from kernelloop.sandbox.runner import dir_usage, remove_job_dir

    deep = tmp_path / "job"
    here = deep
    here.mkdir()
    fd = os.open(here, os.O_RDONLY)
    for _ in range(3000):  # deeper than Python's recursion limit
        os.mkdir("d", dir_fd=fd)
        next_fd = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = next_fd
    os.close(fd)
    assert dir_usage(deep, 10) is None  # past its entry limit: over budget, never a RecursionError
    remove_job_dir(deep)
    assert not deep.exists()
