#!/usr/bin/env bash
# Speed you can trust by default, on one GPU, in parts that each fit one 10-minute device call:
#   bash benchmarks/gpu_trusted_speed.sh examples    # 13 shipped examples x5, once with fresh timing off (its cost)
#   bash benchmarks/gpu_trusted_speed.sh starters    # the 10 attention starters x5 (8-12 s each: may need both halves)
#   bash benchmarks/gpu_trusted_speed.sh starters-a  # starters 1-5 x5;  starters-b: 6-10 x5 (one call each)
#   bash benchmarks/gpu_trusted_speed.sh memos       # the memo fixtures, static rules on and off, beside their twins
#   bash benchmarks/gpu_trusted_speed.sh tests       # the timed-checks GPU tests and the timing cheats of the corpus
#   bash benchmarks/gpu_trusted_speed.sh redteam     # the red team's timing attacks (tests/gpu/test_redteam_timing_gpu.py)
#   bash benchmarks/gpu_trusted_speed.sh bench [LB]  # bench with timing over the first 40 leaderboard solutions (BENCH_N)
# Carry .whl (pydantic and friends) and .debs (bubblewrap), and for `bench` the leaderboard checkout as lb/
# (benchmarks/gpu_leaderboard.sh says how). Results land in $OUT/speed; copy fresh_values.json (and a notes.md
# saying what the run was) into docs/results/h200_trusted_speed/runN/ and make its README with
#   python benchmarks/fresh_values.py --report docs/results/h200_trusted_speed/runN
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kernelloop-out}"; mkdir -p "$OUT/speed"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
for deb in .debs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" /tmp/debs; done
if [ -x /tmp/debs/usr/bin/bwrap ]; then export PATH="/tmp/debs/usr/bin:$PATH"; fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader
EXAMPLES=$(ls examples/candidates/*.py | xargs -n1 basename | sed 's/\.py$//')
STARTERS=$(ls examples/attention_candidates/*.py | xargs -n1 basename | sed 's/\.py$//')
MEMOS="$(ls tests/fixtures/cheats/memo_*.py | xargs -n1 basename | sed 's/\.py$//') precompute_from_request_seed"
case "${1:-examples}" in
  examples)
    timeout 560 python3 benchmarks/fresh_values.py --only $EXAMPLES --no-memos --reps 5 --off 1 --budget-s 520 \
      --out "$OUT/speed" 2>&1 | tee "$OUT/speed/log.txt" | tail -25 ;;
  starters|starters-a|starters-b)
    case "$1" in
      starters-a) STARTERS=$(echo $STARTERS | tr ' ' '\n' | grep -E '^[1-5]_' | tr '\n' ' ') ;;
      starters-b) STARTERS=$(echo $STARTERS | tr ' ' '\n' | grep -vE '^[1-5]_' | tr '\n' ' ') ;;
    esac
    timeout 560 python3 benchmarks/fresh_values.py --only $STARTERS --no-memos --reps 5 --off 0 --budget-s 520 \
      --out "$OUT/speed" 2>&1 | tee "$OUT/speed/log.txt" | tail -35 ;;
  memos)
    timeout 560 python3 benchmarks/fresh_values.py --only $MEMOS --reps 1 --off 0 --budget-s 520 \
      --out "$OUT/speed" 2>&1 | tee "$OUT/speed/log.txt" | tail -35 ;;
  tests)
    # the timed checks, and the corpus's timing cheats judged when timed
    timeout 560 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 300 --tb=line -rfE \
      tests/gpu/test_timed_checks_gpu.py "tests/gpu/test_adversarial_gpu.py::test_fixture_gets_its_verdict_when_timed" \
      -k "test_timed_checks_gpu or memo or forge or timer or precompute or stale" \
      2>&1 | tee "$OUT/speed/gpu_tests.log" | tail -30 ;;
  redteam)
    # the red team's attacks on the timing protocol, each against its honest twin
    timeout 560 python3 -m pytest -q -p no:cacheprovider -o addopts="" --timeout 300 --tb=short -rfEs \
      tests/gpu/test_redteam_timing_gpu.py 2>&1 | tee "$OUT/speed/redteam_tests.log" | tail -60 ;;
  bench)
    LB="${2:-lb}"
    python3 - "$LB" "$OUT/speed/first40.json" "${BENCH_N:-40}" <<'PY'
import json, sys
rows = json.load(open(f"{sys.argv[1]}/docs/assets/raw_data.json"))
json.dump(rows[:int(sys.argv[3])], open(sys.argv[2], "w"))
PY
    started=$(date +%s)
    timeout -s INT -k 20 540 python3 -m kernelloop.cli bench leaderboard --list "$OUT/speed/first40.json" \
      --problems-dir "$LB/docs/assets/problems" --device cuda --out "$OUT/speed/bench" --workspace /tmp/kl-bench \
      --no-progress > "$OUT/speed/bench.out" 2> "$OUT/speed/bench.log"
    echo "bench exit $? in $(( $(date +%s) - started )) s"; tail -12 "$OUT/speed/bench.out"
    tar -czf "$OUT/speed/bench.tgz" -C "$OUT/speed" bench && rm -rf "$OUT/speed/bench" ;;
  *) echo "parts: examples, starters, starters-a, starters-b, memos, tests, redteam, bench [LB]"; exit 2 ;;
esac
