"""The sandbox's isolation: limits on every child in both modes, and, where bubblewrap works,
no network, a read-only filesystem, hidden home/workspace and no sight of other processes.

Process tests run a real zygote with a small probe job (tests/sandbox/sandbox_probe.py: no torch,
so a zygote starts in a fraction of a second) that tries what a hostile candidate would.
Tests of the bubblewrap mode check what this machine supports: contained where bubblewrap
works, a clear refusal and a plain fallback where it doesn't.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import kernelloop
from kernelloop.sandbox import isolation
from kernelloop.sandbox.isolation import (
    ChildLimits,
    IsolationError,
    Mount,
    Probe,
    bubblewrap_argv,
    child_limits,
    choose_mode,
    probe_bubblewrap,
    sandbox_mounts,
    visible,
)
from kernelloop.sandbox.runner import Zygote

PROBE_MODULE = "tests.sandbox.sandbox_probe"
SECRET = "sk-test-SECRET-isolation-5678"
BWRAP = probe_bubblewrap()
TINY = ChildLimits(cpu_s=60, file_size_bytes=1 << 20, gpu_memory_fraction=0.9)


def probe_job(actions: dict[str, tuple], **fields) -> dict:
    """A probe job: {label: (action, argument)}; its result maps each label to what happened."""
    return {"kind": "probe", "actions": {label: list(action) for label, action in actions.items()}, **fields}


@pytest.fixture
def fake_home(tmp_path, monkeypatch) -> Path:
    """A home dir holding a secret, as the orchestrator's $HOME (the sandbox hides $HOME)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine api.example.com password {SECRET}\n")
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def workspace(tmp_path) -> Path:
    """A workspace with a checkpoint DB beside the verifier's work dir."""
    space = tmp_path / "ws"
    (space / "verifier" / "cpu").mkdir(parents=True)
    (space / "checkpoints.sqlite").write_text(SECRET)
    return space


def start(workspace: Path, isolation_mode: str, limits: ChildLimits = TINY) -> Zygote:
    return Zygote(PROBE_MODULE, "cpu", workspace / "verifier" / "cpu", hide=[workspace], isolation=isolation_mode,
                  limits=limits)


def jobs(workspace: Path) -> Path:
    """Where job dirs go: inside the work dir, the one place a bubblewrapped job can write."""
    return workspace / "verifier" / "cpu" / "jobs"


def sleepers(marker: str) -> list[int]:
    """Host pids of `sleep MARKER` processes (what a probe job spawns to outlive itself)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == f"sleep\0{marker}\0".encode():
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile
                continue
    return found


def running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an orphan's zombie may wait for a busy init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# --------------------------------------------------------------------------- plans, no processes


def test_mounts_hide_home_tmp_and_the_workspace_but_not_the_work_dir(workspace, fake_home):
    work = workspace / "verifier" / "cpu"
    mounts = sandbox_mounts(work, "cpu", hide=[workspace])
    assert not visible(workspace / "checkpoints.sqlite", mounts)
    assert not visible(workspace / "runs" / "t" / "problem.py", mounts)
    assert not visible(fake_home / ".netrc", mounts)
    assert visible(work / "jobs" / "cand-1" / "candidate.py", mounts)
    assert visible(Path(kernelloop.__file__), mounts)
    assert visible(Path(sys.executable), mounts)
    writable = [m.path for m in mounts if m.kind == "rw"]
    assert writable == [work.resolve()]  # the one writable place
    assert mounts[-1] == Mount("ro", work.resolve() / isolation.INPUTS_DIR)  # staged inputs: read-only, last


def test_a_python_install_under_home_is_bound_back_read_only(monkeypatch):
    home = Path(kernelloop.__file__).resolve().parents[2]  # the package lives under this "home"
    monkeypatch.setenv("HOME", str(home))
    mounts = sandbox_mounts(Path("/var/tmp/kernelloop-test-work"), "cpu")
    assert visible(Path(kernelloop.__file__), mounts)
    assert not visible(home / "some-other-project" / "secrets.env", mounts)
    assert Mount("ro", Path(kernelloop.__file__).resolve().parents[1]) in mounts


def test_bubblewrap_argv_has_the_namespaces_and_the_right_dev(monkeypatch, tmp_path):
    monkeypatch.setattr(isolation, "probe_bubblewrap", lambda: Probe(True, "/usr/bin/bwrap", "works"))
    monkeypatch.setattr(isolation, "gpu_device_nodes", lambda: [Path("/dev/nvidia0"), Path("/dev/nvidiactl")])
    cpu = bubblewrap_argv(sandbox_mounts(tmp_path, "cpu"), tmp_path)
    cuda = bubblewrap_argv(sandbox_mounts(tmp_path, "cuda"), tmp_path)
    for argv in (cpu, cuda):
        assert argv[0] == "/usr/bin/bwrap" and argv[-1] == "--"
        assert {"--unshare-net", "--unshare-pid"} <= set(argv)
        # --die-with-parent would kill the zygote when the *thread* that started it exits (pool threads)
        assert "--die-with-parent" not in argv
        assert argv[argv.index("--ro-bind"):argv.index("--ro-bind") + 3] == ["--ro-bind", "/", "/"]
    joined_cpu, joined_cuda = " ".join(cpu), " ".join(cuda)
    assert "--dev /dev" in joined_cpu and "--dev-bind" not in joined_cpu
    # The GPU's nodes alone on a minimal /dev: never the host's whole /dev (its disks)
    assert "--dev /dev" in joined_cuda and "--dev-bind /dev /dev" not in joined_cuda
    assert "--dev-bind-try /dev/nvidia0 /dev/nvidia0" in joined_cuda and "--dev-bind-try /dev/nvidiactl" in joined_cuda
    # Root outside is never root inside: a user namespace with no capabilities, or (as root) only the
    # three the worker uses in its first lines, before it drops to the sandbox user (and loses them)
    for argv in (cpu, cuda):
        assert argv[argv.index("--cap-drop") + 1] == "ALL"
        assert ("--unshare-user" in argv) == (os.geteuid() != 0)
        assert set(argv[i + 1] for i, a in enumerate(argv) if a == "--cap-add") <= {"CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN"}


def test_mode_choice_follows_the_environment_and_explains_a_fallback(monkeypatch):
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "plain")
    assert choose_mode()[0] == "plain"
    assert choose_mode("auto")[0] == ("bubblewrap" if BWRAP.usable else "plain")  # explicit beats the environment
    monkeypatch.setenv("KERNELLOOP_SANDBOX", "chroot")
    with pytest.raises(IsolationError, match="use auto, bwrap or plain"):
        choose_mode()
    monkeypatch.delenv("KERNELLOOP_SANDBOX")
    not_installed = Probe(False, None, "bubblewrap (bwrap) is not installed")
    monkeypatch.setattr(isolation, "probe_bubblewrap", lambda: not_installed)
    mode, note = choose_mode()
    assert mode == "plain" and "not installed" in note
    with pytest.raises(IsolationError, match="KERNELLOOP_SANDBOX=bwrap, but bubblewrap"):
        choose_mode("bwrap")


def test_child_limits_and_the_gpu_memory_fraction(monkeypatch):
    limits = child_limits(compile_timeout_s=180, run_timeout_s=300)
    assert limits.cpu_s == int(2 * (180 + 3 * 300)) + 1
    assert limits.gpu_memory_fraction == 0.9 and limits.file_size_bytes == 8 << 30
    monkeypatch.setenv("KERNELLOOP_GPU_MEMORY_FRACTION", "0.5")
    assert child_limits(1, 1).gpu_memory_fraction == 0.5
    assert child_limits(1, 1, gpu_fraction=0.25).gpu_memory_fraction == 0.25  # explicit beats the environment
    for bad in ("1.5", "0", "half"):
        monkeypatch.setenv("KERNELLOOP_GPU_MEMORY_FRACTION", bad)
        with pytest.raises(IsolationError, match="KERNELLOOP_GPU_MEMORY_FRACTION|outside"):
            child_limits(1, 1)


def test_limits_never_exceed_what_the_process_already_has():
    """A shell's lower `ulimit -f` stays: asking for more would fail (and crash every child)."""
    script = ("import resource\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))\n"
              "from kernelloop.sandbox.isolation import apply_child_limits\n"
              "apply_child_limits({'cpu_s': 100, 'file_size_bytes': 8 << 30, 'gpu_memory_fraction': 0.9}, 1 << 34)\n"
              "print([resource.getrlimit(r) for r in (resource.RLIMIT_FSIZE, resource.RLIMIT_CPU,"
              " resource.RLIMIT_CORE, resource.RLIMIT_AS)])")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == str([(1 << 20, 1 << 20), (100, 110), (0, 0), (1 << 34, 1 << 34)])


# --------------------------------------------------------------------------- limits, both modes


MODES = ["plain", "auto"]  # auto: bubblewrap where it works here


@pytest.mark.parametrize("mode", MODES)
def test_file_size_and_cpu_time_are_capped(tmp_path, workspace, mode):
    limits = ChildLimits(cpu_s=1, file_size_bytes=1 << 20, gpu_memory_fraction=0.9)
    zygote = start(workspace, mode, limits)
    try:
        big = zygote.run(probe_job({"write_bytes": ("write_bytes", 2 << 20)}), jobs(workspace) / "big", 30, 30)
        assert big.result["write_bytes"].startswith("OSError: [Errno 27] File too large"), big.result
        spin = zygote.run(probe_job({"spin": ("spin", 30)}), jobs(workspace) / "spin", 30, 30)
        assert not spin.timed_out and spin.elapsed_s < 20
        assert spin.exit_code in (-signal.SIGXCPU, -signal.SIGKILL), spin  # the CPU-time limit, not the timeout
    finally:
        zygote.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_kills_the_job_and_what_it_spawned(tmp_path, workspace, mode):
    marker = f"{4000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"  # a unique `sleep` argument
    zygote = start(workspace, mode)
    try:
        outcome = zygote.run(probe_job({"hang": ("spawn_and_hang", marker)}), jobs(workspace) / "hang", 1.0, 1.0)
        assert outcome.timed_out
        assert wait_until(lambda: not sleepers(marker)), "the job's grandchild outlived the timeout"
        after = zygote.run(probe_job({"env": ("env", "HOME")}), jobs(workspace) / "after", 10, 10)  # it carries on
        assert after.result == {"env": f"ok: {zygote.cache_dir}"}
    finally:
        zygote.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_daemon_left_by_a_job_is_gone_before_its_exit_is_reported(workspace, mode):
    """fork, setsid, fork: out of the job's process group, so killing the group misses it; the
    zygote, a child subreaper, inherits it and ends it before the parent reads the job's files."""
    marker = f"{6000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    zygote = start(workspace, mode)
    try:
        outcome = zygote.run(probe_job({"daemon": ("daemon", marker)}), jobs(workspace) / "daemon", 30, 30)
        assert outcome.result == {"daemon": "ok: left a daemon"}
        assert not sleepers(marker), "the daemon outlived its job"
        after = zygote.run(probe_job({"env": ("env", "HOME")}), jobs(workspace) / "after", 10, 10)  # it carries on
        assert after.result == {"env": f"ok: {zygote.cache_dir}"}
    finally:
        zygote.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_chain_deeper_than_any_kill_round_is_gone_with_its_job(workspace, mode):
    """A review's attack: nested processes in new sessions, 87 deep, outlived the job and rewrote a
    later candidate's outputs. The zygote stops the whole tree first (a stopped process can't
    fork), then kills it."""
    marker = f"{6000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    zygote = start(workspace, mode)
    try:
        outcome = zygote.run(probe_job({"chain": ("chain", f"150:{marker}")}), jobs(workspace) / "chain", 30, 30)
        assert outcome.result == {"chain": "ok: left a chain"}
        assert not sleepers(marker), f"{len(sleepers(marker))} processes of the chain outlived their job"
    finally:
        zygote.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_orchestrator_takes_its_jobs_with_it(tmp_path, workspace, mode):
    """SIGKILL of the process holding the zygote: the zygote sees stdin close, kills the job's
    group and exits; nothing keeps running."""
    marker = f"{5000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    pid_file = tmp_path / "zygote.pid"
    script = (f"from pathlib import Path\nfrom kernelloop.sandbox.runner import Zygote\n"
              f"z = Zygote({PROBE_MODULE!r}, 'cpu', Path({str(workspace / 'verifier' / 'cpu')!r}), "
              f"isolation={mode!r})\n"
              f"Path({str(pid_file)!r}).write_text(str(z.proc.pid))\n"
              f"z.run({probe_job({'hang': ('spawn_and_hang', marker)})!r}, "
              f"Path({str(jobs(workspace) / 'hang')!r}), 600, 600)\n")
    orchestrator = subprocess.Popen([sys.executable, "-c", script], cwd=Path(kernelloop.__file__).parents[1])
    try:
        assert wait_until(lambda: sleepers(marker), 60), "the job never started"
        orchestrator.send_signal(signal.SIGKILL)
        orchestrator.wait(timeout=10)
        assert wait_until(lambda: not sleepers(marker)), "the job outlived its orchestrator"
        zygote_pid = int(pid_file.read_text())
        assert wait_until(lambda: not running(zygote_pid)), "the sandbox outlived its orchestrator"
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()


# --------------------------------------------------------------------------- containment (bubblewrap)


class _Greeter:
    """A TCP server on the host's loopback: a job that reaches it has the host's network."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"hello from the host")

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def greeter():
    server = _Greeter()
    yield server
    server.close()


def test_bubblewrap_contains_the_job_or_is_refused_clearly(tmp_path, workspace, fake_home, greeter, monkeypatch):
    if not BWRAP.usable:  # this machine can't: asking for it fails clearly, auto falls back and says why
        with pytest.raises(IsolationError, match=re.escape(BWRAP.note)):
            start(workspace, "bwrap")
        zygote = start(workspace, "auto")
        assert zygote.mode == "plain" and BWRAP.note in zygote.mode_note
        zygote.close()
        return
    monkeypatch.setenv("KERNELLOOP_API_KEY", SECRET)  # held by the orchestrator, as in a live run
    holder = subprocess.Popen(["sleep", "60"], env={"KERNELLOOP_API_KEY": SECRET})  # a process with the key in environ
    outside = Path(kernelloop.__file__).parent / f"escaped-{uuid.uuid4().hex}.txt"
    problem = tmp_path / "problem.py"  # in /tmp: hidden, so the job gets a staged copy
    problem.write_text("PROBLEM = 1\n")
    zygote = start(workspace, "bwrap")
    try:
        assert zygote.mode == "bubblewrap"
        outcome = zygote.run(probe_job({
            "network": ("connect", greeter.port), "write_outside": ("write", str(outside)),
            "home": ("read", str(fake_home / ".netrc")), "workspace": ("listdir", str(workspace)),
            "db": ("read", str(workspace / "checkpoints.sqlite")),
            "other_environ": ("read", f"/proc/{holder.pid}/environ"), "key": ("env", "KERNELLOOP_API_KEY"),
            "problem": ("read_job_path", "problem_path"), "tamper_problem": ("write_job_path", "problem_path"),
            "scratch": ("write", "scratch-file.txt")}, problem_path=str(problem)), jobs(workspace) / "probe", 30, 30)
        got = outcome.result
        # own network namespace: no host loopback (each job's has no interface up at all)
        assert got["network"].startswith(("ConnectionRefusedError", "OSError: [Errno 101]")), got
        assert got["write_outside"].startswith("OSError: [Errno 30] Read-only file system"), got
        assert not outside.exists()
        assert got["home"].startswith("FileNotFoundError") and got["db"].startswith("FileNotFoundError"), got
        assert got["workspace"] == "ok: ['verifier']", got  # the workspace is empty but for the work dir
        assert got["other_environ"].startswith("FileNotFoundError"), got  # own pid namespace
        assert got["key"] == "ok: <unset>"
        assert got["problem"] == "ok: PROBLEM = 1\n"
        assert got["tamper_problem"].startswith("OSError: [Errno 30]"), got  # the staged copy is read-only
        assert got["scratch"] == "ok: written", got  # its own scratch dir stays writable
        assert SECRET not in str(got) and SECRET not in outcome.stdout_tail + outcome.stderr_tail
        assert problem.read_text() == "PROBLEM = 1\n"
    finally:
        zygote.close()
        holder.kill()
        outside.unlink(missing_ok=True)


def test_bubblewrap_hides_other_processes(tmp_path, workspace):
    zygote = start(workspace, "auto")
    try:
        outcome = zygote.run(probe_job({"listdir": ("listdir", "/proc")}), jobs(workspace) / "proc", 30, 30)
        pids = [int(p) for p in eval(outcome.result["listdir"].removeprefix("ok: ")) if p.isdigit()]  # noqa: S307
        if zygote.mode == "bubblewrap":
            assert os.getpid() not in pids and len(pids) <= 4  # bwrap's init, the zygote, the job
        else:
            assert os.getpid() in pids  # plain: the same pid namespace, which is what doctor warns about
    finally:
        zygote.close()



# --------------------------------------------------------------------------- the verifier with its static rules off

CHEATS = Path(__file__).resolve().parents[1] / "fixtures" / "cheats"
HONEST = Path(__file__).resolve().parents[1] / "fixtures" / "honest"
RELU = Path(__file__).resolve().parents[1] / "fixtures" / "problems" / "relu.py"
ESCAPE = Path("/tmp/kernelloop_adversarial_escape.txt")  # what open_write_outside.py writes


@pytest.fixture(scope="module")
def unchecked_verifier(tmp_path_factory):
    """A verifier that runs every candidate (no static rules), with the API key in its environment."""
    from kernelloop.tools.verify.verifier import Verifier

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELLOOP_API_KEY", SECRET)
        with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("unchecked"), time_it=False,
                      static_checks=False, compile_timeout_s=30, run_timeout_s=30) as verifier:
            yield verifier


def test_with_the_static_rules_off_the_sandbox_still_holds(unchecked_verifier):
    from kernelloop.problem import Candidate, Problem
    from kernelloop.records import Status

    problem = Problem.from_file(RELU)

    def verify(name: str, folder: Path = CHEATS):
        verdict = unchecked_verifier.verify(Candidate.from_file(folder / f"{name}.py"), problem)
        assert SECRET not in "\n".join((verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail))
        return verdict

    for name in ("os_environ_api_key", "subprocess_via_triton"):  # the environment was scrubbed: nothing to print
        assert verify(name).status is Status.correct
    # Its parent is outside its pid namespace (getppid() is 0), so the kill reaches its own process
    # group: it ends itself, and the worker lives on. Without per-job namespaces it kills the worker:
    # one verdict, then a fresh worker.
    killer = verify("signal_kill_parent")
    assert killer.status is Status.runtime_error
    assert "the sandbox worker died" in killer.reason or "SIGTERM" in killer.reason
    ESCAPE.unlink(missing_ok=True)
    try:
        verify("open_write_outside")
        if unchecked_verifier.zygote.mode == "bubblewrap":
            assert not ESCAPE.exists()  # it wrote into the sandbox's own /tmp, gone with it
        else:
            assert ESCAPE.exists()  # plain processes can't stop this: the static rules must (test_adversarial)
    finally:
        ESCAPE.unlink(missing_ok=True)
    assert verify("relu_triton", HONEST).status is Status.correct


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_a_child_may_not_take_more_than_its_share_of_gpu_memory(tmp_path, monkeypatch):
    """8 GiB fits on any GPU the project times on, but not in 2% of it: the harness's cap says no."""
    from kernelloop.problem import Candidate, Problem
    from kernelloop.records import Status
    from kernelloop.tools.verify.verifier import Verifier

    greedy = (HONEST / "relu_triton.py").read_text().replace(
        "        out = torch.empty_like(x)", "        hoard = torch.empty(2 << 30, device=x.device)\n"
                                            "        out = torch.empty_like(x)", 1)
    problem = Problem.from_file(RELU)
    with Verifier(device="cuda", workspace=tmp_path, time_it=False) as verifier:
        assert verifier.verify(Candidate(greedy), problem).status is Status.correct  # uncapped (0.9): it fits
        monkeypatch.setenv("KERNELLOOP_GPU_MEMORY_FRACTION", "0.02")  # read per job by the runner
        capped = verifier.verify(Candidate(greedy), problem)
    assert capped.status is Status.runtime_error and "out of memory" in capped.reason, capped.reason


@pytest.mark.skipif(not BWRAP.usable, reason=BWRAP.note)
def test_references_are_read_only_to_jobs_and_shared_caches_writable(workspace):
    """The parent's reference outputs, shared by the workers of a host, can't be rewritten by a
    job (it would change what every later candidate is compared with); the compile caches they
    share stay writable."""
    references, cache = workspace / "verifier" / "references-cpu", workspace / "verifier" / "cache-cpu"
    references.mkdir(parents=True)
    (references / "ref.pt").write_text("reference")
    zygote = Zygote(PROBE_MODULE, "cpu", workspace / "verifier" / "cpu", hide=[workspace], isolation="bwrap",
                    limits=TINY, cache_dir=cache, read_only=[references])
    try:
        got = zygote.run(probe_job({"read": ("read", str(references / "ref.pt")),
                                    "tamper": ("write", str(references / "ref.pt")),
                                    "cache": ("write", str(cache / "kernel.bin"))}), jobs(workspace) / "refs", 30, 30).result
    finally:
        zygote.close()
    assert got["read"] == "ok: reference", got
    assert got["tamper"].startswith("OSError: [Errno 30] Read-only file system"), got
    assert (references / "ref.pt").read_text() == "reference"
    assert got["cache"] == "ok: written" and (cache / "kernel.bin").read_text() == "escaped", got
