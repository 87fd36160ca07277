"""Torch's numeric precision settings, locked for the rest of the candidate's child.

The child holds the declared precision (TF32 off) for its whole life (_runtime.hold_declared_precision)
and reads torch's settings after each call or request (_runtime.precision_changes), so a forward that
switched TF32 on for its torch matmul and back before returning was never seen
(tests/fixtures/cheats/review37_precision_flip_restore_in_forward.py). Once `install` has run, every
setter of those settings raises PrecisionRefused, unless it writes the value already there (a no-op:
`torch.backends.cuda.matmul.allow_tf32 = False`, or torch.compile putting back what it read). Each
refused write is also recorded (`refused`), so a candidate that catches the error is still judged by it.

Every Python way in ends in one of torch._C's setters (SETTERS): torch.set_float32_matmul_precision,
cuBLASModule's attributes and _FP32Precision's look theirs up on torch._C at each call; the ContextProps
of torch.backends.cudnn/mkldnn keep the function they were built with, and get the guard too.

Not a boundary: the originals stay reachable to code that digs (a guard's closure, gc, ctypes, a C++
extension calling at::globalContext() directly). The static rules refuse the ways there, and the read
after each call stays.

Left alone: cudnn.benchmark and .deterministic, mkldnn/cudnn `enabled`, the preferred BLAS/linalg
libraries and the SDPA backends choose among algorithms of one arithmetic (IEEE float32 with TF32 off),
not a lower one; what they may do to speed is the op rules' business (a torch op is not the candidate's kernel).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


class PrecisionRefused(RuntimeError):
    """A write to torch's precision settings in a child that holds them."""


@dataclass(frozen=True)
class _Setter:
    label: str  # how a candidate spells it
    getter: str  # torch._C's reader of the value it writes
    keys: int = 0  # leading arguments that name the setting (fp32_precision's backend and op), passed to the getter


# torch._C's setters of how float32, float16 and bfloat16 matmuls, convolutions and reductions round.
SETTERS = {
    "_set_float32_matmul_precision": _Setter("torch.set_float32_matmul_precision", "_get_float32_matmul_precision"),
    "_set_cublas_allow_tf32": _Setter("torch.backends.cuda.matmul.allow_tf32", "_get_cublas_allow_tf32"),
    "_set_cudnn_allow_tf32": _Setter("torch.backends.cudnn.allow_tf32", "_get_cudnn_allow_tf32"),
    "_set_onednn_allow_tf32": _Setter("torch.backends.mkldnn.allow_tf32", "_get_onednn_allow_tf32"),
    "_set_fp32_precision_setter": _Setter("fp32_precision", "_get_fp32_precision_getter", keys=2),
    "_set_cublas_allow_fp16_reduced_precision_reduction": _Setter(
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
        "_get_cublas_allow_fp16_reduced_precision_reduction"),
    "_set_cublas_allow_bf16_reduced_precision_reduction": _Setter(
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
        "_get_cublas_allow_bf16_reduced_precision_reduction"),
    "_set_cublas_allow_fp16_accumulation": _Setter("torch.backends.cuda.matmul.allow_fp16_accumulation",
                                                   "_get_cublas_allow_fp16_accumulation"),
    "_set_cpu_allow_fp16_reduced_precision_reduction": _Setter(
        "torch._C._set_cpu_allow_fp16_reduced_precision_reduction", "_get_cpu_allow_fp16_reduced_precision_reduction"),
    "_set_math_sdp_allow_fp16_bf16_reduction": _Setter("torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp",
                                                       "_get_math_sdp_allow_fp16_bf16_reduction"),
}
# fp32_precision's (backend, op) pairs, as torch.backends spells each node.
FP32_NODES = {("generic", "all"): "", ("cuda", "all"): "cudnn", ("cuda", "matmul"): "cuda.matmul",
              ("cuda", "conv"): "cudnn.conv", ("cuda", "rnn"): "cudnn.rnn", ("mkldnn", "all"): "mkldnn",
              ("mkldnn", "matmul"): "mkldnn.matmul", ("mkldnn", "conv"): "mkldnn.conv", ("mkldnn", "rnn"): "mkldnn.rnn"}
# Autocast switched on runs a float32 problem's matmuls in float16 or bfloat16: the TF32 switch by another
# name (review39_autocast_global_cached). Only switching it on is refused: its dtype alone changes nothing
# while it is off. torch re-exports these from torch._C, and torch.autocast calls them through `torch`.
AUTOCAST_ENABLERS = {"set_autocast_enabled": "is_autocast_enabled", "set_autocast_cpu_enabled": "is_autocast_cpu_enabled",
                     "set_autocast_xla_enabled": "is_autocast_xla_enabled",
                     "set_autocast_ipu_enabled": "is_autocast_ipu_enabled"}
_UNREADABLE = "unreadable"  # a getter that raised (the legacy ones do once both APIs were used)
_REFUSED: dict[str, str] = {}  # label -> "was -> wanted (refused)", the first refusal of each setter
_INSTALLED: list[bool] = []


def refused() -> dict[str, str]:
    """The writes refused so far, as {setter: "was -> wanted (refused)"}: empty where none was."""
    return dict(_REFUSED)


def _read(getter: Callable[..., Any], *keys: object) -> object:
    try:
        return getter(*keys)
    except Exception:  # noqa: BLE001 - unreadable is never the value a write asks for
        return _UNREADABLE


def _label(setter: _Setter, keys: tuple) -> str:
    if setter.keys:  # fp32_precision: named by its node where torch.backends has one
        node = FP32_NODES.get(tuple(keys))
        return f"torch.backends{'.' if node else ''}{node}.fp32_precision" if node is not None else f"fp32_precision{keys}"
    return setter.label


def _guarded(setter: _Setter, original: Callable[..., Any], getter: Callable[..., Any],
             state: Callable[[], dict]) -> Callable[..., Any]:
    """`original`, called only for a write of the value its setting already has, and only kept where
    nothing else moved (a legacy setter also writes fp32_precision nodes)."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        keys, values = args[:setter.keys], args[setter.keys:]
        wanted = values[0] if len(values) == 1 else tuple(values)
        now = _read(getter, *keys)
        # None: a getter that can't tell (oneDNN's TF32 on a build without Intel GPUs); the state decides
        if not kwargs and now != _UNREADABLE and (now == wanted or now is None):
            before = state()
            result = original(*args)
            if state() == before:
                return result
        label = _label(setter, keys)
        _REFUSED.setdefault(label, f"{now!r} -> {wanted!r} (refused)")
        raise PrecisionRefused(f"changes precision: {label} {now!r} -> {wanted!r} refused; torch's precision "
                               "settings are held at the reference's (TF32 off) for every call, and only a kernel "
                               "of its own may choose TF32")

    return guarded


def _guarded_enabler(name: str, original: Callable[..., Any], getter: Callable[..., Any]) -> Callable[..., Any]:
    """`original` (set_autocast_enabled([device,] enabled) and the per-device ones), called only to keep
    autocast off, or for a device where it is already on."""

    def guarded(*args: Any, **kwargs: Any) -> Any:
        wanted = kwargs.get("enabled", args[-1] if args else None)
        if not wanted or _read(getter, *args[:-1]) is True:
            return original(*args, **kwargs)
        label = f"torch.{name}"
        _REFUSED.setdefault(label, "False -> True (refused)")
        raise PrecisionRefused(f"changes precision: {label} {tuple(args)!r} refused; autocast would run the "
                               "problem's float32 ops in float16 or bfloat16, and only a kernel of its own may "
                               "choose a lower precision")

    return guarded


def _state(getters: dict[str, Callable[..., Any]]) -> Callable[[], dict]:
    """A reader of every setting SETTERS write, through the getters as they were at install."""
    fp32 = getters.get("_get_fp32_precision_getter")
    plain = {name: getter for name, getter in getters.items() if getter is not fp32}

    def state() -> dict:
        now = {name: _read(getter) for name, getter in plain.items()}
        if fp32 is not None:
            now.update({pair: _read(fp32, *pair) for pair in FP32_NODES})
        return now

    return state


def install() -> None:
    """Lock torch's precision settings as they stand, for the rest of this process (no uninstall:
    nothing in the child may take the lock off)."""
    if _INSTALLED:
        return
    present = {name: setter for name, setter in SETTERS.items()
               if hasattr(torch._C, name) and hasattr(torch._C, setter.getter)}  # an older torch lacks some
    state = _state({setter.getter: getattr(torch._C, setter.getter) for setter in present.values()})
    guards: dict[int, Callable[..., Any]] = {}
    for name, setter in present.items():
        original = getattr(torch._C, name)
        guards[id(original)] = _guarded(setter, original, getattr(torch._C, setter.getter), state)
        setattr(torch._C, name, guards[id(original)])
    _guard_context_props(guards)
    for name, getter in AUTOCAST_ENABLERS.items():
        if hasattr(torch._C, name) and hasattr(torch._C, getter):
            original = getattr(torch._C, name)
            guard = _guarded_enabler(name, original, getattr(torch._C, getter))
            setattr(torch._C, name, guard)
            if getattr(torch, name, None) is original:
                setattr(torch, name, guard)
    _INSTALLED.append(True)


def _guard_context_props(guards: dict[int, Callable[..., Any]]) -> None:
    """The ContextProps built on a setter itself (cudnn's and mkldnn's allow_tf32) get its guard; the
    rest call through torch._C at each write. A backends module imported later is built on the guards."""
    for name, module in list(sys.modules.items()):
        if name.startswith("torch.backends") and module is not None:
            for prop in vars(type(module)).values():
                if isinstance(prop, torch.backends.ContextProp) and id(prop.setter) in guards:
                    prop.setter = guards[id(prop.setter)]
