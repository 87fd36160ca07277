"""The critique-quality set, correctness faults, on the CPU: each faulty kernel (one known cause,
tests/fixtures/faulty_kernels/) goes through the real verifier and the critic, and its critique
must contain every fact benchmarks/critique_set.py lists for it."""

from __future__ import annotations

import pytest

from benchmarks.critique_set import FAULTS, critique_text, found_and_missed, stable_words, wrong_causes
from kernelloop.problem import Candidate, Problem
from kernelloop.records import STATUS_OF, Status
from kernelloop.tools.verify.verifier import Verifier

CPU_FAULTS = [fault for fault in FAULTS if fault.where == "cpu"]


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("ws")) as verifier:
        yield verifier


def test_the_set_has_twenty_faults_each_with_a_cause_and_facts():
    assert len(FAULTS) >= 20 and len({f.name for f in FAULTS}) == len(FAULTS)
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
    wrong = wrong_causes(fault, text, verdict.model_dump())
    assert not wrong, f"{fault.name}: offered {wrong} without their facts, or not its own, in:\n{text}"


@pytest.mark.parametrize("name", ["partial_reduction", "off_by_one_row"])
def test_the_region_and_relation_read_the_same_with_other_poisons_and_seeds(name, verifier):
    """Each verification draws its own input seeds and poisons: the words must not change."""
    fault = next(f for f in FAULTS if f.name == name)
    words = []
    for _ in range(2):
        verdict = verifier.verify(Candidate.from_file(fault.candidate), Problem.from_file(fault.problem))
        words.append(stable_words(verdict.model_dump(), critique_text(verdict.model_dump(), name)))
    assert words[0] == words[1] and any("never written" in line for line in words[0])


def test_a_cause_without_its_facts_is_counted_wrong():
    """The set's own check: a race named where nothing moved between runs, or a cause not the fault's."""
    fault = next(f for f in FAULTS if f.name == "missing_tail_mask")
    from kernelloop.records import Localisation, Status, Verdict

    verdict = Verdict(status=Status.incorrect, reason="nan", localisation=Localisation(reruns=2, tail_from=12288)).model_dump()
    assert wrong_causes(fault, "the last partial block is not handled", verdict) == []
    assert wrong_causes(fault, "a race across programs", verdict) == ["race"]
    assert wrong_causes(fault, "the row stride (or row offset) is wrong", verdict) == ["row_stride"]


RECORDED = FAULTS[0].candidate.parent / "recorded_gpu"


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
