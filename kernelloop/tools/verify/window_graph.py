"""A back-to-back window replayed as one CUDA graph: the device's time for the calls, read by the
parent's clock, with no host work between them.

Timed back to back as Python calls, a small kernel's window measures its host's launch path (on an
H200's host, 0.04-0.10 ms a call for a Triton kernel whose device work takes 0.02 ms, and as much
again from one verification to the next), so the parent's clock could confirm no event time under
it. Captured once, the window's calls (each on its own set of the window, `Window.sets`) become one
graph; each window then writes its fresh values into those sets and replays the graph: the device
runs the recorded kernels back to back, the parent's clock around the request bounds their device
time, and no code of the candidate's runs while they do, so a memo or a forged timer has nothing to
act on (an output left from the capture is stale, and the checks of timed calls see it).

A forward that can't be captured (a synchronize, `.item()`, work on another stream, an extension
launching on the legacy stream), or that returns one buffer each call, has no graph: the parent
then times every side of that verification as plain Python windows (timing_driver.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernelloop.tools.verify.compare import flatten_outputs
from kernelloop.tools.verify.fresh_values import Window


@dataclass
class WindowGraph:
    """The graph of `calls` calls, each on its own set of a window, and each call's outputs (the
    graph writes them in place on every replay)."""

    graph: torch.cuda.CUDAGraph
    calls: int
    outputs: list[list]

    @classmethod
    def capture(cls, call: Callable[[list], object], window: Window, calls: int) -> WindowGraph | None:
        """The graph of `call` on sets 0..calls-1 of `window`, or None where it can't be made (fewer
        sets than calls, a forward that can't be captured, outputs that share memory across calls)."""
        if not torch.cuda.is_available() or not window.stacks or calls > window.fit:
            return None
        before = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(before)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(side):  # torch's rule for capture: warm on a side stream first
                call(window.sets[0])
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                outputs = [flatten_outputs(call(window.sets[k])) for k in range(calls)]
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - not capturable: the verification's windows stay plain
            _recover(before)
            return None
        tensors = [t for outs in outputs for t in outs if isinstance(t, torch.Tensor) and t.numel()]
        if len({t.untyped_storage().data_ptr() for t in tensors}) < len(tensors):
            return None
        made = cls(graph, calls, outputs)
        try:
            return made if made._replays(call, window) else None
        except Exception:  # noqa: BLE001 - a forward that fails when called again: no graph of it
            _recover(before)
            return None

    def _replays(self, call: Callable[[list], object], window: Window) -> bool:
        """Whether a replay computes what the calls compute: a kernel launched on the legacy stream
        (an extension's `<<<...>>>` launch, the common shape of model-written CUDA) is not captured
        while torch captures its own stream (a non-blocking one): it ran once, at capture, and the
        graph holds only the torch ops around it, so every replay would leave its output unwritten.
        The checks of timed calls would then fail an honest kernel; such a forward is timed in plain
        windows instead. Compared loosely (a kernel with atomics varies run to run): a graph missing
        a kernel is wrong by whole values, not by rounding. The outputs are poisoned first: a kernel
        that ran only at capture left them right for the sets it saw then, which the sets still hold."""
        for t in (t for outs in self.outputs for t in outs if isinstance(t, torch.Tensor)):
            _poison(t)
        replayed = self.replay()
        torch.cuda.synchronize()
        for k in range(self.calls):
            eager = flatten_outputs(call(window.sets[k]))
            if len(eager) != len(replayed[k]) or not all(map(_alike, replayed[k], eager)):
                return False
        torch.cuda.synchronize()
        return True

    def replay(self) -> list[list]:
        """The calls once more, on whatever the window's sets hold now; their outputs."""
        self.graph.replay()
        return self.outputs


def _poison(tensor: torch.Tensor) -> None:
    if tensor.is_floating_point() or tensor.is_complex():
        tensor.fill_(float("nan"))
    elif tensor.dtype != torch.bool:
        tensor.fill_(torch.iinfo(tensor.dtype).min)


def _alike(replayed: object, eager: object) -> bool:
    if not isinstance(replayed, torch.Tensor) or not isinstance(eager, torch.Tensor):
        return True  # non-tensor outputs are not the graph's to write
    if replayed.shape != eager.shape or replayed.dtype != eager.dtype:
        return False
    if not replayed.is_floating_point() and not replayed.is_complex():
        return torch.equal(replayed, eager)
    if replayed.is_complex():
        replayed, eager = torch.view_as_real(replayed), torch.view_as_real(eager)
    a, b = replayed.double(), eager.double()
    if not torch.equal(a.isnan(), b.isnan()):
        return False  # a poisoned output left unwritten (NaN where the forward gives a number)
    a, b = a.nan_to_num(nan=0.0), b.nan_to_num(nan=0.0)
    finite = b[b.isfinite()]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return torch.allclose(a, b, rtol=1e-3, atol=1e-6 + 1e-3 * scale)


def _recover(stream: torch.cuda.Stream) -> None:
    """After a failed capture: make `stream` current again, wait for the device and clear the
    runtime's last error (an extension that launched on the legacy stream while capturing left one
    that the next launch check of torch's would report as its own), so a capture error never reaches
    the next request. The stream first: torch.cuda.graph's exit leaves its capture stream current
    when the capture fails to end, and every later torch op would then run on that side stream while
    an extension's `<<<...>>>` launches stay on the legacy one, unordered with it (its outputs read
    before they were written)."""
    torch.cuda.set_stream(stream)
    try:
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaGetLastError()
    except Exception:  # noqa: BLE001 - a broken context shows in the next request's own error
        pass
