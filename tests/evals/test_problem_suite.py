"""Our own problem suite (kernelloop/evals/problems/*.py) and its example candidates.

Checks the format only, on the CPU: every problem loads through Problem.from_file / load_dir,
has a KernelBench-style name and a docstring, returns CPU tensors from get_inputs(), and
computes a reference output that is finite, not near zero and not constant (so zeros or a
constant can't pass verification). Every problem has a candidate of the same file name in
examples/candidates/ that parses, passes the static rules and builds the same parameters as
the reference from the same seed. Running the candidates is the verifier's job
(`kernelloop verify CANDIDATE --problem PROBLEM --device cpu`), not this file's.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest
import torch

import kernelloop
from kernelloop.problem import Candidate, Problem, load_dir
from kernelloop.tools.verify.static_check import first_violation

SUITE_DIR = Path(kernelloop.__file__).parent / "evals" / "problems"
CANDIDATES_DIR = Path(__file__).resolve().parents[2] / "examples" / "candidates"
KERNELBENCH_NAME = re.compile(r"^(\d+)_[A-Za-z0-9]+(_[A-Za-z0-9]+)*$")
TOLERANCE_KEYS = {"atol", "rtol", "rel"}

PROBLEMS = {problem.name: problem for problem in load_dir(SUITE_DIR)}
NAMES = sorted(PROBLEMS, key=lambda name: PROBLEMS[name].number)
WITH_TOLERANCE = [name for name in NAMES if PROBLEMS[name].tolerance]


@pytest.fixture(scope="module")
def reference_outputs() -> dict[str, torch.Tensor]:
    """Each problem's reference output on its get_inputs(), computed once for the module."""
    outputs = {}
    for name in NAMES:
        module = PROBLEMS[name].module
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        with torch.no_grad():
            outputs[name] = model(*module.get_inputs())
    return outputs


def import_candidate(name: str):
    """Our own example candidate, imported to compare its parameters (the verifier never imports one)."""
    path = CANDIDATES_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kernelloop_example_candidate_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_is_numbered_one_to_n_with_kernelbench_names():
    assert len(NAMES) >= 12
    assert [PROBLEMS[name].number for name in NAMES] == list(range(1, len(NAMES) + 1))
    for name in NAMES:
        assert KERNELBENCH_NAME.match(name), name
        assert Problem.from_file(SUITE_DIR / f"{name}.py").name == name


@pytest.mark.parametrize("name", NAMES)
def test_problem_has_a_docstring_and_cpu_tensor_inputs(name):
    module = PROBLEMS[name].module
    assert module.__doc__ and len(module.__doc__.strip().splitlines()[0]) > 20, "a docstring saying what and why"
    init_inputs = module.get_init_inputs()
    assert isinstance(init_inputs, list)
    inputs = module.get_inputs()
    assert isinstance(inputs, list) and inputs
    for tensor in inputs:
        assert isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu"


@pytest.mark.parametrize("name", NAMES)
def test_reference_output_is_finite_and_not_near_zero_or_constant(name, reference_outputs):
    out = reference_outputs[name]
    assert isinstance(out, torch.Tensor) and out.is_floating_point()
    values = out.detach().double()
    assert bool(torch.isfinite(values).all())
    assert float(values.abs().max()) > 0.1, "a near-zero output lets zeros pass"
    assert float(values.std()) > 1e-2, "a constant output lets a constant pass"
    assert values.flatten()[:100_000].unique().numel() > 100


@pytest.mark.parametrize("name", WITH_TOLERANCE)
def test_tolerance_names_the_output_dtype(name, reference_outputs):
    """Problems without TOLERANCE get the verifier's per-dtype defaults."""
    tolerance = PROBLEMS[name].tolerance
    dtype_name = str(reference_outputs[name].dtype).removeprefix("torch.")
    assert set(tolerance) == {dtype_name}, "a tolerance for a dtype the output doesn't have is a typo"
    bounds = tolerance[dtype_name]
    assert set(bounds) == TOLERANCE_KEYS
    assert all(isinstance(v, float) and 0 < v < 1 for v in bounds.values()), bounds


@pytest.mark.parametrize("name", NAMES)
def test_candidate_exists_parses_and_follows_the_rules(name):
    path = CANDIDATES_DIR / f"{name}.py"
    assert path.is_file(), f"no example candidate {path}"
    candidate = Candidate.from_file(path)
    assert candidate.syntax_error() is None
    assert first_violation(candidate.source) is None
    tree = ast.parse(candidate.source)
    assert ast.get_docstring(tree), "a header docstring explaining the kernel strategy"
    kernels = [node for node in tree.body if isinstance(node, ast.FunctionDef)
               and any(ast.unparse(d).startswith("triton.jit") for d in node.decorator_list)]
    assert kernels, "the candidate's own @triton.jit kernel does the work"


@pytest.mark.parametrize("name", NAMES)
def test_candidate_builds_the_reference_parameters_from_the_same_seed(name):
    module = PROBLEMS[name].module
    init_inputs = module.get_init_inputs()
    torch.manual_seed(0)
    reference = module.Model(*init_inputs).state_dict()
    torch.manual_seed(0)
    candidate = import_candidate(name).ModelNew(*init_inputs).state_dict()
    assert list(candidate) == list(reference)
    for key, value in reference.items():
        assert candidate[key].dtype == value.dtype and torch.equal(candidate[key], value), key
