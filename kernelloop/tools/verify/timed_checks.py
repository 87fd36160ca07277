"""The parent's checks of timed calls picked at random: a memo can't pass them.

Every timed call of the candidate runs on fresh values (fresh_values.py), so a memo never meets
values it has seen: keyed by an address it answers stale (wrong), keyed by `_version` or by
content it misses and has to compute. The checks make the first case a verdict. After each
request of timed calls (a block of rounds, the back-to-back calls) the child has answered with
one digest per call it kept (kept_outputs.py); only then does the parent pick which calls to
check, the child hands over those copies, the parent digests them itself (a copy that differs
from what the child committed to is a contradiction, rejected), the trusted job makes the
reference's outputs on the same values from the request's seed, and the parent compares.

Which calls: every back-to-back request (BACK_PICKS calls), and each block with a probability
sized so that about PICKED_BLOCKS blocks of a verification are checked whatever their size (a
block holds as many calls as the child can keep copies of, so a problem with a huge output has
many small blocks); a checked block gives BLOCK_PICKS calls. A candidate can't know which: the
pick is drawn here after the child's answer. Where the kernel does less work than the reference's
roofline allows, a block of SCRUTINY_ROUNDS rounds is checked call by call, and its speed counts
only from those rounds (speed.py).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import torch

from kernelloop.records import Code
from kernelloop.sandbox.runner import JobSession
from kernelloop.sandbox.safe_io import UnsafeFileError
from kernelloop.tools.verify.compare import Comparison, compare_outputs
from kernelloop.tools.verify.kept_outputs import digest_bytes, split
from kernelloop.tools.verify.reference_server import ReferenceServer
from kernelloop.tools.verify.tensor_files import load_sets

BLOCK_PICKS = 1
BACK_PICKS = 2
PICKED_BLOCKS = 6
SCRUTINY_ROUNDS = 8
PICKED_FILE = "picked.sets"
FILE_SLACK_BYTES = 1 << 20
_RANDOM = secrets.SystemRandom()


@dataclass
class TimedFailure:
    """A timed call that failed its check: the verdict's code and reason, and (a wrong output)
    the comparison with both outputs, for the verifier to localise."""

    code: Code
    reason: str
    comparison: Comparison | None = None
    outputs: list = field(default_factory=list)
    refs: list = field(default_factory=list)


class TimedChecks:
    """One verification's checks of timed calls; `like`: the reference's outputs of the first trial
    set (shapes and dtypes of what the child keeps); `tolerance`: the problem's."""

    def __init__(self, session: JobSession, server: ReferenceServer, like: list, tolerance: dict | None,
                 device: torch.device):
        self.session, self.server, self.like, self.tolerance, self.device = session, server, like, tolerance, device
        self.nbytes = sum(t.numel() * t.element_size() for t in like if isinstance(t, torch.Tensor))
        self.checked = 0
        self.worst_abs = self.worst_rel = 0.0

    @staticmethod
    def seed() -> int:
        """A request's secret seed: its calls' values can't be known before the request."""
        return secrets.randbits(62)

    @staticmethod
    def block_probability(keep_calls: int, max_rounds: int) -> float:
        """The chance a block is checked: about PICKED_BLOCKS of the blocks a verification needs."""
        return min(1.0, PICKED_BLOCKS * keep_calls / max(1, max_rounds))

    @staticmethod
    def chosen(probability: float) -> bool:
        return _RANDOM.random() < probability

    @staticmethod
    def pick(count: int, how_many: int) -> list[int]:
        return sorted(_RANDOM.sample(range(count), min(count, how_many)))

    @staticmethod
    def digests(answer: dict | None, count: int) -> list[str] | None:
        """The digests a request's answer commits to, one per call kept, or None (no claim)."""
        raw = (answer or {}).get("digests")
        if not isinstance(raw, list) or len(raw) != count:
            return None
        if not all(isinstance(d, str) and len(d) == 32 and all(c in "0123456789abcdef" for c in d) for d in raw):
            return None
        return raw

    def check(self, seed: int, calls: int, picked: list[tuple[int, int]], digests: list[str]) -> TimedFailure | str | None:
        """Check kept calls: `picked` holds (slot in the child's kept copies, index of the call among
        the request's `calls` whose values came from `seed`). A failure, a string where the child
        stopped answering, or None."""
        slots = [slot for slot, _ in picked]
        if not self.session.send({"pick": {"calls": slots}}):
            return "the candidate's process stopped answering when asked for its kept outputs"
        answer = self.session.receive()
        if not answer or not isinstance(answer.get("pick"), dict):
            return "the candidate's process stopped answering when asked for its kept outputs"
        limit = len(slots) * (self.nbytes + FILE_SLACK_BYTES)
        try:
            with self.session.dir.open_bounded(PICKED_FILE, limit) as handle:
                sets, _ = load_sets(handle, limit, self.device)
        except (OSError, ValueError) as exc:  # TensorFileError, UnsafeFileError: a verdict, never a crash
            if isinstance(exc, FileNotFoundError):
                return TimedFailure(Code.unreadable_outputs, "unreadable outputs: the candidate's process left no kept "
                                    "outputs of its timed calls")
            kind = "tampered" if isinstance(exc, UnsafeFileError) else "unreadable"
            return TimedFailure(Code.unreadable_outputs, f"unreadable outputs: the kept outputs of its timed calls "
                                f"can't be judged ({kind}: {str(exc)[:200]})")
        if len(sets) != len(slots):
            return TimedFailure(Code.unreadable_outputs, f"unreadable outputs: {len(sets)} kept outputs for "
                                f"{len(slots)} timed calls asked for")
        raws = []
        for (slot, _), values in zip(picked, sets):
            raw = values[0] if len(values) == 1 else None
            if not isinstance(raw, torch.Tensor) or raw.dtype != torch.uint8 or raw.dim() != 1 \
                    or raw.numel() != self.nbytes or digest_bytes(raw) != digests[slot]:
                return TimedFailure(Code.timing_contradicted,
                                    "timing contradicted: the kept output of a timed call it handed over is not the "
                                    "one it committed to (by digest) when the call's request ended")
            raws.append(raw)
        refs = self.server.regen(seed, calls, [index for _, index in picked])
        for raw, ref in zip(raws, refs):
            outputs, ref = split(raw, self.like), [t for t in ref if isinstance(t, torch.Tensor)]
            comparison = compare_outputs(outputs, ref, self.tolerance, self.device)
            if not comparison.ok:
                return TimedFailure(Code.wrong_on_timed_call,
                                    "a timed call on fresh inputs, picked at random, is wrong (are results cached "
                                    f"or skipped while timed?): {comparison.reason}", comparison, outputs, ref)
            self.worst_abs = max(self.worst_abs, comparison.max_abs_err)
            self.worst_rel = max(self.worst_rel, comparison.rel_err)
        self.checked += len(picked)
        return None
