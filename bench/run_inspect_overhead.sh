#!/usr/bin/env bash
# run_inspect_overhead.sh: what `train --watch` and `inspect` cost per step, against `train` in
# the same round, per recipe.
#
#   bash bench/run_inspect_overhead.sh [--build-dir DIR] [--recipes fp8-delayed,bf16-amp,mxfp8]
#                                      [--steps 22] [--rounds 2] [--threads 1]
#
# Per step = (CPU seconds of an N-step run - those of a 2-step run) / (N - 2), CPU seconds being
# user + sys of the process (wall time varies more on a shared machine), so start-up (data, model)
# cancels. Each round runs, per recipe: train, train --watch (every 10th step), train --watch 1,
# inspect (every step, 65536 values per cast); the ratios compare figures of the same round.
# Model: 2-layer GPT, d_model 128, 4 heads, T 64, batch 16, the default corpus.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=$ROOT/build
RECIPES=fp8-delayed,bf16-amp,mxfp8
STEPS=22
ROUNDS=2
THREADS=1
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --recipes) RECIPES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    *) echo "run_inspect_overhead.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ "$STEPS" -gt 2 ] || { echo "run_inspect_overhead.sh: --steps must be > 2" >&2; exit 2; }
BIN=$BUILD_DIR/mantissa
[ -x "$BIN" ] || { echo "run_inspect_overhead.sh: no $BIN (bash scripts/build.sh first)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
MODEL=(--model gpt --layers 2 --d-model 128 --heads 4 --seq-len 64 --batch-size 16 --threads "$THREADS"
       --eval-every 0 --warmup 2)

# CPU seconds (user + sys) of one run of the mantissa command given.
cpu_seconds() {
  local out=$TMP/run.txt TIMEFORMAT='%U %S'
  { time "$BIN" "$@" >"$out" 2>&1; } 2>"$TMP/time.txt" || {
    echo "run_inspect_overhead.sh: failed: mantissa $*" >&2; cat "$out" >&2; exit 1; }
  awk '{ printf "%.3f", $1 + $2 }' "$TMP/time.txt"
}

# ms of CPU per step of a mode (train, watch10, watch1, inspect) under a recipe.
per_step_ms() {
  local mode=$1 recipe=$2 n a b
  local args=()
  case $mode in
    train) args=(train) ;;
    watch10) args=(train --watch 10) ;;
    watch1) args=(train --watch 1) ;;
    inspect) args=(inspect) ;;
  esac
  for n in 2 "$STEPS"; do
    local extra=()
    [ "$mode" = inspect ] && { rm -rf "$TMP/out"; extra=(--out "$TMP/out"); }
    local s
    s=$(cpu_seconds "${args[@]}" --recipe "$recipe" "${MODEL[@]}" --steps "$n" "${extra[@]}")
    if [ "$n" = 2 ]; then a=$s; else b=$s; fi
  done
  awk -v a="$a" -v b="$b" -v n="$STEPS" 'BEGIN { printf "%.2f", (b - a) * 1000 / (n - 2) }'
}

echo "| recipe | round | train ms/step | --watch 10 | --watch 1 | inspect |"
echo "|---|---|---|---|---|---|"
IFS=, read -ra LIST <<<"$RECIPES"
for ((round = 1; round <= ROUNDS; ++round)); do
  for recipe in "${LIST[@]}"; do
    t=$(per_step_ms train "$recipe")
    w10=$(per_step_ms watch10 "$recipe")
    w1=$(per_step_ms watch1 "$recipe")
    ins=$(per_step_ms inspect "$recipe")
    awk -v r="$recipe" -v k="$round" -v t="$t" -v w10="$w10" -v w1="$w1" -v i="$ins" 'BEGIN {
      printf "| %s | %d | %.2f | %.2f (%+.0f%%) | %.2f (%+.0f%%) | %.2f (%.2fx) |\n",
             r, k, t, w10, (w10 / t - 1) * 100, w1, (w1 / t - 1) * 100, i, i / t }'
  done
done
