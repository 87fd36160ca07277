"""review39 (red team): attacks on today's checks that are no candidate file.

The re-measurement of rounds (timing_driver._drive_fresh, Windows.contradicted): a side whose events are
over EVENTS_OVER_RUN_STEP times its replayed windows' fastest run step a call has every side's rounds
measured again, once. The candidate's own events are its claim, so it can always ask for that
(events over its own bound, discarded with the rounds), and it can tell the second rounds from the first
(they come after the capture and window requests). The second rounds are never held against the windows:
eager's events there may be anything (on a GPU, another context's work beside the trusted job's rounds,
the very noise the re-measure is for; the candidate's process is such a context), so they are held against
the windows again, and a baseline still over its bound gets no speedup. Driven here with fakes
for both processes (no GPU: the windows are a fixed Windows, as a replay would give).
"""

from __future__ import annotations

import time

from kernelloop.tools.verify import timing_driver
from kernelloop.tools.verify.timing_driver import OVERHEAD, Windows

CALLS = 10
EAGER_MS, CANDIDATE_MS = 0.30, 0.28  # honest device times a call: the candidate no faster than eager


def _replayed_windows() -> Windows:
    """The windows a replay gives each side: run steps of CALLS calls at the honest times (plus 0.2 ms)."""
    return Windows(CALLS, {"eager": [EAGER_MS * CALLS + 0.2] * 3, "candidate": [CANDIDATE_MS * CALLS + 0.2] * 3},
                   [0.1] * 3, fills={"eager": [1.0] * 3, OVERHEAD: [1.0] * 3, "candidate": [1.0] * 3},
                   keeps={"eager": [1.0] * 3, OVERHEAD: [1.0] * 3, "candidate": [1.0] * 3})


class _Child:
    """The candidate's child: its first rounds claim events 10x its own (contradicted: a re-measure is
    asked for), its rounds after the windows its honest times."""

    def __init__(self, log: list):
        self.log, self.pending, self.windows_seen = log, None, False

    def send(self, message: dict) -> bool:
        self.pending = message
        return True

    def receive(self, timed: bool = False) -> dict:
        kind, request = next(iter(self.pending.items()))  # type: ignore[union-attr]
        if kind == "time":
            return {"time": {}}
        if kind == "block":
            rounds = request["rounds"]
            own = CANDIDATE_MS * (1 if self.windows_seen else 10)
            self.log.append(("child", "second" if self.windows_seen else "first"))
            time.sleep(2 * own * rounds / 1000)  # the parent's clock sees the claimed time pass
            return {"block": {"samples_ms": {"candidate": [own] * rounds, "candidate_again": [own] * rounds},
                              "digests": ["0" * 32] * rounds}}
        return {kind: {}}


class _Trusted:
    """The trusted job: eager's honest events in the first rounds; in the second (after the windows) 5x
    its own, as a co-running context on the GPU makes them."""

    def __init__(self, child: _Child):
        self.child = child

    def ask(self, kind: str, request: dict) -> dict:
        if kind == "timing":
            return {"names": ["eager"], "window_sets": CALLS, "fresh_values": True}
        if kind == "block":
            eager = EAGER_MS * (5 if self.child.windows_seen else 1)
            return {"samples_ms": {"eager": [eager] * request["rounds"]}}
        return {}


class _Checks:
    nbytes = 4096
    checked = 0

    def check(self, *args, **kwargs):
        return None


def test_rounds_measured_again_are_held_against_the_windows_too(monkeypatch):
    log: list = []
    child = _Child(log)
    trusted = _Trusted(child)

    def windows(*args, **kwargs):
        child.windows_seen = True  # the child sees the capture and window requests before the second rounds
        return _replayed_windows()

    monkeypatch.setattr(timing_driver, "_capture", lambda *a, **k: True)
    monkeypatch.setattr(timing_driver, "_windows", windows)
    judged = timing_driver._drive_fresh(child, trusted, None, None, None, None, _Checks(),  # type: ignore[arg-type]
                                        rehearse=False, parts={})
    assert ("child", "second") in log, "the candidate's claimed events alone had every side measured again"
    assert not isinstance(judged, str), judged
    speedup = getattr(judged, "speedup", None)
    # honest times: the candidate 0.28 ms against eager's 0.30 ms, about 1.07x; anything far past it came
    # from eager's unchecked second rounds
    assert speedup is None or speedup < 1.5, f"{speedup:.2f}x from eager's re-measured events alone"
    assert speedup is None and any("measured twice" in w for w in judged.warnings), judged.warnings


def test_the_candidates_own_claim_alone_asks_for_a_re_measure():
    """The lever: contradicted() names the candidate on its own events, and _drive_fresh then clears every
    side's samples (eager's first, honest rounds among them)."""
    backs = _replayed_windows()
    assert backs.contradicted({"eager": EAGER_MS, "candidate": CANDIDATE_MS * 10}) == ["candidate"]
    assert backs.contradicted({"eager": EAGER_MS, "candidate": CANDIDATE_MS}) == []
