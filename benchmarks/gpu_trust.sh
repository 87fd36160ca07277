#!/usr/bin/env bash
# One device call for the trust boundary: a bare verify (torch, triton, NVML alone), the GPU tests
# of the verifier and the adversarial corpus (linted and unlinted, timed), then the verifier bench.
#   bash benchmarks/gpu_trust.sh [pytest -k expression]
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/kernelloop-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 - <<'PY'
import time
from kernelloop.problem import Candidate, Problem
from kernelloop.tools.verify.verifier import verify
started = time.perf_counter()
v = verify(Candidate.from_file("examples/candidates/2_SoftmaxIrregular.py"),
           Problem.from_file("kernelloop/evals/problems/2_SoftmaxIrregular.py"), device="cuda")
print("bare verify:", v.status.value, v.reason, "speedup", v.speedup, v.speed_source, v.isolation,
      f"{time.perf_counter() - started:.1f}s", v.warnings)
PY
python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 300 --tb=short -rfE ${1:+-k "$1"} \
  tests/gpu/test_verifier_gpu.py tests/gpu/test_adversarial_gpu.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -60
