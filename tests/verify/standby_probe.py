"""A sandbox job module with a `prepare()` hook, for tests/verify/test_standby.py (no torch: fast).

prepare() notes when and in which process it ran, with a token no other process has; a
`prepare_mode` file in the zygote's work dir (beside its cache dir, the jobs' HOME) makes it crash
the process instead. The job reports its
own pid and what prepare() left in this process.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kernelloop.sandbox.channel import Channel

PREPARED: dict = {}


def prepare() -> None:
    mode = Path(os.environ["HOME"]).parent / "prepare_mode"
    if mode.is_file() and mode.read_text() == "crash":
        os._exit(3)  # as a driver that brings the process down would
    PREPARED.update(pid=os.getpid(), at=time.time(), token=os.urandom(8).hex())


def run_job(job: dict) -> int:
    result = {"pid": os.getpid(), "prepared": PREPARED, "started_at": time.time()}
    Channel.from_job(job).result(result)
    return 0
