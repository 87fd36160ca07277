"""The critique-quality set, correctness faults, on the CPU: each faulty kernel (one known cause,
tests/fixtures/faulty_kernels/) goes through the real verifier and the critic, and its critique
must contain every fact benchmarks/critique_set.py lists for it."""

from __future__ import annotations

import pytest

from benchmarks.critique_set import FAULTS, critique_text, found_and_missed
from kernelloop.problem import Candidate, Problem
from kernelloop.results import STATUS_OF, Status
from kernelloop.tools.verify.verifier import Verifier

CPU_FAULTS = [fault for fault in FAULTS if fault.where == "cpu"]


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("ws")) as verifier:
        yield verifier


def test_the_set_has_fourteen_faults_each_with_a_cause_and_facts():
    assert len(FAULTS) >= 14 and len({f.name for f in FAULTS}) == len(FAULTS)
    for fault in FAULTS:
        header = fault.candidate.read_text().splitlines()[:2]
        assert header[0].startswith("# fault: ") and header[1].startswith("# cause: "), fault.name
        assert fault.problem.is_file() and fault.facts, fault.name


@pytest.mark.parametrize("fault", CPU_FAULTS, ids=lambda fault: fault.name)
def test_the_critique_of_each_correctness_fault_names_its_facts(fault, verifier):
    verdict = verifier.verify(Candidate.from_file(fault.candidate), Problem.from_file(fault.problem))
    assert verdict.status in (Status.incorrect, Status.rejected), verdict.reason
    assert STATUS_OF[verdict.code] is verdict.status  # a code, and one that belongs to the status
    text = critique_text(verdict.model_dump(), fault.name)
    _, missed = found_and_missed(fault, text)
    assert not missed, f"{fault.name}: missed {missed} in:\n{text}"


RECORDED = FAULTS[0].candidate.parent / "recorded_h100"


def _recorded_critique(part: str, name: str) -> str:
    import json

    raw = json.loads((RECORDED / part / f"{name}.json").read_text())
    return critique_text(raw["verdict"], name)


def test_one_launch_per_call_is_not_told_to_launch_fewer_kernels():
    """A small GEMM on the H100: host-bound with a single launch a call; merging launches is no fix."""
    text = _recorded_critique("examples", "6_MatmulFP16")
    assert "one launch per call" in text and "launch fewer kernels" not in text


def test_a_launch_loop_is_told_how_many_launches_a_call_makes():
    text = _recorded_critique("faults", "host_bound_loop")
    assert "(2048 launches per call); launch fewer kernels" in text


def test_nsight_compute_facts_name_each_kernel_once():
    """ncu profiled two launches of one kernel: the critique says it once, from the longer launch."""
    text = _recorded_critique("faults", "host_bound_loop")
    assert text.count("Nsight Compute, scale_row_kernel") == 1
