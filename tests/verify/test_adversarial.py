"""The adversarial corpus: every cheat gets the verdict its header promises, every honest control passes.

Each file in tests/fixtures/cheats/ breaks exactly one rule (or attacks the sandbox) and starts
with a header of comment lines:

    # trick: what it does and why a weak checker would fall for it
    # problem: the fixture problem it targets (a file in tests/fixtures/problems/)
    # expect: the verdict status (rejected | incorrect | runtime_error | timeout | compile_error | correct)
    # reason: a lowercase substring of verdict.reason; "a | b" accepts either (only where two rules
    #         break at once or the device decides which shows first, and the header says why)
    # gpu_only: yes | no    (yes: the trick only means something on CUDA)
  optional:
    # needs_timing: yes     (only a timed run can catch it; left to tests/gpu/test_adversarial_gpu.py)
    # expect_cpu: / reason_cpu:  what the CPU (Triton interpreter) verdict is where it differs
    # must_not_create: PATH (a file the candidate tries to write; it must not exist afterwards)
    # unlinted: / unlinted_reason:  the verdict with the static rules OFF: what the trust boundary
    #         itself decides (the rules are a lint; these fixtures prove the design holds without them)
    # not_fast: yes   (timed without the rules on a GPU, it must never be reported faster than eager)
    # honest: FILE   (its honest twin in tests/fixtures/honest/, same problem: where it is judged
    #         correct on a GPU, timed, it must read no faster than that kernel judged by the same
    #         verifier; a cheat may promise `correct` only with one: its trick is made pointless)
    # fresh_timing: yes   (its promise, where it is timed, needs fresh timing, which is opt-in
    #         (Verifier.fresh_timing): the memo fixtures and those attacking fresh timing itself;
    #         check_fixture turns it on for them alone, every other fixture is timed as by default)
    # note: free text (repeatable)

tests/fixtures/honest/ holds controls with the same header (`expect: correct`). All files run
through one Verifier, so the corpus also checks that a warm worker survives every attack.
The API key the orchestrator holds (KERNELLOOP_API_KEY) is set for the whole run and must
never show up in anything the verdict carries.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status, Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = FIXTURES / "problems"
SECRET = "sk-test-SECRET-1234"
# The corpus runs on tiny problems: honest candidates finish in seconds, so these limits only
# decide how long the two infinite-loop fixtures cost (the first trial runs in the compile phase),
# and whether a C++ fixture's build (g++ on a loaded 2-core machine: over 30 s) finishes in time.
CPU_COMPILE_TIMEOUT_S = 90.0
CPU_RUN_TIMEOUT_S = 30.0
# The verifier's pid and parent at import: a candidate that kills "its parent" must not reach either.
TEST_PID = os.getpid()
TEST_PARENT_PID = os.getppid()

REQUIRED_KEYS = ("trick", "problem", "expect", "reason", "gpu_only")
OPTIONAL_KEYS = ("needs_timing", "expect_cpu", "reason_cpu", "must_not_create", "unlinted", "unlinted_reason",
                 "not_fast", "honest", "fresh_timing", "note")
STATUSES = {status.value for status in Status}


class HeaderError(ValueError):
    """A fixture whose header is missing or malformed; the message is one line."""


@dataclass(frozen=True)
class FixtureHeader:
    """What one corpus file promises about its own verdict."""

    path: Path
    trick: str
    problem: Path
    expect: Status
    reasons: tuple[str, ...]
    gpu_only: bool
    needs_timing: bool = False
    expect_cpu: Status | None = None
    reasons_cpu: tuple[str, ...] | None = None
    must_not_create: Path | None = None
    unlinted: tuple[Status, ...] = ()
    unlinted_reasons: tuple[str, ...] = ()
    not_fast: bool = False
    fresh_timing: bool = False
    honest: Path | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def expected(self, device: str) -> tuple[Status, tuple[str, ...]]:
        """The status and acceptable reason substrings on this device."""
        if device == "cpu":
            return self.expect_cpu or self.expect, self.reasons_cpu or self.reasons
        return self.expect, self.reasons


def _status(value: str, path: Path) -> Status:
    if value not in STATUSES:
        raise HeaderError(f"{path.name}: expect {value!r} is not one of {', '.join(sorted(STATUSES))}")
    return Status(value)


def _yes_no(value: str, key: str, path: Path) -> bool:
    if value not in ("yes", "no"):
        raise HeaderError(f"{path.name}: {key} must be yes or no, not {value!r}")
    return value == "yes"


def _reasons(value: str, path: Path) -> tuple[str, ...]:
    reasons = tuple(part.strip().lower() for part in value.split("|") if part.strip())
    if not reasons:
        raise HeaderError(f"{path.name}: empty reason")
    return reasons


def parse_header(path: Path) -> FixtureHeader:
    """Read the leading `# key: value` comment block of a corpus file."""
    fields: dict[str, str] = {}
    notes: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line.lstrip("#").strip().partition(":")
        key, value = key.strip(), value.strip()
        if not sep or key not in REQUIRED_KEYS + OPTIONAL_KEYS:
            raise HeaderError(f"{path.name}: unknown header line {line!r}")
        if key == "note":
            notes.append(value)
        elif key in fields:
            raise HeaderError(f"{path.name}: {key} given twice")
        else:
            fields[key] = value
    missing = [key for key in REQUIRED_KEYS if not fields.get(key)]
    if missing:
        raise HeaderError(f"{path.name}: header lacks {', '.join(missing)}")
    problem = PROBLEMS / fields["problem"]
    if not problem.is_file():
        raise HeaderError(f"{path.name}: problem {fields['problem']!r} is not in {PROBLEMS}")
    honest = FIXTURES / "honest" / fields["honest"] if "honest" in fields else None
    if honest is not None and not honest.is_file():
        raise HeaderError(f"{path.name}: honest twin {fields['honest']!r} is not in {FIXTURES / 'honest'}")
    return FixtureHeader(
        path=path,
        trick=fields["trick"],
        problem=problem,
        expect=_status(fields["expect"], path),
        reasons=_reasons(fields["reason"], path),
        gpu_only=_yes_no(fields["gpu_only"], "gpu_only", path),
        needs_timing=_yes_no(fields.get("needs_timing", "no"), "needs_timing", path),
        expect_cpu=_status(fields["expect_cpu"], path) if "expect_cpu" in fields else None,
        reasons_cpu=_reasons(fields["reason_cpu"], path) if "reason_cpu" in fields else None,
        must_not_create=Path(fields["must_not_create"]) if "must_not_create" in fields else None,
        unlinted=tuple(_status(v.strip(), path) for v in fields.get("unlinted", "").split("|") if v.strip()),
        unlinted_reasons=_reasons(fields["unlinted_reason"], path) if "unlinted_reason" in fields else (),
        not_fast=_yes_no(fields.get("not_fast", "no"), "not_fast", path),
        fresh_timing=_yes_no(fields.get("fresh_timing", "no"), "fresh_timing", path),
        honest=honest,
        notes=tuple(notes),
    )


def corpus_files() -> list[Path]:
    """Every cheat, then every honest control, sorted by name within each."""
    return sorted((FIXTURES / "cheats").glob("*.py")) + sorted((FIXTURES / "honest").glob("*.py"))


# Attacks a red team found open, kept in the corpus with the verdict they must get once fixed: each is an
# expected failure (strict, so a fix shows as XPASS and its entry must go). Stem -> what is open.
_OPEN = {
    "numpy_work_probe_gate": "the decoy check runs in the candidate's process, where a kernel tells a disturbed launch "
                             "from a value it made itself, and numpy's work records no torch op (the verdict says "
                             "\"in-process claim\"; --strict-claims refuses it)",
    "review38_gate_beside_cheaper_torch": "the op-agnostic total counts torch's elements, not its function: a probe "
                                          "gate beside torch doing the reference's work in fewer ops passes both rules",
    "review38_gate_beside_sdpa_attention": "the same gate beside F.scaled_dot_product_attention, one aten op that is "
                                           "the whole reference (a flash-attention win on a GPU)",
    "review39_half_cast_linear": "torch's matmul on float16 copies (K=64) lands within float32's tolerance and the op "
                                 "rules count elements, not dtypes: the TF32 switch the lock refuses, done with casts",
}
OPEN_WITH_RULES: dict[str, str] = dict(_OPEN)
OPEN_WITHOUT_RULES: dict[str, str] = dict(_OPEN)
# Held by the lint alone (native_scan): torch's kernels called past the dispatcher record no op
for _stem in ("review39_backward_at_cpu_unrecorded", "review39_forward_at_cpu_softmax"):
    OPEN_WITHOUT_RULES[_stem] = ("the op records are a dispatch mode: torch's kernel called from C++ past the "
                                 "dispatcher (at::cpu::, at::native::) records no op, and the extension's call counts "
                                 "as its own work")
# Held by the lint alone (a private name): with the rules off the op records are the candidate's to rewrite
OPEN_WITHOUT_RULES["review38_pop_op_recorder"] = (
    "the op recorder is a dispatch mode on the candidate's own stack: popped for the forward's work, it records "
    "nothing, and torch.compile (no mode left) fuses the work unrecorded")


def _open_marks(path: Path, open_attacks: dict[str, str]) -> list:
    if path.stem in open_attacks:
        return [pytest.mark.xfail(strict=True, reason=f"open: {open_attacks[path.stem]}")]
    return []


def corpus_params(*, timed: bool) -> list:
    """pytest params (id = file stem); fixtures that need a timed run are left out of untimed runs."""
    no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="the trick only means something on CUDA")
    return [pytest.param(path, id=path.stem,
                         marks=([no_cuda] if parse_header(path).gpu_only else []) + _open_marks(path, OPEN_WITH_RULES))
            for path in corpus_files() if timed or not parse_header(path).needs_timing]


def verdict_text(verdict: Verdict) -> str:
    """Everything a verdict carries back to the orchestrator as text."""
    return "\n".join((verdict.reason, verdict.feedback, verdict.stdout_tail, verdict.stderr_tail))


def check_fixture(verifier, path: Path, unlinted: bool = False) -> Verdict:
    """Verify one corpus file and assert its promised verdict, no leaked secret, no escaped file.
    `unlinted`: the verifier runs without its static rules, and the `unlinted` verdict is the promise."""
    header = parse_header(path)
    if header.must_not_create is not None:
        header.must_not_create.unlink(missing_ok=True)
    verifier.fresh_timing = header.fresh_timing  # opt-in: only where the promise needs it (read per verification)
    verdict = verifier.verify(Candidate.from_file(path), Problem.from_file(header.problem))
    # Containment first: a leak or an escaped file matters even when the verdict is also wrong.
    assert SECRET not in verdict_text(verdict), f"{path.name}: the API key leaked into the verdict"
    # Every sink writes UTF-8 (the CLI's Rich output, bench's results.jsonl and report.md): a verdict holding
    # text no UTF-8 encoder takes (lone surrogates) crashed them, so none may get this far.
    json.dumps(verdict.model_dump(), ensure_ascii=False).encode("utf-8")
    if header.must_not_create is not None:
        assert not header.must_not_create.exists(), f"{path.name}: the candidate wrote {header.must_not_create}"
    statuses, reasons = (header.unlinted, header.unlinted_reasons) if unlinted else \
        ((header.expected(verifier.device)[0],), header.expected(verifier.device)[1])
    assert verdict.status in statuses, (f"{path.name}: expected {'/'.join(s.value for s in statuses)}, "
                                        f"got {verdict.status.value}: {verdict.reason}")
    assert any(reason in verdict.reason.lower() for reason in reasons), (
        f"{path.name}: expected reason containing {' or '.join(map(repr, reasons))}, got {verdict.reason!r}")
    if verdict.status in (Status.correct, Status.incorrect) and verdict.trials:  # outputs were compared: by what
        assert verdict.tolerance.startswith("kernelloop: per-dtype"), f"{path.name}: no tolerance stated"
    return verdict


HONEST_SPEED_SLACK = 0.25  # two verifications of one kernel differ by well under this; a memo that hits reads several times faster


def assert_no_faster_than_honest(verifier, path: Path, verdict: Verdict, speeds: dict[tuple[Path, bool], float]) -> None:
    """A cheat with an honest twin, judged correct and timed, reads no faster than that twin judged by
    the same verifier (`speeds` keeps each twin's speedup, measured once)."""
    header = parse_header(path)
    if header.honest is None or verdict.status is not Status.correct or verdict.speedup is None:
        return
    key = (header.honest, verifier.fresh_timing)  # the twin timed the way the cheat was
    if key not in speeds:
        twin = verifier.verify(Candidate.from_file(header.honest), Problem.from_file(header.problem))
        assert twin.status is Status.correct and twin.speedup is not None, f"{header.honest.name}: {twin.reason}"
        speeds[key] = twin.speedup
    honest = speeds[key]
    assert verdict.speedup <= honest * (1 + HONEST_SPEED_SLACK), (
        f"{path.name}: {verdict.speedup:.3f}x ({verdict.speed_source}) against its honest twin's {honest:.3f}x: "
        f"the trick pays off; {verdict.warnings}")


def boundary_params() -> list:
    """Fixtures that promise a verdict with the static rules off."""
    return [pytest.param(path, id=path.stem, marks=_open_marks(path, OPEN_WITHOUT_RULES))
            for path in corpus_files() if parse_header(path).unlinted]


@pytest.fixture(scope="module")
def verifier(tmp_path_factory) -> Iterator:
    """One warm verifier for the whole corpus, with a secret in the environment it starts from."""
    from kernelloop.tools.verify.verifier import Verifier

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELLOOP_API_KEY", SECRET)
        with Verifier(device=device, workspace=tmp_path_factory.mktemp("adversarial"), time_it=False,
                      compile_timeout_s=CPU_COMPILE_TIMEOUT_S, run_timeout_s=CPU_RUN_TIMEOUT_S) as shared:
            yield shared


@pytest.fixture(scope="module")
def unlinted_verifier(tmp_path_factory) -> Iterator:
    """The same, with the static rules off: only the trust boundary stands."""
    from kernelloop.tools.verify.verifier import Verifier

    device = "cuda" if torch.cuda.is_available() else "cpu"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELLOOP_API_KEY", SECRET)
        with Verifier(device=device, workspace=tmp_path_factory.mktemp("boundary"), time_it=False, static_checks=False,
                      compile_timeout_s=CPU_COMPILE_TIMEOUT_S, run_timeout_s=CPU_RUN_TIMEOUT_S) as shared:
            yield shared


def test_corpus_is_big_enough_and_well_formed():
    cheats = sorted((FIXTURES / "cheats").glob("*.py"))
    honest = sorted((FIXTURES / "honest").glob("*.py"))
    assert len(cheats) >= 36, f"only {len(cheats)} cheats"
    headers = [parse_header(path) for path in cheats + honest]  # raises HeaderError on a bad header
    assert all(h.expect is not Status.correct or h.honest is not None for h in headers[:len(cheats)]), \
        "a cheat expects correct with no honest twin to be timed against"
    assert all(h.expect is Status.correct for h in headers[len(cheats):]), "an honest control expects a failure"
    twins = [h for h in headers if h.honest is not None]
    assert all(parse_header(h.honest).problem == h.problem for h in twins), "an honest twin of another problem"
    problems_used = {h.problem.name for h in headers}
    assert problems_used == {p.name for p in PROBLEMS.glob("*.py")}, "a fixture problem is unused or missing"


@pytest.mark.parametrize("path", corpus_params(timed=False))
def test_fixture_gets_its_verdict(verifier, path: Path):
    check_fixture(verifier, path)


@pytest.mark.parametrize("path", boundary_params())
def test_the_trust_boundary_holds_without_the_static_rules(unlinted_verifier, path: Path):
    check_fixture(unlinted_verifier, path, unlinted=True)


def test_claimed_seconds_never_replace_the_parents_own_and_are_capped(unlinted_verifier):
    """forged_costs.py claims tiny compare, reference, timing, child and total times and 5000 extra keys."""
    from kernelloop.tools.verify.verifier import MAX_CLAIMED_KEYS, PARENT_COSTS

    verdict = check_fixture(unlinted_verifier, FIXTURES / "cheats" / "forged_costs.py", unlinted=True)
    cost = verdict.cost_s
    for name in ("compare_s", "reference_s", "child_s", "total_s", "phase_candidate_s"):
        assert cost[name] != 1e-9, f"{name} is the candidate's claim"
    assert cost["total_s"] > cost["child_s"]  # both the parent's clock: the child ran inside the verification
    assert cost["fixed_s"] >= 0  # no claimed cost outside the child's own names was subtracted
    claimed = [k for k in cost if k.startswith("pad")]
    assert 0 < len(claimed) <= MAX_CLAIMED_KEYS and len(cost) <= MAX_CLAIMED_KEYS + len(PARENT_COSTS) + 20


def test_verifier_survives_the_corpus(verifier):
    """Runs last in this module: after every attack the test process and its parent still stand,
    and the same verifier still judges an honest candidate correct."""
    assert os.getpid() == TEST_PID
    assert os.getppid() == TEST_PARENT_PID, "the test process lost its parent"
    os.kill(TEST_PARENT_PID, 0)  # raises ProcessLookupError if the parent is gone
    verdict = verifier.verify(Candidate.from_file(FIXTURES / "honest" / "relu_triton.py"),
                              Problem.from_file(PROBLEMS / "relu.py"))
    assert verdict.status is Status.correct, verdict.reason


def test_strict_claims_refuses_a_verdict_whose_own_kernels_are_only_claimed(verifier):
    """On the CPU only the candidate's process says its kernels did the work (launches, ops, the decoy runs):
    the verdict says so, and strict_claims refuses it, the honest and the numpy-gate cheat alike."""
    problem = Problem.from_file(PROBLEMS / "relu.py")
    verdict = verifier.verify(Candidate.from_file(FIXTURES / "honest" / "relu_triton.py"), problem)
    assert verdict.ok and verdict.own_kernel_evidence == "in-process claim"
    assert any(warning.startswith("own kernels unverified") for warning in verdict.warnings)
    verifier.strict_claims = True
    try:
        for path in (FIXTURES / "honest" / "relu_triton.py", FIXTURES / "cheats" / "numpy_work_probe_gate.py"):
            refused = verifier.verify(Candidate.from_file(path), problem)
            assert refused.status is Status.rejected and refused.code.value == "claims_unverified", refused.reason
    finally:
        verifier.strict_claims = False
