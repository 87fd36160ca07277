"""The planner: reads the reference and its roofline facts, proposes the strategy and the target.

One model call per run. The plan is free text with a few sections; from it we read only
what the loop needs (the backend when the user left it to the planner, the expected
speedup). A failed model call gives a default plan and the error, never a dead run: the
coders can work from the reference alone.
"""

from __future__ import annotations

import re
from typing import Literal, cast

from pydantic import BaseModel, Field

from kernelloop.agents.calls import ask
from kernelloop.agents.prompts import render
from kernelloop.agents.turns import ChatModel, Message, ModelTurn, ReplayExhausted, turn_key
from kernelloop.errors import error_line
from kernelloop.problem import Problem
from kernelloop.problem_meta import source_backward, source_workload_names

Backend = Literal["triton", "cuda"]
BACKEND_RULES = {
    "triton": "Triton: kernels are `@triton.jit` functions in the same file, launched from ModelNew.forward",
    "cuda": "CUDA C++ compiled with `torch.utils.cpp_extension.load_inline` in the same file "
            "(kernel source in a Python string), called from ModelNew.forward",
}
DEFAULT_PLAN = ("## Strategy\nFuse the whole forward pass into as few kernels as possible, reading each "
                "input once and writing each output once.\n## Tiling\nOne program per output tile; "
                "accumulate in float32; mask the edges.")


class ReferenceFacts(BaseModel):
    """What was measured or counted about the reference before planning (all optional)."""

    flops: float | None = Field(default=None, description="floating-point ops per forward call")
    bytes_moved: float | None = Field(default=None, description="minimum DRAM bytes per call: inputs + outputs")
    device: str | None = Field(default=None, description="GPU name the numbers refer to")
    peak_tflops: float | None = None
    peak_gbps: float | None = None
    roofline_ms: float | None = Field(default=None, description="max(flops / peak, bytes / bandwidth), in ms")
    eager_ms: float | None = Field(default=None, description="median time of the reference, in ms")
    notes: list[str] = Field(default_factory=list)

    @property
    def bound(self) -> Literal["memory", "compute"] | None:
        """Which side of the ridge point the reference sits on, when the numbers allow it."""
        if self.flops is None or not (self.bytes_moved and self.peak_tflops and self.peak_gbps):
            return None
        intensity = self.flops / self.bytes_moved
        ridge = self.peak_tflops * 1e12 / (self.peak_gbps * 1e9)
        return "compute" if intensity >= ridge else "memory"

    def lines(self) -> list[str]:
        """The facts as short lines for a prompt (units in each line)."""
        out = []
        if self.flops is not None:
            out.append(f"FLOPs per call: {self.flops:.3g}")
        if self.bytes_moved is not None:
            out.append(f"minimum bytes moved per call: {self.bytes_moved:.3g}")
        if self.flops and self.bytes_moved:
            out.append(f"arithmetic intensity: {self.flops / self.bytes_moved:.3g} FLOP/byte")
        if self.bound:
            out.append(f"roofline: {self.bound}-bound on {self.device or 'the target GPU'}")
        if self.roofline_ms is not None:
            out.append(f"roofline floor: {self.roofline_ms:.4g} ms per call")
        if self.eager_ms is not None:
            out.append(f"reference (eager) time: {self.eager_ms:.4g} ms per call")
        return out + list(self.notes)


class Plan(BaseModel):
    """The strategy every coder of the run follows."""

    text: str
    backend: Backend = "triton"
    expected_speedup: float | None = Field(default=None, description="what the planner predicts, e.g. 1.5 (x)")
    origin: Literal["model", "default", "user"] = "model"
    model_error: str | None = Field(default=None, description="why the model call failed, when it did")
    turn_file: str | None = Field(default=None, description="recorded model turn, relative to the run dir")
    turn_sha256: str | None = None


def workloads_line(problem_source: str) -> str:
    """What the prompts say of a problem with workloads (get_workloads): which are judged and how
    speed is counted; "" for a problem without (read off the source: nothing is imported here)."""
    names = source_workload_names(problem_source)
    if not names and "def get_workloads" in problem_source:
        return ("It is judged on every workload get_workloads() returns (get_inputs() is one): it must be correct "
                "on each, and its speed is the geometric mean of its speedups over them.")
    if not names:
        return ""
    listed = ", ".join(f"'{name}'" for name in names)
    return (f"It is judged on {len(names)} workloads, {listed} (get_workloads(); '{names[0]}' is get_inputs()): it must "
            "be correct on every one, each is timed, and its speed is the geometric mean of its speedups over them.")


def backward_line(problem_source: str) -> str:
    """What the prompts say of a problem with BACKWARD = True (read off the source); "" otherwise."""
    if not source_backward(problem_source):
        return ""
    return ("The backward is judged too (BACKWARD = True): for an upstream gradient the verifier draws, the gradients "
            "of every floating input and of every parameter must match the reference's, so ModelNew's outputs must "
            "carry autograd: wrap each kernel in a torch.autograd.Function whose backward computes the gradients "
            "(kernels of its own), never detach, and name the parameters as the reference's (named_parameters()). "
            "Only the forward is timed.")


def planner_messages(problem_name: str, problem_source: str, facts: ReferenceFacts | None,
                     backend: str, baseline: str, target: float | None, start_code: str = "") -> list[Message]:
    """The planner's prompt: one user message (reasoning models get no system prompt). start_code:
    the kernel the run starts from (solve --start), which the plan then improves."""
    rule = BACKEND_RULES.get(backend, "Triton or CUDA C++ (load_inline): propose which")
    text = render("planner.j2", problem_name=problem_name, problem_source=problem_source,
                  facts=facts.lines() if facts else [], backend_rule=rule, baseline=baseline,
                  target=target, start_code=start_code, workloads=workloads_line(problem_source),
                  backward=backward_line(problem_source))
    return [Message(role="user", content=text)]


_BACKEND = re.compile(r"backend\W*\s*(?:[:\-]\s*)?\**\s*(triton|cuda)", re.I)
_SPEEDUP = re.compile(r"expected speedup[^\n]*\n?[^\d\n]*(\d+(?:\.\d+)?)\s*[x×]", re.I)


def parse_plan(content: str, default_backend: Backend = "triton") -> Plan:
    """Read the backend and the expected speedup out of the plan text; the text is kept whole."""
    backend = _BACKEND.search(content)
    speedup = _SPEEDUP.search(content)
    return Plan(text=content.strip() or DEFAULT_PLAN,
                # cast: _BACKEND matches only "triton" or "cuda" (any case)
                backend=cast(Backend, backend.group(1).lower()) if backend else default_backend,
                expected_speedup=float(speedup.group(1)) if speedup else None)


def make_plan(client: ChatModel, messages: list[Message],
              backend: str) -> tuple[Plan, ModelTurn | None]:
    """Ask the model for a plan. The user's backend wins over the planner's unless it is 'auto'."""
    fallback: Backend = "cuda" if backend == "cuda" else "triton"
    try:
        turn = ask(client, turn_key("planner", "plan"), messages)
    except ReplayExhausted:
        raise  # a recording that doesn't fit the run is the user's to fix, not a model failure
    except Exception as exc:  # any endpoint failure: the run goes on with the default plan
        error = error_line(exc)
        return Plan(text=DEFAULT_PLAN, backend=fallback, origin="default", model_error=error), None
    plan = parse_plan(turn.content, fallback)
    if backend in ("triton", "cuda"):
        plan = plan.model_copy(update={"backend": backend})
    return plan, turn


def reference_facts(problem: Problem, device_name: str | None = None) -> ReferenceFacts:
    """FLOPs and fewest bytes of one forward call, counted on the meta device (no compute, no GPU).

    With a device name (as torch reports it), also the roofline floor on its datasheet peaks.
    """
    import torch  # lazy: the planner's prompt code needs no torch

    from kernelloop.tools.profile import roofline

    module, outputs = problem.module, []
    with torch.device("meta"), torch.no_grad():  # shapes and dtypes only: ops that need data raise
        model = module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
        flops = roofline.count_flops(lambda *args: outputs.append(model(*args)), *inputs)
        bytes_moved = roofline.count_bytes(inputs, outputs)
    facts = ReferenceFacts(flops=float(flops), bytes_moved=float(bytes_moved))
    if device_name:
        peaks = roofline.peaks_for(device_name)
        dtype = next((t.dtype for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()),
                     torch.float32)
        key = roofline.peak_key_for(dtype)
        facts.device, facts.peak_tflops, facts.peak_gbps = peaks.name, peaks.tflops(key), peaks.memory_gb_per_s
        facts.roofline_ms = roofline.floor_ms(flops, bytes_moved, peaks, key)
        if peaks.is_default:
            facts.notes.append(f"{device_name} is not in the peak table: the roofline uses {peaks.name}")
    return facts
