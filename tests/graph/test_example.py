"""examples/recorded_run replays as its README says, and its recording matches its generator."""

import importlib.util
from pathlib import Path

from kernelloop.graph.rundir import load_recording
from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status, Verdict
from kernelloop.serve.runs import solve

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recorded_run"


class ColumnBiasVerifier:
    """Stands in for the real verifier (tests/graph/test_cli.py runs that one): right iff bias by column."""

    def verify(self, candidate: Candidate, problem: Problem, time_left_s=None) -> Verdict:
        if "bias_ptr + (offsets % n_cols)" in candidate.source:
            return Verdict(status=Status.correct, reason="correct")
        return Verdict(status=Status.incorrect, reason="mismatch", rel_err=0.6)


def test_the_committed_recording_is_what_write_turns_py_writes():
    spec = importlib.util.spec_from_file_location("write_turns", EXAMPLE / "write_turns.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    committed = load_recording(EXAMPLE / "turns.jsonl")
    assert committed.header == module.header()
    assert [t.model_dump() for t in module.turns(module.prompt_hashes())] == [t.model_dump() for t in committed.turns]


def test_the_example_replays_with_no_endpoint(tmp_path):
    result = solve(EXAMPLE / "scale_bias_relu.py", recorded=EXAMPLE / "turns.jsonl", candidates=2,
                   verifier=ColumnBiasVerifier(), workspace=tmp_path, analyze=lambda problem: None)
    assert (result.status, result.best_id, result.stop_reason) == ("correct", "r2c0", "correct_unmeasured")
    assert result.model == "hand-written example (not a model)"
