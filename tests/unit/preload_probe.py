"""A sandbox job module for tests/unit/test_cold_path.py (no torch: fast): each job reports which
of the modules the tests preload are in its process."""

from __future__ import annotations

import sys

from kernelloop.sandbox.channel import Channel

WATCHED = ("xml.dom.minidom", "wave", "tomllib")


def run_job(job: dict) -> int:
    Channel.from_job(job).result({"loaded": [name for name in WATCHED if name in sys.modules]})
    return 0
