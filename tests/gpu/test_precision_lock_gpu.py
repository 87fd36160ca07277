"""The precision lock on a CUDA build of torch: the harness's own writes of the declared settings
(declared_precision around each checked run, cuDNN's flags) pass it, and torch's cuBLAS and cuDNN
calls move no setting, so an honest candidate's forward with a matmul and a convolution is judged
as before. The CPU tests (tests/verify/test_precision_lock.py) ran on a CPU build, whose settings differ."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

_CHILD = textwrap.dedent("""
    import json
    import torch
    from kernelloop.tools.verify import precision_lock
    from kernelloop.tools.verify._runtime import hold_declared_precision, precision_changes
    from kernelloop.tools.verify.harness import run_one

    settings = hold_declared_precision()
    precision_lock.install()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4)).cuda()
    problems = []
    for _ in range(3):
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            pass
        _, _, problem = run_one(model, [torch.randn(2, 3, 8, 8)], "cuda", [[[2, 4], "float32"]])
        problems.append(problem)
    refused = None
    try:
        torch.backends.cuda.matmul.allow_tf32 = True
    except precision_lock.PrecisionRefused as exc:
        refused = str(exc)
    print(json.dumps({"problems": [str(p) if p else None for p in problems], "refused": refused,
                      "lock_refused": precision_lock.refused(), "changes": precision_changes(settings)}))
""")


def test_the_harness_and_torchs_cuda_calls_pass_the_lock_and_a_switch_is_refused():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["problems"] == [None, None, None], report
    assert report["refused"] and report["refused"].startswith("changes precision: torch.backends.cuda.matmul.allow_tf32")
    assert list(report["lock_refused"]) == ["torch.backends.cuda.matmul.allow_tf32"], report
