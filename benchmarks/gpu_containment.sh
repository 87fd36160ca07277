#!/usr/bin/env bash
# One device call for the per-job box (sandbox/confine.py): what holds for a GPU job as root, that
# Triton JIT and nvcc (load_inline) work inside it, the GPU tests named, and the warm cost beside
# the build before it (a copy of that tree in .base/, carried) in the same call. Run from the repo root:
#   bash benchmarks/gpu_containment.sh [pytest paths or -k expressions...]
# Wheels in .whl/ and bubblewrap's .deb in .debs/ travel with the call (see gpu_session.sh).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kernelloop-out}"; mkdir -p "$OUT"
TESTS=("$@")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
for deb in .debs/*.deb; do dpkg -x "$deb" /tmp/debs; done
export PATH="/tmp/debs/usr/bin:$PATH" PYTHONPATH="$PWD:/tmp/site"
python3 -c "import torch, triton, sys, os; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'euid', os.geteuid())"
python3 -m kernelloop.cli doctor 2>&1 | grep -A4 -i sandbox | tee "$OUT/doctor.txt"
# One Triton and one load_inline verdict, with the box each job had.
for pair in "examples/candidates/2_SoftmaxIrregular.py kernelloop/evals/problems/2_SoftmaxIrregular.py" \
            "tests/fixtures/honest/relu_load_inline_cuda.py tests/fixtures/problems/relu.py"; do
  set -- $pair
  [ -f "$1" ] || continue
  python3 -m kernelloop.cli verify "$1" --problem "$2" --device cuda --json --no-progress > "$OUT/verdict_$(basename "$1" .py).json" 2>/dev/null
  python3 - "$OUT/verdict_$(basename "$1" .py).json" <<'PY'
import json, sys
v = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(sys.argv[1].rsplit("/", 1)[-1], v["status"], v.get("speedup"), "|", json.dumps(v.get("containment")))
PY
done
# Warm cost, this build and the one before (.base/), alternating in one call: BENCH=1.
if [ "${BENCH:-0}" = 1 ]; then
  for round in $(seq 1 "${BENCH_ROUNDS:-2}"); do
    for build in base new; do
      root=$([ "$build" = base ] && echo "$PWD/.base" || echo "$PWD")
      (cd "$root" && PYTHONPATH="$root:/tmp/site" KERNELLOOP_HOME="/tmp/bench-$build" timeout 240 python3 \
        "$root/benchmarks/verifier_bench.py" --device cuda --repeat 4 --out "$OUT/bench_${build}_$round" \
        --only 2_SoftmaxIrregular 6_MatmulFP16 12_Scale_BiasAdd_Tanh_Clamp > "$OUT/bench_${build}_$round.log" 2>&1)
      echo "== $build, round $round"; grep -iE "fixed|median|per minute" "$OUT/bench_${build}_$round.log" | tail -6
    done
  done
fi
if [ "${#TESTS[@]}" -gt 0 ]; then
  python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 300 --tb=line -rfE "${TESTS[@]}" 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -30
fi
