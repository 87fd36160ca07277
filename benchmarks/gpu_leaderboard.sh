#!/usr/bin/env bash
# One device call: the KernelBench leaderboard's 413 solutions judged again, correctness only, several
# verifier workers per GPU (every GPU of the machine), with a wall-clock cap: it starts no solution after
# CAP seconds, so it ends cleanly inside a 600 s call, and the next call goes on where it stopped.
# Levels are interleaved, so a capped call has judged some of every level. Run from the repo root:
#   bash benchmarks/gpu_leaderboard.sh [LB]
# LB (default lb/) is the leaderboard repository at 170ca79, carried as an ignored dir:
#   mkdir -p lb && git -C /work/.mirror/anneouyang+KernelBenchLeaderboard/repo archive 170ca79 | tar -x -C lb/
# Settings by environment: CAP (s, default 360), WORKERS (per GPU; default: a CPU core pair per worker,
# at most 8: every solution is a load_inline CUDA module, so nvcc on the CPU sets the pace), RUN (the bench
# dir, default .lbrun/: kept on a warm machine; on a fresh one, put a previous call's results.jsonl there
# and carry .lbrun to resume), DEVICE (default cuda; cpu rehearses the call here), LABEL (default: the GPU's name, h100 or h200), COMMIT (kernelloop's, for runs.json).
# Writes to $OUT: rejudge/verdicts_LABEL.jsonl and runs.json (no code; copy into
# docs/results/LABEL_leaderboard_rejudge/), results.jsonl (bench's, to resume), bench.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/kernelloop-out}"; mkdir -p "$OUT"
LB="${1:-lb}"; CAP="${CAP:-360}"; RUN="${RUN:-.lbrun}"
RAW="$LB/docs/assets/raw_data.json"; PROBLEMS="$LB/docs/assets/problems"
[ -f "$RAW" ] && [ -d "$PROBLEMS" ] || { echo "no $RAW or $PROBLEMS: carry the leaderboard checkout as $LB/"; exit 2; }
GPUS=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then GPUS=$(tr ',' '\n' <<< "$CUDA_VISIBLE_DEVICES" | grep -c .); fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
WORKERS="${WORKERS:-$(( $(nproc) / (2 * (GPUS > 0 ? GPUS : 1)) ))}"
WORKERS=$(( WORKERS < 1 ? 1 : WORKERS > 8 ? 8 : WORKERS ))
LABEL="${LABEL:-$(echo "$GPU_NAME" | grep -oiE 'h100|h200|a100|l40s' | head -1 | tr 'A-Z' 'a-z')}"; LABEL="${LABEL:-gpu}"
echo "$GPUS x $GPU_NAME, $(nproc) cores: $WORKERS worker(s) per GPU, cap ${CAP}s, label $LABEL"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
for deb in .debs/*.deb; do [ -f "$deb" ] && dpkg -x "$deb" /tmp/debs; done
if [ -x /tmp/debs/usr/bin/bwrap ]; then export PATH="/tmp/debs/usr/bin:$PATH"; fi
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$RUN"
# The cap stops new work; the hard limit behind it interrupts a candidate still running (SIGINT: bench closes its
# sandbox workers; its job is redone next call).
timeout -s INT -k 20 $(( CAP + 120 )) python3 -m kernelloop.cli bench leaderboard --list "$RAW" --problems-dir "$PROBLEMS" \
  --device "${DEVICE:-cuda}" --no-timing --workers-per-gpu "$WORKERS" --stop-after "${CAP}s" --out "$RUN" \
  --workspace /tmp/kl-leaderboard > "$OUT/bench.out" 2> "$OUT/bench.log"
echo "bench exit $?"; grep -E "candidates,|error" "$OUT/bench.log" | tail -2; grep -E "solved|stopped|resumed" "$OUT/bench.out"
[ -f "$RUN/results.jsonl" ] || exit 1
cp "$RUN/results.jsonl" "$OUT/results.jsonl"
python3 benchmarks/leaderboard_rejudge.py --extract "$RUN/results.jsonl" --label "$LABEL" --out "$OUT/rejudge" --board "$LB" \
  --source-commit "${SOURCE_COMMIT:-170ca7965f53bba599d1078b6fcaa5dd2658ec50}" --workers "$WORKERS" \
  --kernelloop-commit "${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
