#!/usr/bin/env bash
# One device call on a machine of several GPUs: each lane is one command on its own GPUs and CPU cores
# (CUDA_VISIBLE_DEVICES, taskset), all lanes at once, each under its own time limit, so a 4-GPU node does
# four 10-minute calls' work in one. Lanes that time anything get cores no other lane uses.
#   bash benchmarks/gpu_lanes.sh 'NAME GPUS CPUS SECONDS COMMAND...' ...
# e.g. 'adv1 0 0-15 560 python3 -m pytest tests/gpu/test_adversarial_gpu.py'. A COMMAND sees $LANE_OUT (its
# own folder for the files to bring back) and the shell function `split_tests FILE PART PARTS`, which prints
# that share of FILE's test ids (for one test file over several lanes).
# Everything comes back as $OUT/lanes.tgz (the device returns at most 8 files) plus $OUT/lanes.txt,
# the table: lane, GPUs, exit, wall seconds, last line of its log.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kernelloop-out}"; mkdir -p "$OUT/lanes"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader | tee "$OUT/lanes/gpus.txt"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
for deb in .debs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" /tmp/debs; done
if [ -x /tmp/debs/usr/bin/bwrap ]; then export PATH="/tmp/debs/usr/bin:$PATH"; fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import torch, triton, sys, os; print('python', sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__, 'euid', os.geteuid(), 'cores', os.cpu_count())" | tee -a "$OUT/lanes/gpus.txt"
git rev-parse --short HEAD 2>/dev/null | sed 's/^/kernelloop /' | tee -a "$OUT/lanes/gpus.txt"

# split_tests FILE PART PARTS: the PART-th (1-based) of PARTS interleaved shares of FILE's test ids, one per line.
split_tests() {
  python3 -m pytest --collect-only -q -p no:cacheprovider -o addopts="" "$1" 2>/dev/null \
    | grep '::' | awk -v p="$2" -v n="$3" '(NR - 1) % n == p - 1'
}
export -f split_tests

start=$(date +%s)
for lane in "$@"; do
  read -r name gpus cpus seconds cmd <<< "$lane"
  dir="$OUT/lanes/$name"; mkdir -p "$dir"
  ( export LANE_OUT="$dir" CUDA_VISIBLE_DEVICES="$gpus"
    t0=$(date +%s)
    timeout -s INT -k 15 "$seconds" taskset -c "$cpus" bash -c "$cmd" > "$dir/log.txt" 2>&1
    echo "$? $(( $(date +%s) - t0 ))" > "$dir/exit.txt" ) &
done
wait
printf '%-12s %-8s %-5s %-6s %s\n' lane gpus exit wall_s "last line" | tee "$OUT/lanes.txt"
for lane in "$@"; do
  read -r name gpus _ <<< "$lane"
  read -r rc wall < "$OUT/lanes/$name/exit.txt"
  printf '%-12s %-8s %-5s %-6s %s\n' "$name" "$gpus" "$rc" "$wall" "$(grep -v '^\s*$' "$OUT/lanes/$name/log.txt" | tail -1 | cut -c1-150)" | tee -a "$OUT/lanes.txt"
done
echo "all lanes: $(( $(date +%s) - start )) s"
tar -czf "$OUT/lanes.tgz" -C "$OUT" lanes && rm -rf "$OUT/lanes"
