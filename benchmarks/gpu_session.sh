#!/usr/bin/env bash
# One device call: environment facts, a verify with torch/triton/nvml alone, the GPU tests,
# then the verifier benchmark; short tables last. Run from the repo root on the device machine:
#   bash benchmarks/gpu_session.sh [pytest paths...]
# The whole of tests/gpu outlasts one 10-minute call on an H100 (test_adversarial_gpu.py alone took
# about 570 s on 2026-11-26): name the files for each call. Wheels in .whl/ (pydantic for the critic
# and the CLI) and Debian packages in .debs/ (bubblewrap: the image has none) are installed first,
# outside the system's own paths.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kernelloop-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -c "import torch, triton, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
# 1. The verifier with nothing of ours installed but the source tree (no pydantic, no langgraph).
PYTHONPATH="$PWD" python3 - <<'PY'
from kernelloop.problem import Candidate, Problem
from kernelloop.tools.verify.verifier import verify
v = verify(Candidate.from_file("examples/candidates/2_SoftmaxIrregular.py"),
           Problem.from_file("kernelloop/evals/problems/2_SoftmaxIrregular.py"), device="cuda")
print("bare verify:", v.status.value, v.reason, "speedup", v.speedup)
PY
# 2. Test and bench dependencies travel as wheels (.whl, see the device README).
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
for deb in .debs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" /tmp/debs; done
if [ -x /tmp/debs/usr/bin/bwrap ]; then export PATH="/tmp/debs/usr/bin:$PATH"; fi
python3 -c "from kernelloop.sandbox.isolation import choose_mode; print('sandbox:', *choose_mode(None))"
python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 300 --tb=line -rfE ${@:-tests/gpu} 2>&1 | tee "$OUT/gpu_tests.log" | tail -45
# Small kernels (fixed cost) and one over 50 us (the spread); add --no-standby / --no-preload to see what each saves.
timeout 330 python3 benchmarks/verifier_bench.py --device cuda --repeat 5 --out "$OUT" \
  --only 2_SoftmaxIrregular 6_MatmulFP16 12_Scale_BiasAdd_Tanh_Clamp 1_causal_mask 2>&1 | tee "$OUT/verifier_bench.log" | tail -12
