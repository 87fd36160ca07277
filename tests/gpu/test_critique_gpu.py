"""The critique-quality set, performance faults, on a GPU: each faulty kernel is verified and timed,
Nsight Compute runs on it where the counters may be read, and its critique must contain every fact
benchmarks/critique_set.py lists. The critic needs pydantic (the agent side); a bare GPU node
records raw verdicts instead (`python benchmarks/critique_set.py --record OUT`) and
test_recorded_critiques judges those files anywhere, once they are kept as fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.critique_set import FAULTS, _before_reruns, critique_text, found_and_missed, wrong_causes

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "faulty_kernels" / "recorded_gpu"
GPU_FAULTS = [fault for fault in FAULTS if fault.where == "gpu"]


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cuda", workspace=tmp_path_factory.mktemp("ws")) as verifier:
        yield verifier


@pytest.mark.parametrize("fault", GPU_FAULTS, ids=lambda fault: fault.name)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_critique_of_each_performance_fault_names_its_facts(fault, verifier):
    pytest.importorskip("pydantic", reason="the critic is agent-side; record with benchmarks/critique_set.py")
    from kernelloop.problem import Candidate, Problem
    from kernelloop.tools.profile import ncu_budget

    verdict = verifier.verify(Candidate.from_file(fault.candidate), Problem.from_file(fault.problem))
    if verdict.ok:
        verdict.profile, _ = ncu_budget.profile_candidate(fault.candidate, fault.problem, verdict.own_kernels,
                                                          verdict.profile)
    text = critique_text(verdict.model_dump(), fault.name)
    _, missed = found_and_missed(fault, text)
    assert not missed, f"{fault.name}: missed {missed} in:\n{text}"
    assert not wrong_causes(fault, text, verdict.model_dump()), f"{fault.name}: wrong causes in:\n{text}"


@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: fault.name)
def test_recorded_critiques(fault):
    """Against the verdicts recorded on the H100 (kept with their provenance), on any machine: the
    correctness faults too, since a GPU runs programs in an order the interpreter does not."""
    path = RECORDED / "faults" / f"{fault.name}.json"
    if not path.is_file():
        pytest.skip(f"no H100 recording at {path} yet (benchmarks/critique_set.py --record)")
    raw = json.loads(path.read_text())
    assert raw["provenance"]["device"].startswith("NVIDIA")
    text = critique_text(raw["verdict"], fault.name)
    if _before_reruns(raw["verdict"]):
        # Made before the reruns (record again): without their facts a NaN is "unwritten or an overflow",
        # and the fault's own facts may be missing; what still holds is that no cause lacks its facts.
        from kernelloop.agents.causes import wrongly_named
        from kernelloop.records import Verdict

        located = Verdict.model_validate(raw["verdict"]).localisation
        assert not wrongly_named(text, located), f"{fault.name}: a cause without its facts in\n{text}"
        return
    _, missed = found_and_missed(fault, text)
    assert not missed, f"{fault.name}: missed {missed}"
    assert not wrong_causes(fault, text, raw["verdict"]), f"{fault.name}: wrong causes in\n{text}"
