"""The job module of the trusted workers (the reference jobs of the user's problems, and of problems
from outside): the reference job (reference_job.py) and the baselines timed alone. No candidate code
runs here, and nothing of the candidate's child (harness.py) is loaded: what both kinds of child
share is child.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

import kernelloop.tools.profile.measure  # noqa: F401  (preloaded so each fork starts warm: the timing imports it)
from kernelloop.problem import import_source
from kernelloop.sandbox.channel import Channel
from kernelloop.tools.verify._runtime import INIT_SEED, hold_declared_precision, make_inputs
from kernelloop.tools.verify.child import preload, prepare, serve  # noqa: F401 - the zygote calls prepare and preload here
from kernelloop.tools.verify.reference_job import run_reference


def run_baselines(job: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """Time eager, torch.compile and the problem's own baselines, no candidate (bench --baselines-only)."""
    from kernelloop.tools.profile.measure import measure_baselines

    problem = import_source(Path(job["problem_path"]), "kernelloop_problem")
    hold_declared_precision()  # the baselines' speed at the arithmetic a verification times them at
    input_sets = [make_inputs(problem, seed, job["device"]) for seed in job["seeds"]]
    channel.phase("timing")
    with torch.no_grad():
        return {"status": "ran", "timing": measure_baselines(problem, input_sets, job["device"], {**job, "init_seed": INIT_SEED})}


JOBS = {"reference": run_reference, "baselines": run_baselines}


def run_job(job: dict[str, Any]) -> int:
    """Entry point in the forked child of a trusted worker; returns the exit code. Never raises."""
    return serve(job, JOBS)
