"""Every trial set's ops are recorded and judged, and the decoy runs take a set the parent draws after
the trials (review35: a forward that recognised the first set, the only one recorded and disturbed,
ran its own kernel there and torch's relu on every other set, and was judged correct).

In-process: the trusted job's make (ReferenceJob) on a problem with two workloads, so the sets have
other shapes, and the candidate's child's trials (_CandidateSession) with a channel stand-in; the
candidate's "own kernel" is an extension function (what a load_inline module's call is counted as),
computing in numpy, outside torch's dispatch, as a compiled one does."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn

from kernelloop.records import Code
from kernelloop.tools.verify import op_records
from kernelloop.tools.verify.harness import LaunchCounter, _CandidateSession, _CountedExtension, read_sets
from kernelloop.tools.verify.reference_job import ReferenceJob
from kernelloop.tools.verify.reference_server import Made
from kernelloop.tools.verify.verification import decoy_choices, op_claims, op_rules

PROBLEMS = Path(__file__).resolve().parents[1] / "fixtures" / "problems"
BASE = {"device": "cpu", "own_kernels": ["ext:rowsum"], "library_ops": []}


class _Module:
    """A built extension's stand-in: its function's work is outside torch's dispatch."""

    @staticmethod
    def rowsum(x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.numpy().sum(axis=1))


class _Channel:
    """The parent's end: what the child sends, and the requests it reads in order."""

    def __init__(self, requests: list[dict]):
        self.sent: list[dict] = []
        self.requests = list(requests)

    def phase(self, name: str) -> None:
        pass

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def receive(self) -> dict:
        return self.requests.pop(0)

    def put_back(self, message: dict) -> None:
        self.requests.insert(0, message)


class RowSum(nn.Module):
    """Its own function on every set, or (`torch_after_first`) on the first set alone and torch.sum on
    the rest; it keeps each input it is handed."""

    def __init__(self, counter: LaunchCounter, torch_after_first: bool = False):
        super().__init__()
        self.ext, self.torch_after_first, self.seen = _CountedExtension(_Module(), counter), torch_after_first, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x)
        if self.torch_after_first and len(self.seen) > 1:
            return torch.sum(x, dim=1)
        return self.ext.rowsum(x)


def reference(tmp_path: Path) -> tuple[Made, list[list]]:
    """A trial make of the two-workload rowsum problem, as the parent reads it, and its input sets."""
    job = ReferenceJob({"device": "cpu", "problem_path": str(PROBLEMS / "rowsum_workloads.py")})
    inputs, outputs = tmp_path / "in.sets", tmp_path / "out.sets"
    answer = job.make({"seeds": [3, 4], "variants": True, "inputs_path": str(inputs), "outputs_path": str(outputs)})
    sets, _ = read_sets(str(inputs))
    made = Made(inputs, [[]] * len(sets), answer["ops"], [], {}, answer["op_work"], answer.get("workloads") or [],
                op_records.decode(answer, len(sets)) or [], op_records.numbers(answer.get("set_signatures"), len(sets)))
    return made, sets


def trials(tmp_path: Path, sets: list[list], torch_after_first: bool, decoy_set: int | None = None):
    counter = LaunchCounter()
    model = RowSum(counter, torch_after_first)
    channel = _Channel([{"decoy": {"set": decoy_set}}] if decoy_set is not None else [{"done": {}}])
    job = {"device": "cpu", "job_dir": str(tmp_path), "decoy_check": True}
    session = _CandidateSession(model, sets, counter, job, channel)  # type: ignore[arg-type]
    with torch.no_grad():
        assert session.trials() is None
    return channel, model, counter


def test_the_reference_records_each_set_on_its_own_shapes(tmp_path):
    made, sets = reference(tmp_path)
    assert len(made.set_ops) == len(sets) == 4 and made.set_signatures == [0, 0, 1, 1]
    assert made.set_ops[0].work == {"sum": 64 * 128} and made.set_ops[-1].work == {"sum": 48 * 3000}
    assert made.set_ops[0] == made.set_ops[1] and made.op_work == made.set_ops[0].work  # the first set's as before


def test_a_forward_honest_on_the_first_set_and_torch_on_the_others_leaves_the_work_to_torch(tmp_path):
    made, sets = reference(tmp_path)
    channel, _, counter = trials(tmp_path, sets, torch_after_first=True)
    message = channel.sent[0]["trials"]
    launches = sorted(counter.launches)
    # its first set alone (all that was recorded before): no torch op, its own output used; judged correct
    assert op_rules(launches, op_claims({**message, "set_records": None}, made), False, BASE) is None
    each_set = op_claims(message, made)
    assert len(each_set) == 4 and each_set[1][1].work == {"sum": 64 * 128}
    verdict = op_rules(launches, each_set, False, BASE)
    assert verdict is not None and verdict.code is Code.leaves_work_to_torch, verdict
    assert channel.requests == [{"done": {}}]  # not a decoy request: left for the request loop


def test_an_honest_kernel_passes_with_every_set_recorded(tmp_path):
    made, sets = reference(tmp_path)
    channel, _, counter = trials(tmp_path, sets, torch_after_first=False)
    message = channel.sent[0]["trials"]
    each_set = op_claims(message, made)
    assert [cand.own_used for _, cand in each_set] == [64, 64, 48, 48] and not any(c.work for _, c in each_set)
    assert op_rules(sorted(counter.launches), each_set, False, BASE) is None


def test_each_set_is_judged_against_the_reference_on_its_own_shapes():
    """A last step in torch over a few partials a row: on 3000 columns more elements than the whole
    reference's work on a set of 8 columns, and still little of its own set's."""
    small, large = op_records.SetOps({"sum": 1}, {"sum": 4 * 8}), op_records.SetOps({"sum": 1}, {"sum": 4 * 3000})
    partials = op_records.SetOps({"sum": 1}, {"sum": 4 * 3 * 4}, 4 * 3 * 4)
    assert op_rules(["k"], [(small, op_records.SetOps(own_used=4)), (large, partials)], False, BASE) is None
    assert op_rules(["k"], [(small, partials)], False, BASE) is not None  # the first set's record for every set would reject it


def test_the_decoy_runs_take_the_parents_set_in_new_tensors(tmp_path):
    _, sets = reference(tmp_path)
    channel, model, _ = trials(tmp_path, sets, torch_after_first=False, decoy_set=2)
    assert channel.sent[-1] == {"decoy": {"saved": 1}}  # an extension's forward: the perturb run only
    trial_inputs, decoy_input = model.seen[:4], model.seen[4]
    assert len(model.seen) == 5 and torch.equal(decoy_input, sets[2][0])
    assert all(decoy_input is not seen for seen in trial_inputs) and decoy_input is not sets[2][0]
    assert (tmp_path / "decoy.sets").exists()


def test_the_decoy_set_is_one_with_a_later_set_of_its_shapes():
    """Skipped launches leave an output buffer the forward keeps as its last call on those shapes wrote it:
    on that call's own set the answer is there (relu_one_buffer_triton), so the last set of each
    signature is never drawn."""
    assert decoy_choices([0, 0, 0, 1, 1], 5) == [0, 1, 3]
    assert decoy_choices([0, 1, 0], 3) == [0]
    assert decoy_choices([0, 1], 2) == [0] and decoy_choices([0], 1) == [0]  # none has one: the first set, as before
    assert decoy_choices([], 3) == [0]  # unknown
