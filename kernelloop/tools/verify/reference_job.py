"""The trusted child: everything the verdict needs from running the problem, in a process where no
candidate code ever runs.

One long-lived job per problem (its own zygote, its own sandbox): it imports the problem, checks
it (problem_meta.check_module: for a problem from outside, the only place it is ever imported),
builds Model once, says it is ready with the problem's sizes and what the parent needs of it as
plain data (its tolerance), and then answers the parent on its channel:
  make      inputs for the seeds the parent drew (secret to the candidate), and the reference's
            outputs on them; inputs and outputs go to separate files, and only the inputs file
            ever reaches the candidate's job. A trial make also answers each set's op record (the
            aten ops on its shapes, recorded once per input signature: op_records.py)
  warm_up   import the compiler the torch.compile baseline needs, and with `build` (a problem's
            first verification, outputs not huge) build the baselines on the last inputs made,
            torch.compile included; the parent asks ahead, while the candidate compiles and runs its
            trials, so the first verification does not wait for a compile after them. Their first
            calls run on the device beside the candidate's trials; nothing is timed then
  timing    eager, torch.compile and the problem's own baselines, set up on the last inputs made
            (built here unless warm_up built them)
  block     rounds of those baselines, timed with events (GPU), each call on fresh values
            (fresh_values.py) drawn from the request's seed, as the candidate's are
  back      back-to-back calls of eager, which the parent times with its own clock, each with the
            per-call work a candidate's call has in its child (fresh values in, the output kept,
            the digests); or ("overhead") that work alone, which the parent takes off both
  regen     the reference's outputs on the values of timed calls the parent picked to check, made
            again from their request's seed
  workload  a problem with get_workloads: time that workload's sets next (its trial sets, made by
            the last `make` beside get_inputs' own, become the sets timed and fresh values are
            drawn from; the baselines are built again on them)
  close     the end
The candidate's process never holds reference outputs, baseline timings or anything else the
verdict is decided from (docs/architecture.md, "The verifier and its trust boundary").
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from kernelloop.problem import ProblemError, import_source
from kernelloop.problem_meta import check_module, judges_backward, metadata, workloads
from kernelloop.sandbox.channel import Channel
from kernelloop.tools.verify import op_records
from kernelloop.tools.verify._runtime import (
    INIT_SEED,
    OpRecorder,
    declared_precision,
    hold_declared_precision,
    make_inputs,
    no_collection,
    seed_all,
    synchronize,
    to_device,
)
from kernelloop.tools.verify.compare import (
    DEGENERATE_FRACTION,
    degenerate_output_warnings,
    flatten_outputs,
    tolerance_for,
)
from kernelloop.tools.verify.fresh_values import FreshRequest, Pool, Window, pool_indices, warm_fresh_values
from kernelloop.tools.verify.kept_outputs import Kept
from kernelloop.tools.verify.tensor_files import save_sets
from kernelloop.tools.verify.window_graph import WindowGraph

if TYPE_CHECKING:
    from kernelloop.tools.profile.measure import Caller


def roundoff_errors(make_double: Callable[[], Any], inputs: list, outputs: list, tolerance: dict,
                    rng: dict | None = None) -> dict[int, float]:
    """The outputs that are their own round-off: index -> the reference's error against the same
    model run in float64 on the same inputs, relative to its norm, where that is over
    DEGENERATE_FRACTION of rel (an exact kernel could not pass the norm-relative check). Only
    outputs whose every element is within atol of zero are looked at (elsewhere a kernel of zeros
    fails the elementwise check anyway), so most problems never pay for the float64 run.
    `make_double`: builds the float64 model (None where it can't be); `rng`: the random
    state the reference ran with, restored for the float64 run (dropout draws the same), and the
    caller's state is left as it was."""
    small = []
    for index, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor) or not out.is_floating_point() or out.dtype == torch.float64 or not out.numel():
            continue
        tol = tolerance_for(out.dtype, tolerance)
        if float(out.detach().abs().amax()) <= tol["atol"] and float(torch.linalg.vector_norm(out.double())) > 0:
            small.append(index)
    if not small:
        return {}
    double = make_double()
    if double is None:
        return {}
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        if rng is not None:
            torch.set_rng_state(rng["cpu"])
            if rng.get("cuda") is not None and devices:
                torch.cuda.set_rng_state(rng["cuda"])
        as_double = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in inputs]
        try:
            exact = flatten_outputs(double(*as_double))
        except Exception:  # noqa: BLE001 - a model that can't run in float64: no round-off estimate, the usual checks
            return {}
    found = {}
    for index in small:
        ref = outputs[index].detach().double()
        high = exact[index] if index < len(exact) else None
        if not isinstance(high, torch.Tensor) or high.shape != ref.shape:
            continue
        own = float(torch.linalg.vector_norm(ref - high.to(ref.device, torch.float64)) / torch.linalg.vector_norm(ref))
        if own > DEGENERATE_FRACTION * tolerance_for(outputs[index].dtype, tolerance)["rel"]:
            found[index] = own
    return found


def _rng_state(device: str) -> dict:
    return {"cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state() if device.startswith("cuda") and torch.cuda.is_available() else None}


def _recorded_once(records: dict[Any, dict[str, Any]], key: Any, run: Callable[[Any], Any], arg: Any) -> Any:
    """`run(arg)`; where `key` (an input signature, op_records.signature) has no record yet, its torch ops
    recorded into records[key] (OpRecorder): each signature recorded once, ever. None: not recorded."""
    if key is None or key in records:
        return run(arg)
    recorder = OpRecorder()
    with recorder:
        result = run(arg)
    records[key] = {"ops": recorder.compute_ops(), "op_work": recorder.compute_work()}
    return result


def _backward(pairs: list[tuple[Any, Any]]) -> None:
    """Autograd's call on each (output, upstream gradient) pair; nothing where there is none."""
    if pairs:
        torch.autograd.backward([r for r, _ in pairs], [u for _, u in pairs])


class ReferenceJob:
    """The problem's Model, its inputs for any seed, and its baselines."""

    def __init__(self, job: dict[str, Any]):
        self.device = job["device"]
        self.problem = import_source(Path(job["problem_path"]), "kernelloop_reference")
        where = str(job.get("problem_where") or job["problem_path"])  # the path the user knows it by
        check_module(self.problem, where)
        self.meta = metadata(self.problem, where)
        # [(name, maker)], get_inputs first; more than one only where the problem has get_workloads
        self.workloads = workloads(self.problem, where)
        self.layout: dict[str, tuple[int, int]] = {}  # each workload's sets in the last trial `make`: [start, stop)
        self.made_sets: list[list] = []  # that make's sets, every workload's
        self.firsts: dict[str, list] = {}  # each workload's first reference outputs (what its timed calls keep)
        self.timed_workload: str | None = None  # whose sets the baselines were built on last
        self.backward = judges_backward(self.problem)  # BACKWARD = True: a trial make also makes the gradients
        seed_all(INIT_SEED)
        self.init_inputs = list(self.problem.get_init_inputs())
        self.model = self.problem.Model(*self.init_inputs).to(self.device)
        hold_declared_precision()  # everything from here on, the baselines' timed calls too, as the candidate's child runs
        self.ops: dict[str, int] | None = None
        self.work: dict[str, int] = {}  # each op's elements on the first set (OpRecorder.compute_work)
        # Each input signature's op record (op_records.signature: another workload's or a variant's
        # sets have other shapes, so other work), recorded on the first set of it ever made
        self.records: dict[Any, dict[str, dict[str, int]]] = {}
        self.backward_records: dict[Any, dict[str, dict[str, int]]] = {}  # BACKWARD problems: the backward's, alike
        self.full_baselines = bool(job.get("full_baselines"))
        self.tolerance = dict(getattr(self.problem, "TOLERANCE", None) or {})
        self._double: Any = None  # the model in float64, for round-off estimates (False: it can't be made)
        self._timing: Any = None  # the baselines' Rounds, once set up
        self.sets: list[list] = []
        self.last_sets: list[list] = []  # the input sets of the last `make`: the ones a candidate is timed on
        # Fresh values (fresh_values.py): the trial sets they are drawn from, the baselines' input
        # buffers they are written into, this block's values; `like`: the reference's outputs of
        # the first trial set (shapes and dtypes of what the candidate's child keeps).
        self.pool: Pool | None = None
        self.buffers: list = []
        self.fresh: FreshRequest | None = None
        self.fresh_timing = False  # opt-in: set by a "timing" request that asks for it
        self.like: list = []
        self.kept: Kept | None = None
        self.window: Window | None = None  # the back-to-back windows' input sets, one per call
        self.graphs: dict[str, WindowGraph] = {}  # each baseline's windows as one CUDA graph (window_graph.py)
        self.held: list = []  # a replayed window's outputs, between its "run" and "keep" steps

    def inputs_for(self, seeds: list[int], variants: bool) -> tuple[list[list], list[int]]:
        """One input set per seed; with `variants`, the problem's extra shapes go before the last.
        Also where the seeds' own sets are among them."""
        sets = [make_inputs(self.problem, seed, self.device) for seed in seeds]
        if not variants:
            return sets, list(range(len(sets)))
        extra = []
        if hasattr(self.problem, "get_input_variants"):
            seed_all(seeds[0])
            extra = [list(v) for v in self.problem.get_input_variants()]
        # Scaled copies of the first set, where the problem says such inputs are valid too.
        extra += [[v * scale if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in sets[0]]
                  for scale in getattr(self.problem, "INPUT_SCALES", ())]
        made = sets[:-1] + extra + sets[-1:]
        return made, list(range(len(sets) - 1)) + [len(made) - 1]

    def _pool_for(self, sets: list[list], seeded: list[int], donor_seeds: list[int]) -> tuple[list[int], list[list]]:
        """The positions of the sets fresh values are drawn from (the seeds' own sets of the first
        one's shapes), and donor sets made from `donor_seeds` where fewer than two are: inputs only,
        never run as trials (a problem with a huge output gets one trial set)."""
        pool = pool_indices(sets, seeded)
        donors: list[list] = []
        for seed in donor_seeds:
            if len(pool) + len(donors) >= 2:
                break
            donor = make_inputs(self.problem, seed, self.device)
            if pool_indices([sets[pool[0]], donor], [0, 1]) == [0, 1]:
                donors.append(donor)
        return pool + list(range(len(sets), len(sets) + len(donors))), donors

    def _workload_sets(self, seeds: list[int]) -> tuple[list[list], dict[str, tuple[int, int]]]:
        """Each further workload's sets for the same secret seeds, in the problem's order, and where
        each lies in the trial file (after get_inputs' own sets, which start it)."""
        sets: list[list] = []
        layout: dict[str, tuple[int, int]] = {}
        for name, maker in self.workloads[1:]:
            start = len(sets)
            sets += [make_inputs(self.problem, seed, self.device, maker) for seed in seeds]
            layout[name] = (start, len(sets))
        return sets, layout

    def make(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("variants"):
            # A new verification: the last one's timed sets are never timed again; free their
            # device memory before this one's are made (set by set, so the baselines' list keeps
            # its length and nothing recompiles).
            self.last_sets, self.pool, self.buffers, self.fresh, self.kept, self.window = [], None, [], None, None, None
            self.like = []
            for index in range(len(self.sets)):
                self.sets[index] = []
        sets, seeded = self.inputs_for([int(s) for s in request["seeds"]], bool(request.get("variants")))
        extra: dict[str, Any] = {"init_inputs": self.init_inputs}
        own = len(sets)  # get_inputs' own sets (its variants among them): what is timed first
        with_workloads = bool(request.get("variants")) and len(self.workloads) > 1
        if with_workloads:  # a trial make of a problem with get_workloads: every workload's sets after them
            more, layout = self._workload_sets([int(s) for s in request["seeds"]])
            self.layout = {self.workloads[0][0]: (0, own),
                           **{name: (own + a, own + b) for name, (a, b) in layout.items()}}
            sets = sets + more
            if self.timed_workload not in (None, self.workloads[0][0]):
                self._timing = None  # built on another workload's shapes: built again on get_inputs' (warm_up)
            # Where each workload's sets lie, and which of them its fresh values come from (the child's timing)
            extra["workloads"] = [[name, a, b, [a + i for i in pool_indices(sets[a:b], list(range(b - a)))]]
                                  for name, (a, b) in self.layout.items()]
        if request.get("variants") and request.get("fresh"):  # fresh timing (opt-in): the sets its values come from
            pool, donors = self._pool_for(sets[:own], seeded, [int(s) for s in request.get("donor_seeds") or []])
            # donors go after every set, workloads' included (the child takes them off the end)
            pool = [i if i < own else i - own + len(sets) for i in pool]
            self.pool = Pool([to_device((sets + donors)[i], self.device) for i in pool])
            extra.update(pool=pool, donors=len(donors))
            if with_workloads:
                extra["workloads"][0][3] = pool
        else:
            donors = []
        outputs = []
        set_records: list[dict[str, Any]] = []  # a trial make's: each set's op record, the candidate's judged against it
        signatures: dict[Any, int] = {}  # and each set's signature, numbered: the parent picks the decoy runs' set by them
        set_signatures: list[int] = []
        trial = bool(request.get("variants"))
        rng = _rng_state(self.device)  # the state set 0's forward runs with (dropout), for the float64 rerun
        # at the declared precision (TF32 off), as is everything in both children (hold_declared_precision)
        with torch.no_grad(), declared_precision():
            for inputs in sets:
                key = op_records.signature(inputs) if trial or self.ops is None else None
                out = _recorded_once(self.records, key, lambda given: self.model(*to_device(given, self.device)), inputs)
                if key is not None:
                    if self.ops is None:
                        self.ops, self.work = self.records[key]["ops"], self.records[key]["op_work"]
                    if trial:
                        set_records.append(self.records[key])
                        set_signatures.append(signatures.setdefault(key, len(signatures)))
                synchronize(self.device)
                # Left where they are: save_sets streams a device tensor out slice by slice,
                # so a multi-GB output never has a whole second copy on the host.
                outputs.append([o.detach() if isinstance(o, torch.Tensor) else o for o in flatten_outputs(out)])
        self.last_sets = sets[:own]  # timed: get_inputs' own sets (another workload's on its "workload" request)
        if with_workloads:
            self.made_sets = sets
            self.firsts = {name: outputs[a] for name, (a, _) in self.layout.items()}
            self.timed_workload = self.workloads[0][0]
        if request.get("variants") and request.get("fresh"):
            self.like = outputs[0]
        save_sets(request["inputs_path"], sets + donors, extra)
        save_sets(request["outputs_path"], outputs)
        with torch.no_grad():
            round_off = roundoff_errors(self.double_model, to_device(sets[0], self.device), outputs[0], self.tolerance, rng)
        answer: dict[str, Any] = {"sets": len(sets), "ops": self.ops, "op_work": self.work,
                  "warnings": degenerate_output_warnings(outputs[0]), "round_off": sorted(round_off.items())}
        if trial:  # every trial set's record: its own shapes' work (op_records.py)
            answer.update(op_records.encode(set_records), set_signatures=set_signatures)
        if with_workloads:  # which sets are whose, for the parent to name the workload a set belongs to
            answer["workloads"] = [[name, b - a] for name, (a, b) in self.layout.items()]
        if trial and self.backward and request.get("grads_path") and request.get("upstream_path"):
            upstream, grads, names, backward_records = self.gradients(sets, int(request["seeds"][0]))
            save_sets(request["upstream_path"], upstream)  # handed to the candidate with the inputs
            save_sets(request["grads_path"], grads)  # the parent's alone, as the outputs are
            answer["grad_names"] = names
            answer["backward_ops"] = op_records.encode(backward_records)  # each set's backward record
        return answer

    def gradients(self, sets: list[list], seed: int) -> tuple[list[list], list[list], list[str], list[dict]]:
        """BACKWARD problems: for each set, the upstream gradient of each output (drawn from the
        verification's secret seed: the candidate can't know it ahead; None for an output that is
        not floating or does not require grad) and the reference's gradients for it: of each
        floating input ("input <i>", the first set's floating inputs), then of each parameter that
        requires grad (by name). A gradient the reference has none of is zeros. Run on copies of the
        inputs (the sets themselves are timed later and must not require grad), at the declared
        precision, as the forward. Also each set's backward op record: the aten ops of autograd's
        call alone (OpRecorder), recorded once per input signature as the forward's are; the
        candidate's child records its backward the same way (harness.run_backward)."""
        generator = torch.Generator().manual_seed(seed * 2 + 1)  # from the secret seed, not the seed itself
        params = [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]
        floating = [i for i, v in enumerate(sets[0]) if isinstance(v, torch.Tensor) and v.is_floating_point()]
        names = [f"input {i}" for i in floating] + [name for name, _ in params]
        upstream_sets, grad_sets = [], []
        set_records: list[dict] = []
        with torch.enable_grad(), declared_precision():
            for inputs in sets:
                leaves = [v.detach().clone().requires_grad_(True) if isinstance(v, torch.Tensor) and v.is_floating_point()
                          else v for v in to_device(inputs, self.device)]
                for _, p in params:
                    p.grad = None
                result = flatten_outputs(self.model(*leaves))
                upstream = [torch.randn(tuple(r.shape), generator=generator, dtype=torch.float32).to(r.device, r.dtype)
                            if isinstance(r, torch.Tensor) and r.is_floating_point() and r.requires_grad else None
                            for r in result]
                pairs = [(r, u) for r, u in zip(result, upstream) if u is not None]
                key = op_records.signature(inputs)
                _recorded_once(self.backward_records, key, _backward, pairs)
                set_records.append(self.backward_records[key])
                synchronize(self.device)
                grads: list = []
                for i in floating:
                    leaf = leaves[i] if i < len(leaves) else None
                    grads.append(None if not isinstance(leaf, torch.Tensor) else
                                 leaf.grad.detach() if leaf.grad is not None else torch.zeros_like(leaf.detach()))
                grads += [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p.detach())
                          for _, p in params]
                upstream_sets.append(upstream)
                grad_sets.append(grads)
        for _, p in params:  # none kept: the baselines run under no_grad and need no gradient memory
            p.grad = None
        return upstream_sets, grad_sets, names, set_records

    def select_workload(self, request: dict[str, Any]) -> dict[str, Any]:
        """Time workload `name` next: its trial sets become the sets the baselines are built and timed
        on, and fresh values and the timed calls' checks are drawn from them (the same secret seeds'
        sets, made by the last trial `make`). The next "timing" request builds the baselines again."""
        name = str(request["name"])
        if name not in self.layout:
            raise RuntimeError(f"no workload {name!r} was made")
        start, stop = self.layout[name]
        sets = self.made_sets[start:stop]
        self.last_sets = sets
        self._timing, self.graphs, self.kept, self.window, self.fresh = None, {}, None, None, None
        if self.pool is not None:  # fresh timing: this workload's own sets of one shape are its pool
            self.pool = Pool([to_device(sets[i], self.device) for i in pool_indices(sets, list(range(len(sets))))])
            self.like = self.firsts[name]
        self.timed_workload = name
        return {"sets": stop - start}

    def double_model(self) -> Any:
        """A float64 copy of the model (built once; None where it can't be)."""
        if self._double is None:
            try:
                self._double = copy.deepcopy(self.model).to(torch.float64)
            except Exception:  # noqa: BLE001 - a model that can't be copied or cast: no round-off estimate
                self._double = False
        return self._double or None

    def sizes(self) -> dict[str, int | None]:
        """Bytes of one input set and of its output, from a run on the meta device (shapes only,
        nothing computed), so the parent can size the trials before any real set is made; None
        where the model can't run on meta."""
        input_bytes = output_bytes = 0
        try:
            # One "set" of a problem with workloads is one set of each: each seed makes one of every workload.
            for _, maker in self.workloads:
                with torch.device("meta"):
                    seed_all(INIT_SEED)
                    inputs = list(maker())
                    model = self.problem.Model(*self.init_inputs)
                    outputs = flatten_outputs(model(*inputs))
                input_bytes, output_bytes = input_bytes + _nbytes(inputs), output_bytes + _nbytes(outputs)
        except Exception:  # noqa: BLE001 - many models have no meta kernels; the sizes are then unknown
            return {"input_bytes": None, "output_bytes": None}
        return {"input_bytes": input_bytes, "output_bytes": output_bytes}

    def build_baselines(self, skip: list[str]) -> None:
        """The baselines' callables on the last sets made, torch.compile'd (their first calls) unless
        `skip` names them. Once per problem: each verification puts its own input sets into the
        same list, which the callables read, so nothing recompiles. With fresh values (the default)
        every timed call reads the first of them, `buffers`, refilled before it; the others are
        there so the list keeps its length whichever way a verification times."""
        from kernelloop.tools.profile.measure import AUTOTUNE, COMPILE, baseline_callables, roofline_of
        from kernelloop.tools.profile.timing import rounds_on

        fresh_sets = [to_device(inputs, self.device) for inputs in self.last_sets]
        if self.fresh_timing and self.pool is not None:
            self.buffers = self.pool.buffers()
            fresh_sets[0] = self.buffers
        if self._timing is None or len(fresh_sets) != len(self.sets):
            self.sets = fresh_sets
            # Compile baselines timed before and kept by the parent (trusted_cache.py) are not compiled here.
            with_compile = not {COMPILE, AUTOTUNE} & set(skip)
            fns, self.compile_s, self.eager = baseline_callables(self.problem, self.device, self.sets, INIT_SEED,
                                                                 self.full_baselines, with_compile=with_compile)
            self._timing = rounds_on(self.device, fns, len(self.sets))
            on_gpu = self.device.startswith("cuda")
            self.roofline = roofline_of(self.eager, self.sets) if on_gpu else {}
        else:
            self.sets[:] = fresh_sets
        self._timing.n_input_sets = 1 if self.fresh_timing else len(self.sets)
        # Without fresh timing (the default) nothing runs between timed calls, as before it.
        self._timing.prepare = self._prepare if self.fresh_timing else None

    def _prepare(self, name: str, step: int) -> None:
        """Fresh values into the baselines' buffers before each timed call (none without fresh timing)."""
        if self.fresh is not None:
            self.fresh.fill(self.buffers, step * len(self._timing.names) + self._timing.names.index(name))

    def setup_timing(self, request: dict[str, Any]) -> dict[str, Any]:
        self.fresh_timing = bool(request.get("fresh", False))
        self.graphs = {}  # made on the last verification's window: its sets are gone
        self.build_baselines(list(request.get("skip") or ()))  # compiles nothing where warm_up built them
        if self.fresh_timing and self.pool is not None:
            self.kept = Kept(self._specs(), int(request.get("keep_calls") or 1), self.device)
            self.window = Window(self.pool, self.kept.calls, self.buffers)
            warm_fresh_values(self.pool, self.kept, self.device, self.window)
        hold_ms = self._timing.warm()
        on_gpu = self.device.startswith("cuda")
        return {"names": list(self._timing.fns), "compile_s": self.compile_s, "hold_ms": hold_ms,
                "roofline": self.roofline, "device_name": torch.cuda.get_device_name() if on_gpu else None,
                "fresh_values": self.pool is not None and self.pool.fresh,
                # how many calls a back-to-back window can give a set of their own (the parent sizes it)
                "window_sets": self.window.fit if self.window is not None else 0}

    def _specs(self) -> list:
        return [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in self.like if isinstance(t, torch.Tensor)]

    def warm_up(self, request: dict[str, Any]) -> dict[str, Any]:
        import importlib
        import sys

        from kernelloop.tools.verify.child import COMPILER_MODULES

        started = time.perf_counter()
        missing = [name for name in COMPILER_MODULES if name not in sys.modules]
        for name in missing:
            importlib.import_module(name)
        answer: dict[str, Any] = {"imported": missing, "import_s": time.perf_counter() - started}
        if request.get("build") and self._timing is None and self.last_sets:
            built = time.perf_counter()
            self.build_baselines(list(request.get("skip") or ()))
            answer["build_s"] = time.perf_counter() - built
        return answer

    def block(self, request: dict[str, Any]) -> dict[str, Any]:
        rounds = int(request["rounds"])
        if self.fresh_timing and self.pool is not None:
            self.fresh = self.pool.request(int(request["seed"]), rounds * len(self._timing.names))
        return {"samples_ms": self._timing.block(rounds)}

    def back_to_back(self, request: dict[str, Any]) -> dict[str, Any]:
        """Back-to-back calls the parent times: a baseline's (`name`: eager, compile, a problem's
        own), or ("overhead") none at all. With fresh values, in the three steps a candidate's
        window takes in its child, the same code on the same shapes (harness.py `back`): the sets
        written, the calls (each output held), the outputs kept and digested; the overhead window
        does the first and last alone, and the parent takes it off every side's window. A replayed
        window takes them as three requests (`stage`), as the candidate's does."""
        from kernelloop.tools.profile.timing import back_to_back

        name = request.get("name", "eager")
        if not self.fresh_timing:
            back_to_back(self._timing.fns[name], len(self.sets), int(request["calls"]))
            return {}
        if self.pool is None or self.window is None or self.kept is None:
            raise RuntimeError("back-to-back calls with fresh values were asked for before timing was set up")
        if "stage" in request:
            return self._stage(name, str(request["stage"]), request)
        calls, window, kept, like = int(request["calls"]), self.window, self.kept, self.like
        window.prepare(self.pool.request(int(request["seed"]), calls), each_call=True)
        synchronize(self.device)
        kept.reset()
        if name != "overhead":  # as a plain window of the candidate's: each call's values before it, its outputs after
            fn = cast("Caller", self._timing.fns[name]).on
            back_to_back(lambda call: fn(window.inputs(call)), calls, calls, after=lambda out: kept.keep(flatten_outputs(out)))
        else:
            for call in range(calls):
                window.inputs(call)
                kept.keep(flatten_outputs(like))
            synchronize(self.device)
        return {"digests": len(kept.digests())}

    def _stage(self, name: str, stage: str, request: dict[str, Any]) -> dict[str, Any]:
        """One step of a replayed window of `name` (its graph; "overhead": the writes and the keeping alone)."""
        if self.pool is None or self.window is None or self.kept is None:
            raise RuntimeError("a replayed window was asked for before timing was set up")
        if stage == "fill":
            self.window.prepare(self.pool.request(int(request["seed"]), int(request["calls"])))
        elif stage == "run":
            self.kept.reset()
            graph = self.graphs.get(name)
            if name != "overhead" and graph is None:
                raise RuntimeError(f"a replayed window of {name}, which has no graph")
            self.held = graph.replay() if graph is not None else [self.like] * int(request["calls"])
        elif stage != "keep":
            raise RuntimeError(f"no step {stage!r} in a replayed window")
        synchronize(self.device)
        if stage != "keep":
            return {}
        # a captured graph's calls write outputs of their own (WindowGraph.capture refuses shared ones);
        # the overhead "returns" the reference's one output each call
        if not self.kept.keep_all([flatten_outputs(output) for output in self.held], shared_ok=name == "overhead"):
            raise RuntimeError(f"a replayed window of {name} returned outputs that share memory")
        return {"digests": len(self.kept.digests())}

    def capture(self, request: dict[str, Any]) -> dict[str, Any]:
        """Each baseline's calls on a window's sets as one CUDA graph, untimed, before the windows
        (window_graph.py); which worked."""
        calls = int(request["calls"])
        self.graphs = {}
        if self.window is not None and self.device.startswith("cuda"):
            for name, fn in self._timing.fns.items():
                graph = WindowGraph.capture(cast("Caller", fn).on, self.window, calls)
                if graph is not None:
                    self.graphs[name] = graph
        return {"graphs": sorted(self.graphs)}

    def regen(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reference's outputs on the values of calls `indices` of a request of `calls` calls made
        from `seed` (timed calls of the candidate the parent picked to check), to `outputs_path`."""
        if self.pool is None:
            raise RuntimeError("asked to remake timed values before any trial sets were made")
        fresh = self.pool.request(int(request["seed"]), int(request["calls"]))
        outputs = []
        # at the declared precision, held by both children for every call (timed ones too)
        with torch.no_grad():
            for index in request["indices"]:
                out = self.model(*fresh.values(int(index)))
                synchronize(self.device)
                outputs.append([o.detach() if isinstance(o, torch.Tensor) else o for o in flatten_outputs(out)])
        save_sets(request["outputs_path"], outputs)
        return {"sets": len(outputs)}


def _nbytes(values: list) -> int:
    return sum(t.numel() * t.element_size() for t in values if isinstance(t, torch.Tensor))


def run_reference(job: dict[str, Any], channel: Channel) -> dict[str, Any]:
    try:
        reference = ReferenceJob(job)
    except ProblemError as exc:  # not a problem at all (missing Model, a bad TOLERANCE): the parent says so as it is
        return {"status": "not_a_problem", "reason": str(exc)}
    handlers = {"make": reference.make, "timing": reference.setup_timing, "block": reference.block,
                "back": reference.back_to_back, "warm_up": reference.warm_up, "regen": reference.regen,
                "capture": reference.capture, "workload": reference.select_workload}
    channel.send({"ready": {**reference.sizes(), "meta": reference.meta}})
    while True:
        request = channel.receive()
        kind = next(iter(request), None)
        if kind == "close" or kind not in handlers:
            return {"status": "closed"}
        with torch.no_grad(), (no_collection() if kind == "back" else contextlib.nullcontext()):
            channel.send({kind: handlers[kind](request[kind])})
