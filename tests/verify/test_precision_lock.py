"""The candidate's child locks torch's precision settings (precision_lock): once the declared ones are
set, every setter of them raises on a write of another value and records it, a write of the value
already there goes through, and the harness's own writes (declared_precision around each checked run)
still work. The lock is for the rest of a process, so it is tried in a child like the harness's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelloop.problem import Candidate, Problem
from kernelloop.records import Status

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

# Each way a candidate may try to change torch's numeric precision, and the setter the refusal names.
WRITES = {
    'torch.set_float32_matmul_precision("high")': "torch.set_float32_matmul_precision",
    'torch.set_float32_matmul_precision("medium")': "torch.set_float32_matmul_precision",
    "torch.backends.cuda.matmul.allow_tf32 = True": "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cudnn.allow_tf32 = True": "torch.backends.cudnn.allow_tf32",
    'torch.backends.fp32_precision = "tf32"': "torch.backends.fp32_precision",
    'torch.backends.cuda.matmul.fp32_precision = "tf32"': "torch.backends.cuda.matmul.fp32_precision",
    'torch.backends.cudnn.fp32_precision = "tf32"': "torch.backends.cudnn.fp32_precision",
    'torch.backends.cudnn.conv.fp32_precision = "tf32"': "torch.backends.cudnn.conv.fp32_precision",
    'torch.backends.cudnn.rnn.fp32_precision = "tf32"': "torch.backends.cudnn.rnn.fp32_precision",
    # torch's mkldnn.fp32_precision writes the generic node (its setter is built on ("generic", "all"))
    'torch.backends.mkldnn.fp32_precision = "bf16"': "torch.backends.fp32_precision",
    'torch.backends.mkldnn.matmul.fp32_precision = "tf32"': "torch.backends.mkldnn.matmul.fp32_precision",
    'torch.backends.mkldnn.conv.fp32_precision = "tf32"': "torch.backends.mkldnn.conv.fp32_precision",
    'torch.backends.mkldnn.rnn.fp32_precision = "bf16"': "torch.backends.mkldnn.rnn.fp32_precision",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False":
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = (True, False)":
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_fp16_accumulation = True": "torch.backends.cuda.matmul.allow_fp16_accumulation",
    "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)": "torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp",
    "torch._C._set_cpu_allow_fp16_reduced_precision_reduction(True)":
        "torch._C._set_cpu_allow_fp16_reduced_precision_reduction",
    # the private setters themselves, and the backends' flags() (allow_tf32=True by default)
    "torch._C._set_cublas_allow_tf32(True)": "torch.backends.cuda.matmul.allow_tf32",
    'torch._C._set_float32_matmul_precision("high")': "torch.set_float32_matmul_precision",
    'torch._C._set_fp32_precision_setter("cuda", "matmul", "tf32")': "torch.backends.cuda.matmul.fp32_precision",
    "torch._C._set_cublas_allow_fp16_reduced_precision_reduction(False, True)":
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "with torch.backends.cudnn.flags(enabled=True):\n    pass": "torch.backends.cudnn.allow_tf32",
    "torch.backends.mkldnn.set_flags(_fp32_precision='tf32')": "torch.backends.mkldnn.fp32_precision",
    # reaching for the originals: the module's dict, a reloaded backends module, cuBLASModule's own
    # __setattr__, a getter faked to read as the value written
    'torch._C.__dict__["_set_cublas_allow_tf32"](True)': "torch.backends.cuda.matmul.allow_tf32",
    "importlib.reload(torch.backends.cudnn)\ntorch.backends.cudnn.allow_tf32 = True": "torch.backends.cudnn.allow_tf32",
    "importlib.reload(torch._C)\ntorch.set_float32_matmul_precision('high')": "torch.set_float32_matmul_precision",
    'type(torch.backends.cuda.matmul).__setattr__(torch.backends.cuda.matmul, "allow_tf32", True)':
        "torch.backends.cuda.matmul.allow_tf32",
    "torch._C._get_cublas_allow_tf32 = lambda: True\ntorch.backends.cuda.matmul.allow_tf32 = True":
        "torch.backends.cuda.matmul.allow_tf32",
    # autocast switched on: float32 ops at half precision (review39)
    'torch.set_autocast_enabled("cpu", True)': "torch.set_autocast_enabled",
    'with torch.autocast("cpu", dtype=torch.bfloat16):\n    pass': "torch.set_autocast_enabled",
    "torch._C.set_autocast_cpu_enabled(True)": "torch.set_autocast_cpu_enabled",
}
# Writes of the value the declared settings already hold: no-ops, let through.
SAME = [
    'torch.set_float32_matmul_precision("highest")',
    "torch.backends.cuda.matmul.allow_tf32 = False",
    "torch.backends.cudnn.allow_tf32 = False",
    # oneDNN's TF32 is for Intel GPUs: on a build without them its getter reads None and a write does
    # nothing, so the lock lets it through where nothing else moved
    "torch.backends.mkldnn.allow_tf32 = False",
    "torch.backends.mkldnn.allow_tf32 = True",
    'torch.backends.cuda.matmul.fp32_precision = "ieee"',
    'torch.backends.fp32_precision = "none"',
    'torch.backends.cudnn.conv.fp32_precision = "none"',
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True",
    "torch.backends.cuda.matmul.allow_fp16_accumulation = False",
    "with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):\n    pass",
    'torch.set_autocast_enabled("cpu", False)',
    'with torch.autocast("cpu", enabled=False):\n    pass',
]

# A child like the harness's: the declared settings, then the lock; each write in a fresh process
# would be cleaner, but a refused write changes nothing, so they share one and the state is checked.
_CHILD = textwrap.dedent("""
    import importlib, json, sys
    import torch
    from kernelloop.tools.verify import precision_lock
    from kernelloop.tools.verify._runtime import hold_declared_precision, precision_changes, precision_flags
    from kernelloop.tools.verify.harness import run_one

    settings = hold_declared_precision()
    precision_lock.install()
    report = {"same": {}, "writes": {}}
    for code in json.loads(sys.argv[1]):
        try:
            exec(code)
            report["same"][code] = "allowed"
        except Exception as exc:
            report["same"][code] = f"{type(exc).__name__}: {exc}"
    report["after_same"] = precision_changes(settings)
    # the harness's own writes: declared_precision around a checked run, under the lock
    _, _, report["run_one"] = run_one(torch.nn.Linear(4, 4), [torch.randn(2, 4)], "cpu", [[[2, 4], "float32"]])
    for code in json.loads(sys.argv[2]):
        try:
            exec(code)
            report["writes"][code] = ["allowed", ""]
        except precision_lock.PrecisionRefused as exc:
            report["writes"][code] = ["refused", str(exc)]
        except Exception as exc:
            report["writes"][code] = [type(exc).__name__, str(exc)]
    report["flags_unchanged"] = precision_flags() == settings
    report["refused"] = precision_lock.refused()
    report["changes"] = precision_changes(settings)
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def child() -> dict:
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(SAME), json.dumps(list(WRITES))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("code", list(WRITES))
def test_a_write_of_another_value_raises_naming_its_setter(child, code):
    outcome, message = child["writes"][code]
    assert outcome == "refused", (outcome, message)
    assert message.startswith(f"changes precision: {WRITES[code]} ") and "\n" not in message, message


def test_a_refused_write_changes_nothing_and_is_recorded(child):
    """The settings read as declared after every refusal, and each setter refused is on the record that
    precision_changes reports, so a candidate that caught the error is judged all the same."""
    assert child["flags_unchanged"]
    assert set(child["refused"]) == set(WRITES.values())
    assert all(change.endswith("(refused)") for change in child["changes"].values())
    assert child["changes"]["torch.set_float32_matmul_precision"] == "'highest' -> 'high' (refused)"


@pytest.mark.parametrize("code", SAME)
def test_a_write_of_the_value_already_there_goes_through(child, code):
    assert child["same"][code] == "allowed"


def test_the_harness_still_sets_the_declared_precision_around_a_checked_run(child):
    """declared_precision writes every node and the legacy flags before a checked run and after it:
    all of the value the lock holds, so none is refused, and nothing reads as changed."""
    assert child["after_same"] == {}
    assert child["run_one"] is None


FLIP_IN_FORWARD = FIXTURES / "cheats" / "review37_precision_flip_restore_in_forward.py"
CAUGHT = '''

class Caught(ModelNew):
    def forward(self, x):
        try:
            torch.set_float32_matmul_precision("high")
        except RuntimeError:
            pass  # no TF32 after all, and nothing reads as changed after the call
        return super().forward(x)


ModelNew = Caught
'''


@pytest.fixture(scope="module")
def unlinted(tmp_path_factory):
    from kernelloop.tools.verify.verifier import Verifier

    with Verifier(device="cpu", workspace=tmp_path_factory.mktemp("lock"), time_it=False, static_checks=False,
                  compile_timeout_s=30.0, run_timeout_s=30.0) as verifier:
        yield verifier


def test_a_refusal_the_candidate_catches_still_ends_the_run(unlinted, tmp_path):
    """Without the lint (which refuses try/except and the call), a forward that swallows the lock's error
    leaves the settings as declared; the refusal on record still rejects it."""
    path = tmp_path / "caught.py"
    path.write_text(FLIP_IN_FORWARD.read_text() + CAUGHT)
    verdict = unlinted.verify(Candidate.from_file(path), Problem.from_file(FIXTURES / "problems" / "linear_relu.py"))
    assert verdict.status is Status.rejected and verdict.code.value == "changes_precision", verdict.reason
    assert "its forward tried to switch torch's float32 precision (torch.set_float32_matmul_precision" in verdict.reason


def test_a_refused_write_at_import_is_a_precision_change_not_an_import_error(unlinted, tmp_path):
    path = tmp_path / "at_import.py"
    path.write_text("import torch\ntorch.backends.cudnn.allow_tf32 = True\n" + FLIP_IN_FORWARD.read_text())
    verdict = unlinted.verify(Candidate.from_file(path), Problem.from_file(FIXTURES / "problems" / "linear_relu.py"))
    assert verdict.code.value == "changes_precision", verdict.reason
    assert "its import tried to switch" in verdict.reason and "torch.backends.cudnn.allow_tf32" in verdict.reason
