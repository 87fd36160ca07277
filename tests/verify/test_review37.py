"""review37: attacks on the verifier's arithmetic that are not corpus fixtures."""

from __future__ import annotations

from kernelloop.tools.profile.measure import CANDIDATE
from kernelloop.tools.verify.timing_driver import OVERHEAD, Windows


def test_a_side_that_moves_its_work_into_every_other_windows_fill_is_charged_for_it():
    """Two replayed windows of 10 calls. Window 0: the work is done while the sets are written (fill 20 ms,
    run 1 ms). Window 1: honest (fill 1 ms, run 20 ms). Every window took >= 21 ms of the candidate's
    (per_window says so), yet per_call pairs window 0's run with window 1's fill."""
    backs = Windows(calls=10, walls={CANDIDATE: [1.0, 20.0]}, overheads=[0.5, 0.5],
                    fills={CANDIDATE: [20.0, 1.0], OVERHEAD: [1.0, 1.0]},
                    keeps={CANDIDATE: [1.0, 1.0], OVERHEAD: [1.0, 1.0]})
    honest_least = min(backs.per_window[CANDIDATE])
    assert honest_least > 1.5  # each window, with its own steps' excess, is ~2 ms a call
    assert backs.per_call()[CANDIDATE] >= honest_least, backs.per_call()
