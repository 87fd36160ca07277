"""A sandbox job for tests/sandbox/test_isolation.py: it tries what a hostile candidate would and
writes down what happened, so the test can tell what the sandbox let through.

job["actions"]: {label: [action, argument]}, run in order; the reported result maps each label to
"ok: <what it got>" or "<ExceptionType>: <message>". Needs no torch: the zygote starts fast.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from kernelloop.sandbox.channel import Channel

tempfile.gettempdir()  # cached in the worker, as torch's and triton's imports do: a job must not inherit it


def _connect(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        return sock.recv(64).decode()


def _spin(seconds: float) -> str:
    """Burn CPU time (not wall time) until `seconds` of it are used."""
    while time.process_time() < seconds:
        pass
    return f"{time.process_time():.1f} s of CPU"


def _spawn_and_hang(marker: str) -> str:
    """Start a grandchild that would outlive the job (`sleep MARKER`), then hang."""
    subprocess.Popen(["sleep", marker], start_new_session=False)
    time.sleep(3600)
    return "woke up"


def _daemon(marker: str) -> str:
    """Leave a daemon behind outside the job's process group (fork, setsid, fork): `sleep MARKER`."""
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", marker])
        os._exit(0)
    os.waitpid(first, 0)
    return "left a daemon"


def _chain(depth_and_marker: str) -> str:
    """A chain of processes deeper than any number of kill-and-reap rounds: each one forks the next
    in a new session and becomes `sleep MARKER`, leaving its child to the zygote."""
    depth, marker = depth_and_marker.split(":")
    if os.fork() == 0:
        for _ in range(int(depth)):
            os.setsid()
            if os.fork() != 0:
                os.execvp("sleep", ["sleep", marker])
        os.execvp("sleep", ["sleep", marker])
    time.sleep(1.0)  # let the chain grow
    return "left a chain"


ACTIONS = {  # name -> f(argument, job)
    "connect": lambda port, job: _connect(port),
    "write": lambda path, job: Path(path).write_text("escaped") and "written",
    "read": lambda path, job: Path(path).read_text()[:400],
    "listdir": lambda path, job: sorted(os.listdir(path)),
    "write_bytes": lambda size, job: Path("big.bin").write_bytes(b"x" * size) and "written",
    "spin": lambda seconds, job: _spin(seconds),
    "spawn_and_hang": lambda marker, job: _spawn_and_hang(marker),
    "daemon": lambda marker, job: _daemon(marker),
    "chain": lambda depth_and_marker, job: _chain(depth_and_marker),
    "env": lambda name, job: os.environ.get(name, "<unset>"),
    "read_job_path": lambda key, job: Path(job[key]).read_text(),  # a file the runner may have staged
    "write_job_path": lambda key, job: Path(job[key]).write_text("tampered") and "written",
    "tempfile": lambda _, job: tempfile.mkstemp(suffix=".ptx")[1],
    "shell": lambda command, job: subprocess.run(["sh", "-c", command], capture_output=True, text=True,
                                                 timeout=20).stdout[-2000:],
}


def run_job(job: dict) -> int:
    results = {}
    for label, (name, argument) in job["actions"].items():
        try:
            results[label] = f"ok: {ACTIONS[name](argument, job)}"
        except Exception as exc:  # the point of the probe: record what the sandbox refused
            results[label] = f"{type(exc).__name__}: {exc}"
    Channel.from_job(job).result(results)
    return 0
