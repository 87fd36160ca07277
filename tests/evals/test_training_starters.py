"""The training suite's hand-written starters (examples/training_candidates) on the CPU, under
Triton's interpreter: each verified, forward and backward, by the verifier itself against its problem
at a tiny shape (a wrapper problem file that keeps the real problem's Model and BACKWARD and only
shrinks the inputs). The realistic shapes and their speed are a GPU's."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status
from kernelloop.tools.verify.static_check import first_violation
from kernelloop.tools.verify.verifier import Verifier

ROOT = Path(__file__).resolve().parents[2]
STARTERS = ROOT / "examples" / "training_candidates"
TRAINING = ROOT / "kernelloop" / "evals" / "problems" / "training"

TINY_ATTENTION = '''
from pathlib import Path
from kernelloop.evals.problems.attention import _common as attn
from kernelloop.problem import import_source

real = import_source(Path({path!r}), "tiny_training_attention")
Model, TOLERANCE, BACKWARD = real.Model, real.TOLERANCE, real.BACKWARD


def get_inputs():
    return attn.make_inputs(real.VARIANT, attn.Shape(batch=1, heads=2, seq_len=37, head_dim=16))


def get_workloads():  # a length no block divides, and one a block does
    return {{"seq_37": get_inputs, "seq_32": lambda: attn.make_inputs(real.VARIANT, attn.Shape(2, 1, 32, 16))}}


def get_init_inputs():
    return []
'''


def test_every_starter_names_a_training_problem_and_passes_the_static_rules():
    names = {p.stem for p in TRAINING.glob("[0-9]*.py")}
    for path in STARTERS.glob("*.py"):
        assert path.stem in names, path.name
        text = path.read_text()
        assert "Hand-written starter kernel" in text.splitlines()[0], path.name
        assert first_violation(text) is None, path.name


@pytest.fixture(scope="module")
def verifier(tmp_path_factory):
    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("training-starters"), compile_timeout_s=120.0,
                  run_timeout_s=300.0) as shared:
        yield shared


def test_the_causal_attention_starter_is_right_forward_and_backward(verifier, tmp_path):
    problem_path = tmp_path / "tiny_8_CausalAttention.py"
    problem_path.write_text(TINY_ATTENTION.format(path=str(TRAINING / "8_CausalAttention.py")))
    verdict = verifier.verify(Candidate.from_file(STARTERS / "8_CausalAttention.py"), Problem.from_file(problem_path))
    assert verdict.status is Status.correct, verdict.reason
    assert set(verdict.workloads) == {"seq_37", "seq_32"}, verdict.workloads


# The other problems at a tiny size, their own _inputs helper's arguments per workload: one width no
# block divides, one a block does.
TINY_ROWS = """
from pathlib import Path
from kernelloop.problem import import_source

real = import_source(Path({path!r}), "tiny_training_{stem}")
Model, TOLERANCE, BACKWARD = real.Model, real.TOLERANCE, real.BACKWARD


def get_inputs():
    return real._inputs(*{first!r})


def get_workloads():
    return {{"first": get_inputs, "second": lambda: real._inputs(*{second!r})}}


def get_init_inputs():
    return []
"""
TINY_ARGS = {"1_LayerNorm": ((9, 48), (4, 64)), "2_RMSNorm": ((9, 48), (4, 64)), "3_SwiGLU": ((9, 48), (4, 64)),
             "4_CrossEntropy128k": ((5, 4500), (3, 4096)),  # (tokens, vocab) about its 4096-column block
             "5_GELU": ((9, 48), (4, 64)), "7_ResidualRMSNorm": ((9, 48), (4, 64))}


@pytest.mark.parametrize("stem", sorted(TINY_ARGS))
def test_each_rowwise_starter_is_right_forward_and_backward(verifier, tmp_path, stem):
    problem_path = tmp_path / f"tiny_{stem}.py"
    first, second = TINY_ARGS[stem]
    problem_path.write_text(TINY_ROWS.format(path=str(TRAINING / f"{stem}.py"), stem=stem, first=first, second=second))
    verdict = verifier.verify(Candidate.from_file(STARTERS / f"{stem}.py"), Problem.from_file(problem_path))
    assert verdict.status is Status.correct, verdict.reason
    assert set(verdict.workloads) == {"first", "second"}, verdict.workloads


# RoPE at 3 heads (no power of two) and at the far positions a long sequence reaches, where the angles
# are thousands of radians.
TINY_ROPE = """
from pathlib import Path
import torch
from kernelloop.problem import import_source

real = import_source(Path({path!r}), "tiny_training_rope")
Model, TOLERANCE, BACKWARD = real.Model, real.TOLERANCE, real.BACKWARD


def get_inputs():
    return real._inputs(1, 7, 3)


def get_workloads():
    far = lambda: [torch.randn(2, 4, 4, real.HEAD_DIM, dtype=torch.bfloat16), torch.arange(8188, 8192)]
    return {{"first": get_inputs, "far": far}}


def get_init_inputs():
    return []
"""


def test_the_rope_starter_is_right_forward_and_backward(verifier, tmp_path):
    problem_path = tmp_path / "tiny_6_RoPE.py"
    problem_path.write_text(TINY_ROPE.format(path=str(TRAINING / "6_RoPE.py")))
    verdict = verifier.verify(Candidate.from_file(STARTERS / "6_RoPE.py"), Problem.from_file(problem_path))
    assert verdict.status is Status.correct, verdict.reason
    assert set(verdict.workloads) == {"first", "far"}, verdict.workloads


def test_every_starter_here_is_tested_here():
    assert {p.stem for p in STARTERS.glob("*.py")} == {"8_CausalAttention", "6_RoPE", *TINY_ARGS}


def test_the_same_starter_with_its_query_gradient_off_by_a_tenth_is_wrong_and_named(verifier, tmp_path):
    """The backward is judged, not only the forward: dQ scaled by 1.1 is a wrong gradient of input 0."""
    problem_path = tmp_path / "tiny_8_CausalAttention.py"
    problem_path.write_text(TINY_ATTENTION.format(path=str(TRAINING / "8_CausalAttention.py")))
    text = (STARTERS / "8_CausalAttention.py").read_text()
    assert text.count("_to(dq * scale,") == 1
    broken = tmp_path / "8_CausalAttention_broken.py"
    broken.write_text(text.replace("_to(dq * scale,", "_to(dq * scale * 1.1,"))
    verdict = verifier.verify(Candidate.from_file(broken), Problem.from_file(problem_path))
    assert verdict.status is Status.incorrect and "gradient of input 0" in verdict.reason, verdict.reason


# One gradient of each row-wise starter off by a tenth: the text it replaces, and the gradient named.
MUTANTS = {
    "1_LayerNorm": ("db += tl.sum(dy, 0)", "db += tl.sum(dy, 0) * 1.1", "gradient of input 2"),  # the bias's
    "4_CrossEntropy128k": ("p - 1.0", "p - 0.9", "gradient of input 0"),  # the target's one-hot off
    "7_ResidualRMSNorm": ("_to(dh, dres_ptr", "_to(dh * 1.1, dres_ptr", "gradient of input 1"),  # the residual's
}


@pytest.mark.parametrize("stem", sorted(MUTANTS))
def test_a_rowwise_starter_with_one_gradient_off_by_a_tenth_is_wrong_and_named(verifier, tmp_path, stem):
    old, new, named = MUTANTS[stem]
    problem_path = tmp_path / f"tiny_{stem}.py"
    first, second = TINY_ARGS[stem]
    problem_path.write_text(TINY_ROWS.format(path=str(TRAINING / f"{stem}.py"), stem=stem, first=first, second=second))
    text = (STARTERS / f"{stem}.py").read_text()
    assert text.count(old) == 1
    broken = tmp_path / f"{stem}_broken.py"
    broken.write_text(text.replace(old, new))
    verdict = verifier.verify(Candidate.from_file(broken), Problem.from_file(problem_path))
    assert verdict.status is Status.incorrect and named in verdict.reason, verdict.reason


def test_the_rope_starter_with_its_backward_rotating_forwards_is_wrong_and_named(verifier, tmp_path):
    """The backward rotates by minus the angle; by plus it, the forward is still right, its gradient not."""
    problem_path = tmp_path / "tiny_6_RoPE.py"
    problem_path.write_text(TINY_ROPE.format(path=str(TRAINING / "6_RoPE.py")))
    text = (STARTERS / "6_RoPE.py").read_text()
    assert text.count("sin = -sin") == 1
    broken = tmp_path / "6_RoPE_broken.py"
    broken.write_text(text.replace("sin = -sin", "sin = sin"))
    verdict = verifier.verify(Candidate.from_file(broken), Problem.from_file(problem_path))
    assert verdict.status is Status.incorrect and "gradient of input 0" in verdict.reason, verdict.reason
