"""The parent's side of the trusted reference job (reference_job.py): one per problem, in its own
sandbox worker, alive while the verifier judges candidates of that problem.

It draws nothing and decides nothing: the parent picks the seeds (fresh and secret for every
verification), the job makes the inputs and the reference's outputs on them, and the parent reads
the outputs into its own memory and deletes the file before any candidate runs. Only the inputs
file goes on to the candidate's job dir.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelloop.problem import Problem, ProblemError
from kernelloop.problem_meta import checked_gradient_names, checked_tolerance, checked_workload_names
from kernelloop.safe_text import one_line
from kernelloop.sandbox.runner import JobOutcome, JobSession, Zygote, new_job_dir, remove_job_dir
from kernelloop.sandbox.safe_io import open_bounded
from kernelloop.tools.verify import op_records
from kernelloop.tools.verify._runtime import no_collection
from kernelloop.tools.verify.claims import claimed_counts
from kernelloop.tools.verify.op_records import SetOps
from kernelloop.tools.verify.tensor_files import TensorFileError, load_sets

# The trusted job writes the problem's own inputs and outputs, whatever their size (KernelBench
# main, level 1, problem 87: an 8 GiB output, over the candidates' default file limit); no
# candidate code runs there, so its only file limit is the disk.
TRUSTED_FILE_SIZE_BYTES = 1 << 40


@dataclass
class Made:
    """One batch of input sets: where their inputs file is, and the reference's outputs on them."""

    inputs_path: Path
    outputs: list[list]
    op_counts: dict[str, int]  # the reference's compute ops, with how many times each ran
    warnings: list[str]
    round_off: dict[int, float] = field(default_factory=dict)  # output -> its own error against float64 (degenerate)
    op_work: dict[str, int] = field(default_factory=dict)  # each op's elements on the first set, copies as "copy"
    # A problem with get_workloads, a trial make: [name, sets] of each workload in the sets' order
    # (get_inputs' own first); [] otherwise. Checked by workloads.Layout.
    workloads: list = field(default_factory=list)
    # A trial make: each set's op record, on its own shapes (op_records.py), and its input signature
    # (shapes, dtypes, strides, plain values) as a number, one per distinct signature; [] otherwise
    set_ops: list[SetOps] = field(default_factory=list)
    set_signatures: list[int] = field(default_factory=list)
    # A BACKWARD problem's trial make: the upstream gradients' file (handed to the candidate with the
    # inputs), the reference's gradients of each set (this process only) and their names, in order
    upstream_path: Path | None = None
    grads: list[list] = field(default_factory=list)
    grad_names: list[str] = field(default_factory=list)
    backward_ops: list[SetOps] = field(default_factory=list)  # and each set's backward op record; [] otherwise

    @property
    def ops(self) -> list[str]:
        return sorted(self.op_counts)


CLOSE_WAIT_S = 1.0


def problem_file(problem: Problem, job_dir: Path) -> Path:
    """The problem's text as it was read and checked, written into the trusted job's own dir: the
    job runs exactly that, never whatever its original path holds by then (a file edited since, or
    swapped for a pipe the sandbox's staging copy would block on)."""
    path = job_dir / problem.path.name
    path.write_text(problem.source)
    return path


class ReferenceServer:
    """The trusted job for one problem, started on first use and closed with `close()`."""

    def __init__(self, zygote: Zygote, problem: Problem, root: Path, job: dict, timeout_s: float,
                 outputs_device: torch.device = torch.device("cpu")):
        self.problem, self.root, self.timeout_s, self.outputs_device = problem, root, timeout_s, outputs_device
        self.job_dir = new_job_dir(root / "jobs", "ref-")
        self.session: JobSession = zygote.start({**job, "kind": "reference", "problem_where": str(problem.path),
                                                 "problem_path": str(problem_file(problem, self.job_dir))},
                                                self.job_dir, timeout_s, timeout_s, phases=(),
                                                file_size_bytes=TRUSTED_FILE_SIZE_BYTES)
        self.op_counts: dict[str, int] = {}
        self.op_work: dict[str, int] = {}
        self.warnings: list[str] = []
        self._ahead: list[str] = []  # requests sent ahead whose answers have not been read yet
        self._answers: dict[str, dict] = {}
        sizes = self.ask("ready", None)
        # Bytes of one input set and its output (None: unknown until a set is made)
        self.input_bytes, self.output_bytes = sizes.get("input_bytes"), sizes.get("output_bytes")
        # What the parent compares with, as plain data from the job (checked again: for a problem
        # from outside, the job runs that problem's code), never from importing the problem here.
        meta = sizes.get("meta")
        self.tolerance = checked_tolerance(meta.get("tolerance") if isinstance(meta, dict) else None, str(problem.path))
        # A problem with get_workloads: their names, get_inputs' first ([] for a problem without)
        self.workload_names = checked_workload_names(meta.get("workloads") if isinstance(meta, dict) else None,
                                                     str(problem.path))
        # BACKWARD = True: a trial make also makes upstream gradients and the reference's gradients
        self.backward = isinstance(meta, dict) and meta.get("backward") is True

    def send_ahead(self, kind: str, request: dict) -> None:
        """Send a request now and read its answer later (`answer(kind)`, or before the next `ask`):
        the job works on it while the parent does something else."""
        self.session.send({kind: request})
        self._ahead.append(kind)

    def answer(self, kind: str) -> dict | None:
        """The answer to a request sent ahead (waiting for it), or None if none was sent."""
        self._drain(kind)
        return self._answers.pop(kind, None)

    def _drain(self, until: str | None = None) -> None:
        """Read the answers to requests sent ahead, in order (all of them, or up to `until`)."""
        while self._ahead:
            kind = self._ahead.pop(0)
            self._answers[kind] = self._receive(kind)
            if kind == until:
                return

    def _receive(self, kind: str, timed: bool = False) -> dict:
        self.session.restart_clock()
        message = self.session.receive(timed=timed)
        if message is None or not isinstance(message.get(kind), dict):
            result = self.session.finish().result or {}
            if result.get("status") == "not_a_problem":  # the job's own check: one line naming the file
                raise ProblemError(one_line(result.get("reason"), 2000))
            raise ProblemError(f"{self.problem.path}: the reference failed on its device: {self._why()}")
        return message[kind]

    def ask(self, kind: str, request: dict | None, timed: bool = False) -> dict:
        """Send one request (or none, for `ready`) and wait for its answer. `timed`: the parent's clock
        is around it, so the session's own checks wait until no message is due (JobSession.receive)."""
        self._drain()
        self._answers.clear()
        if request is not None:
            self.session.send({kind: request})
        return self._receive(kind, timed)

    def _why(self) -> str:
        outcome: JobOutcome = self.session.finish()
        result = outcome.result or {}
        if result.get("reason"):  # the problem's own words (an exception it raised): one bounded line
            return one_line(result["reason"], 2000)
        if outcome.timed_out:
            return f"timed out after {self.timeout_s:g}s"
        stderr = outcome.stderr_tail.strip().splitlines()
        return f"exited with code {outcome.exit_code}" + (f": {one_line(stderr[-1], 500)}" if stderr else "")

    def make(self, seeds: list[int], variants: bool, fresh: bool = False, donor_seeds: list[int] | None = None) -> Made:
        """Inputs for `seeds` and the reference's outputs on them, the outputs in this process only.
        `fresh`: this verification times on fresh values (opt-in): the trusted job keeps the sets
        they are drawn from, and `donor_seeds` are for a new verification (`variants`), sets made
        only for fresh values to be drawn from, where the seeds' own sets of one shape are fewer
        than two (fresh_values.py). Without it the request is as it was before fresh timing."""
        # Names nobody can guess: in plain mode a candidate could otherwise plant something there.
        tag = secrets.token_hex(8)
        inputs_path = self.job_dir / f"inputs-{tag}.sets"
        outputs_path = self.job_dir / f"outputs-{tag}.sets"
        request = {"seeds": seeds, "variants": variants, "inputs_path": str(inputs_path),
                   "outputs_path": str(outputs_path)}
        if fresh:
            request.update(fresh=True, donor_seeds=list(donor_seeds or []))
        backward = variants and self.backward  # the trials judge the backward; the fresh sets and timing do not
        upstream_path, grads_path = self.job_dir / f"upstream-{tag}.sets", self.job_dir / f"grads-{tag}.sets"
        if backward:
            request.update(upstream_path=str(upstream_path), grads_path=str(grads_path))
        answer = self.ask("make", request)
        outputs = self._outputs(outputs_path)
        grads: list[list] = []
        names: list[str] = []
        if backward:
            grads = self._outputs(grads_path)
            names = checked_gradient_names(answer.get("grad_names"), str(self.problem.path))
            if len(grads) != len(outputs) or any(len(g) != len(names) for g in grads):
                raise ProblemError(f"{self.problem.path}: the trusted job's gradients do not match its outputs")
        if answer.get("ops"):
            self.op_counts = claimed_counts(answer["ops"])
            self.op_work = claimed_counts(answer.get("op_work"))
        self.warnings = list(answer.get("warnings") or [])
        round_off = {int(index): float(own) for index, own in answer.get("round_off") or []}
        return Made(inputs_path, outputs, self.op_counts, self.warnings, round_off, self.op_work,
                    answer.get("workloads") or [], op_records.decode(answer, len(outputs)) or [],
                    op_records.numbers(answer.get("set_signatures"), len(outputs)),
                    upstream_path if backward else None, grads, names,
                    (op_records.decode(answer.get("backward_ops") or {}, len(outputs)) or []) if backward else [])

    def select_workload(self, name: str) -> None:
        """The trusted job times workload `name` next (its sets from the last trial make)."""
        self.ask("workload", {"name": name})

    def regen(self, seed: int, calls: int, indices: list[int]) -> list[list]:
        """The reference's outputs on the values of calls `indices` of a timed request of `calls`
        calls whose fresh values came from `seed`, made again in the trusted job, in this process only."""
        outputs_path = self.job_dir / f"regen-{secrets.token_hex(8)}.sets"
        self.ask("regen", {"seed": seed, "calls": calls, "indices": indices, "outputs_path": str(outputs_path)})
        return self._outputs(outputs_path)

    def _outputs(self, path: Path) -> list[list]:
        """Output sets the trusted job wrote to `path`, read onto the compare device; the file is gone after."""
        # Written by the trusted job, but in a dir a plain-mode candidate could reach: opened the
        # same careful way, read into this process, and gone before any candidate runs.
        try:
            size = path.stat().st_size
            with open_bounded(path, size) as handle:
                outputs, _ = load_sets(handle, size, self.outputs_device)  # where the parent compares
        except (OSError, TensorFileError) as exc:
            raise ProblemError(f"{self.problem.path}: the reference's outputs could not be read: {exc}") from None
        finally:
            path.unlink(missing_ok=True)
        return outputs

    def timed(self, kind: str, request: dict) -> tuple[dict, float]:
        """Ask, and return the answer with the parent's own clock (ms) around it."""
        self._drain()  # answers sent ahead are read before the clock starts
        with no_collection():  # this process's collector held off while its clock runs
            started = time.perf_counter()
            answer = self.ask(kind, request, timed=True)
            return answer, (time.perf_counter() - started) * 1000.0

    def alive(self) -> bool:
        return not self.session.ended

    def close(self, keep: bool = False) -> None:
        self.session.send({"close": {}})
        # Told to close, it ends on its own (its result: milliseconds), unless it is still busy with
        # a request sent ahead (a compile the verdict no longer needs): that is not waited for.
        self.session.finish(wait_s=0.0 if self._ahead else CLOSE_WAIT_S)
        if not keep:
            remove_job_dir(self.job_dir)
