"""Problems with workloads (get_workloads): every workload judged on its own secret trial sets, a
wrong one named in the reason; each workload timed by the timing phase (on the CPU: the rehearsal,
host clocks, no speed), the verdict's speed the geometric mean over them (fakes: no GPU here);
KernelBench problems without get_workloads judged exactly as before."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from kernelloop.errors import ProblemError
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Code, Status, TimingStats, Verdict, WorkloadResult
from kernelloop.tools.verify.compare import Comparison
from kernelloop.tools.verify.speed import SpeedJudgement
from kernelloop.tools.verify.timing_driver import Rehearsed
from kernelloop.tools.verify.workloads import Layout, combine, geometric_mean

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = FIXTURES / "problems"
ROWSUM_WORKLOADS = PROBLEMS / "rowsum_workloads.py"
FIXED_128 = FIXTURES / "cheats" / "rowsum_fixed_128_cols.py"
ANY_SHAPE = FIXTURES / "honest" / "rowsum_any_shape_triton.py"

ROWSUM_HEAD = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=1)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
'''


# --------------------------------------------------------------------------- the problem format
def test_workloads_are_named_with_get_inputs_first():
    assert Problem.from_file(ROWSUM_WORKLOADS).workload_names == ["cols_128", "cols_3000"]
    # a problem from outside is only parsed here: the names are read off its source
    assert Problem.from_file(ROWSUM_WORKLOADS, trusted=False).workload_names == ["cols_128", "cols_3000"]
    assert Problem.from_file(PROBLEMS / "rowsum.py").workload_names == []  # KernelBench's format: none


def test_get_inputs_is_the_default_workload_unless_named():
    source = ROWSUM_HEAD + "\ndef wide():\n    return [torch.randn(4, 300)]\n\ndef get_workloads():\n    return {'wide': wide}\n"
    assert Problem.from_source(source).workload_names == ["default", "wide"]
    assert Problem.from_source(source, trusted=False).workload_names == ["default", "wide"]
    named_later = source.replace("{'wide': wide}", "{'wide': wide, 'narrow': get_inputs}")
    assert Problem.from_source(named_later).workload_names == ["narrow", "wide"]


@pytest.mark.parametrize(("body", "words"), [
    ("return [wide]", "non-empty dict"),
    ("return {}", "non-empty dict"),
    ("return {'a b': wide}", "workload name"),
    ("return {'wide': lambda n: n}", "no arguments"),
    ("return {'default': wide}", "get_inputs()'s name"),
    ("raise RuntimeError('boom')", "get_workloads() failed"),
])
def test_a_bad_get_workloads_is_one_line_naming_the_problem(body, words):
    source = ROWSUM_HEAD + f"\ndef wide():\n    return [torch.randn(4, 300)]\n\ndef get_workloads():\n    {body}\n"
    with pytest.raises(ProblemError, match=re.escape(words)) as caught:
        Problem.from_source(source, name="bad_workloads")
    assert "bad_workloads" in str(caught.value) and "\n" not in str(caught.value)


# --------------------------------------------------------------------------- the layout and the speed, on fakes
def _comparison(ok: bool, reason: str = "") -> Comparison:
    return Comparison(ok=ok, reason=reason or ("ok" if ok else "mismatch"), code=Code.correct if ok else Code.mismatch)


def test_the_layout_names_a_set_by_its_workload():
    layout = Layout.checked([["cols_128", 3], ["cols_3000", 2]], ["cols_128", "cols_3000"], 5, "p.py")
    assert layout.ranges() == {"cols_128": (0, 3), "cols_3000": (3, 5)}
    assert [layout.name_of(i) for i in range(6)] == ["cols_128"] * 3 + ["cols_3000"] * 2 + [None]
    results = layout.results([_comparison(True)] * 3 + [_comparison(True), _comparison(False, "max_abs_err 3")])
    assert results["cols_128"].status is Status.correct and results["cols_128"].trials == 3
    assert results["cols_3000"].status is Status.incorrect and results["cols_3000"].reason == "max_abs_err 3"
    assert Layout.checked(None, [], 4, "p.py").counts == ()  # no get_workloads: nothing changes


@pytest.mark.parametrize("raw", [[["cols_128", 3]], [["cols_3000", 2], ["cols_128", 3]], [["cols_128", 3], ["cols_3000", 3]],
                                 None, "nonsense"])
def test_a_layout_that_does_not_match_the_workloads_is_the_problems_error(raw):
    with pytest.raises(ProblemError):
        Layout.checked(raw, ["cols_128", "cols_3000"], 5, "p.py")


def _judgement(speedup: float, compile_speedup: float, noise: float = 0.02, rejection: str | None = None,
               candidate_ms: float = 1.0) -> SpeedJudgement:
    timings = {name: TimingStats(name=name, median_ms=ms, iqr_ms=0.0, min_ms=ms, mean_ms=ms, samples=50, counted_ms=ms)
               for name, ms in (("candidate", candidate_ms), ("eager", candidate_ms * speedup))}
    return SpeedJudgement(timings=timings, speedup=speedup, speedups={"eager": speedup, "compile": compile_speedup},
                          noise_floor=noise, win=speedup > 1 + noise, rejection=rejection,
                          rejection_code=Code.timing_contradicted if rejection else None,
                          warnings=[f"note {speedup}"], speed_source=f"events {speedup}")


def test_the_headline_speedup_is_the_geometric_mean_and_the_slowest_workload_is_named():
    judged = {"cols_128": _judgement(4.0, 2.0), "cols_3000": _judgement(0.25, 0.5, noise=0.05)}
    combined = combine(judged)
    assert isinstance(combined, SpeedJudgement)
    assert combined.speedup == pytest.approx(1.0) and combined.speedups["eager"] == pytest.approx(1.0)
    assert combined.speedups["compile"] == pytest.approx(1.0)
    assert combined.noise_floor == 0.05 and combined.win is False  # a 4x on one shape does not hide a 4x loss
    assert combined.timings is judged["cols_128"].timings  # get_inputs' own: the per-workload table has the rest
    assert "slowest 'cols_3000'" in combined.speed_source
    assert "note 4.0" in combined.warnings and "workload 'cols_3000': note 0.25" in combined.warnings
    assert geometric_mean([2.0, 8.0]) == pytest.approx(4.0) and geometric_mean([1.0, math.nan]) is None


def test_a_rejection_on_any_workload_rejects_naming_it():
    combined = combine({"cols_128": _judgement(2.0, 1.0), "cols_3000": _judgement(50.0, 1.0, rejection="timing contradicted")})
    assert isinstance(combined, SpeedJudgement) and combined.rejection == "on workload 'cols_3000': timing contradicted"


def test_one_workload_keeps_its_judgement_and_rehearsals_add_up():
    one = _judgement(2.0, 1.0)
    assert combine({"": one}) is one
    assert combine({"a": Rehearsed(checked=3), "b": Rehearsed(checked=4)}) == Rehearsed(checked=7)


def test_the_verdict_carries_each_workload_with_its_speed_and_reads_back():
    """Verification._with_workloads on fakes: a correct verdict timed on two workloads (a GPU's path)."""
    from kernelloop.tools.verify.verdicts import correct
    from kernelloop.tools.verify.verification import Verification

    judged = {"cols_128": _judgement(3.0, 1.5), "cols_3000": _judgement(1.2, 0.9, candidate_ms=2.0)}
    verification = Verification.__new__(Verification)  # only the workload state: no verifier, no jobs
    verification.layout = Layout.checked([["cols_128", 3], ["cols_3000", 3]], ["cols_128", "cols_3000"], 6, "p.py")
    verification.trial_comparisons = [_comparison(True)] * 6
    verification.workload_speeds, verification.failed_workload = judged, None
    combined = combine(judged)
    assert isinstance(combined, SpeedJudgement)
    verdict = verification._with_workloads(correct(6, 0.0, 0.0, verification.trial_comparisons, {}, combined, {"device": "cuda"}))
    assert verdict.speedup == pytest.approx(math.sqrt(3.0 * 1.2))
    assert verdict.slowest_workload == "cols_3000"
    assert list(verdict.workloads) == ["cols_128", "cols_3000"]
    wide = verdict.workloads["cols_3000"]
    assert wide.status is Status.correct and wide.speedup == 1.2 and wide.times_ms == {"candidate": 2.0, "eager": 2.4}
    again = Verdict.model_validate_json(verdict.model_dump_json())
    assert again.workloads == verdict.workloads and isinstance(again.workloads["cols_128"], WorkloadResult)
    assert Verdict.model_validate({"status": "correct", "reason": "old record"}).workloads == {}  # before workloads


# --------------------------------------------------------------------------- verified on the CPU
@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("workloads"), time_it=False,
                  compile_timeout_s=60.0, run_timeout_s=120.0) as shared:
        yield shared


def test_a_kernel_hard_coded_to_128_columns_is_wrong_on_the_3000_column_workload(verifier):
    verdict = verifier.verify(Candidate.from_file(FIXED_128), Problem.from_file(ROWSUM_WORKLOADS))
    assert verdict.status is Status.incorrect, verdict.reason
    assert verdict.reason.startswith("wrong on workload 'cols_3000': ")
    assert verdict.workloads["cols_128"].status is Status.correct
    assert verdict.workloads["cols_3000"].status is Status.incorrect and verdict.workloads["cols_3000"].reason
    assert "cols_3000" in verdict.feedback  # what the coder and the critic read


def test_an_any_shape_kernel_is_correct_on_every_workload(verifier):
    verdict = verifier.verify(Candidate.from_file(ANY_SHAPE), Problem.from_file(ROWSUM_WORKLOADS))
    assert verdict.status is Status.correct, verdict.reason
    assert {name: (r.status, r.trials) for name, r in verdict.workloads.items()} == {
        "cols_128": (Status.correct, verifier.trials), "cols_3000": (Status.correct, verifier.trials)}
    assert verdict.speedup is None and verdict.slowest_workload == ""  # the CPU times nothing
    # every workload's sets plus the fresh set after the trials
    assert verdict.trials == 2 * verifier.trials + 1


def test_a_problem_from_outside_has_its_workloads_judged_too(verifier):
    verdict = verifier.verify(Candidate.from_file(FIXED_128), Problem.from_file(ROWSUM_WORKLOADS, trusted=False))
    assert verdict.status is Status.incorrect and "workload 'cols_3000'" in verdict.reason


def test_a_kernelbench_problem_without_workloads_is_judged_as_before(verifier):
    verdict = verifier.verify(Candidate.from_file(FIXTURES / "honest" / "rowsum_triton.py"), Problem.from_file(PROBLEMS / "rowsum.py"))
    assert verdict.status is Status.correct and verdict.reason == f"correct on {verifier.trials + 1} input sets"
    assert verdict.workloads == {} and verdict.slowest_workload == "" and "workloads" not in verdict.reason
    wrong = verifier.verify(Candidate.from_file(FIXTURES / "cheats" / "wrong_shape.py"), Problem.from_file(PROBLEMS / "rowsum.py"))
    assert wrong.status is Status.incorrect and "workload" not in wrong.reason and wrong.workloads == {}


# --------------------------------------------------------------------------- the timing phase per workload, rehearsed
STALE_ON_WIDE_ROWS = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    """Right on every trial set; from its sixth call on 3000 columns, the answer it kept: only the
    timing of that workload calls it so often."""

    def __init__(self):
        super().__init__()
        self.wide_calls = 0
        self.kept = None

    def forward(self, x):
        if x.shape[1] == 3000:
            self.wide_calls += 1
            if self.wide_calls > 5 and self.kept is not None:
                return self.kept.clone()
        out = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
        rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=256)
        if x.shape[1] == 3000:
            self.kept = out.clone()
        return out
'''


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The timing phase's conversation on the CPU (host clocks, no speed), once per workload."""
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("workload-rehearsal"), fresh_timing=True,
                  rehearse_timing=True, static_checks=False, compile_timeout_s=60.0, run_timeout_s=180.0) as shared:
        yield shared


def test_every_workload_goes_through_the_timing_phase(rehearsal):
    verdict = rehearsal.verify(Candidate.from_file(ANY_SHAPE), Problem.from_file(ROWSUM_WORKLOADS))
    assert verdict.status is Status.correct, verdict.reason
    assert set(verdict.workloads) == {"cols_128", "cols_3000"}
    assert any("timing protocol ran on host clocks" in w for w in verdict.warnings)


def test_a_kernel_stale_only_in_one_workloads_timing_is_caught_there(rehearsal):
    verdict = rehearsal.verify(Candidate.from_source(STALE_ON_WIDE_ROWS), Problem.from_file(ROWSUM_WORKLOADS))
    assert verdict.status is Status.incorrect and verdict.code is Code.wrong_on_timed_call, verdict.reason
    assert "on workload 'cols_3000'" in verdict.reason
    assert verdict.workloads["cols_3000"].status is Status.incorrect
    assert verdict.workloads["cols_128"].status is Status.correct
