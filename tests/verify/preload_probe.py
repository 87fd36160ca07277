"""A sandbox job module for tests/verify/test_cold_path.py (no torch: fast): each job reports which
of the modules the tests preload are in its process, and where its preload() ran."""

from __future__ import annotations

import os
import sys

from kernelloop.sandbox.channel import Channel

WATCHED = ("xml.dom.minidom", "wave", "tomllib")
PRELOADED_IN: list[int] = []  # the pid preload() ran in: the zygote's, before it forked


def preload() -> None:
    # In the work dir, beside the jobs' HOME (the cache dir): a test asks for a failure
    if os.path.exists(os.path.join(os.path.dirname(os.environ["HOME"]), "preload_fails")):
        raise RuntimeError("preload failed on purpose")
    PRELOADED_IN.append(os.getpid())


def run_job(job: dict) -> int:
    Channel.from_job(job).result({"loaded": [name for name in WATCHED if name in sys.modules],
                                  "preloaded_in": PRELOADED_IN, "pid": os.getpid()})
    return 0
