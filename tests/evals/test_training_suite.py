"""The training suite (kernelloop/evals/problems/training): eight problems that judge the backward
(BACKWARD = True), each on two to four workloads, that `bench training` resolves; each reference is
differentiable, checked here on inputs a hundredth of the size (the workloads' own are GPU-sized)."""

from __future__ import annotations

import importlib

import pytest
import torch

from kernelloop.evals.problems.attention import _common as attn
from kernelloop.evals.suite import resolve_suite
from kernelloop.problem_meta import judges_backward, workloads

NAMES = ["1_LayerNorm", "2_RMSNorm", "3_SwiGLU", "4_CrossEntropy128k", "5_GELU", "6_RoPE", "7_ResidualRMSNorm",
         "8_CausalAttention"]


def _module(name: str):
    return importlib.import_module(f"kernelloop.evals.problems.training.{name}")


def _tiny(name: str) -> list:
    """The problem's inputs, made by its own helper at a tiny size."""
    module = _module(name)
    if name == "4_CrossEntropy128k":
        return module._inputs(7, 300)
    if name == "6_RoPE":
        return module._inputs(2, 5, 3)
    if name == "8_CausalAttention":
        return attn.make_inputs(module.VARIANT, attn.TINY)
    return module._inputs(9, 48)


def test_bench_resolves_the_training_suite_to_its_eight_problems():
    suite = resolve_suite("training")
    assert suite.kind == "training" and [p.name for p in suite.problems] == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_each_problem_judges_its_backward_on_two_to_four_named_workloads(name):
    module = _module(name)
    assert judges_backward(module)
    found = workloads(module, name)
    assert 2 <= len(found) <= 4 and found[0][1] is module.get_inputs, [n for n, _ in found]
    assert len({n for n, _ in found}) == len(found)


@pytest.mark.parametrize("name", NAMES)
def test_each_reference_is_differentiable_in_every_floating_input(name):
    module = _module(name)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    inputs = [t.requires_grad_(True) if t.is_floating_point() else t for t in _tiny(name)]
    outputs = model(*inputs)
    outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
    torch.autograd.backward(outputs, [torch.randn_like(o) for o in outputs])
    for index, t in enumerate(inputs):
        if t.is_floating_point():
            assert t.grad is not None and torch.isfinite(t.grad.float()).all() and t.grad.abs().sum() > 0, index
