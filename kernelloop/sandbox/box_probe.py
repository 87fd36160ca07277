"""A job that does nothing: `kernelloop doctor` runs one through a real worker, so the containment it
reports is the one every job gets, as the worker measured it (runner.Zygote._containment)."""

from __future__ import annotations


def run_job(job: dict) -> int:
    return 0
