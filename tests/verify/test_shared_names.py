"""KernelBench's eval runs the reference and the solution in one namespace; model output written
for it may use the reference's module-level names. shared_names.py finds the names a candidate
takes, and only those."""

from kernelloop.tools.verify.shared_names import names_from_reference

REFERENCE = '''
import torch
from itertools import repeat
batch_size = 128
hardtanh_min = -1.0
def to_2tuple(x):
    return tuple(repeat(x, 2))
class Model(torch.nn.Module):
    pass
'''


def test_names_read_anywhere_and_bound_nowhere_are_taken():
    candidate = '''
import torch
class ModelNew(torch.nn.Module):
    size = batch_size
    def __init__(self, k):
        super().__init__()
        self.k = to_2tuple(k)
    def forward(self, x):
        def inner(y):
            return y.clamp(hardtanh_min)
        return inner(x) + not_in_the_reference
'''
    assert names_from_reference(candidate, REFERENCE) == ["batch_size", "hardtanh_min", "to_2tuple"]


def test_a_name_the_candidate_binds_itself_is_its_own():
    candidate = '''
batch_size = 4
def to_2tuple(x):
    return (x, x)
class ModelNew:
    def forward(self, x, hardtanh_min=0.0):
        return x.clamp(hardtanh_min) * batch_size
'''
    assert names_from_reference(candidate, REFERENCE) == []


def test_an_unparsable_source_takes_nothing():
    assert names_from_reference("def (", REFERENCE) == []
    assert names_from_reference("x = batch_size", "def (") == []


def test_only_values_the_reference_defines_are_shareable():
    import math
    import types

    import torch

    from kernelloop.tools.verify.shared_names import shareable

    module = types.ModuleType("ref")
    exec("def helper(x):\n    return x\nclass Config:\n    pass\n", module.__dict__)  # noqa: S102 - a tiny reference
    for value in (128, -1.0, "mean", None, (3, (4, 5)), [1, 2], {"k": 1.5}, torch.float16, torch.Size([2, 3]),
                  torch.ones(2), module.helper, module.Config):
        assert shareable(value, "ref"), value
    for value in (torch, torch.nn.functional, math, torch.relu, torch.nn.Linear, (1, torch), {"m": math}, print):
        assert not shareable(value, "ref"), value
