"""The one lap timer of the verifier's cost reports: laps add up to the whole, a name met again adds up."""

from __future__ import annotations

import time

import pytest

from kernelloop.tools.profile.stopwatch import Stopwatch


def test_laps_add_up_to_the_whole_and_a_repeated_name_accumulates():
    clock = Stopwatch()
    time.sleep(0.02)
    first = clock.lap("workers")
    time.sleep(0.01)
    clock.lap("reference")
    time.sleep(0.02)
    again = clock.lap("workers")
    assert first >= 0.02 and again >= 0.02
    assert clock.laps["workers"] == first + again
    assert sum(clock.laps.values()) == pytest.approx(clock.total()) and clock.total() <= clock.elapsed()
    assert clock.costs() == {"phase_workers_s": first + again, "phase_reference_s": clock.laps["reference"]}
    assert set(clock.costs(prefix="setup_")) == {"setup_workers_s", "setup_reference_s"}
