#!/usr/bin/env bash
# run_all.sh: the whole performance harness in one run, on one CPU and thread count.
#
#   bash bench/run_all.sh [--threads 2] [--build-dir DIR] [--out DIR] [--rounds 3] [--steps 6]
#                         [--recipes fp32,bf16-amp,unit-fp8,fp8-delayed,scalify-fp8]
#                         [--large-recipes LIST] [--large-batch 8] [--large-steps 3] [--skip-large] [--quick]
#                         [--peers debian,pypi-eager,pypi-compile] [--gpt2-124m LIST] [--llmc BIN]
#
# Measures, each against a reference timed in the same run:
#   1. training tokens/s of the reference GPT (L4 C256 H4 T128 B16 V256) for every recipe in
#      --recipes (recipes this build cannot run are reported as skipped, with the reason) vs
#      PyTorch fp32 and autocast bf16 (Debian's python3-torch, installed if missing; version
#      printed; and PyTorch 2.x from PyPI eager with SDPA and under torch.compile, installed on
#      demand into .cache/venv-bench; --peers debian skips those), --rounds alternating rounds, medians; with a per-step breakdown (matmul,
#      attention, norms, elementwise, embedding, conversion, optimizer, overhead) in ms and share,
#      and the achieved fraction of the measured peak matmul throughput;
#   2. the same at the quick preset's size (L2 C128 H4 T64 B16), and at d_model 512 and 768
#      (6 layers, T 256, batch --large-batch) for --large-recipes (default: the same recipes as
#      --recipes, fp8 ones included) vs PyTorch fp32 and bf16;
#   3. mantissa's matmul wrapper vs raw oneDNN on the model's shapes (bench_matmul);
#   4. format conversions vs memcpy bandwidth (bench_convert);
#   5. blockwise vs whole-scores attention at T 128/512/1024: time and peak memory (bench_attention).
#   6. with --gpt2-124m LIST: GPT-2 124M (L12 C768 H12 T1024 B4, vocabulary 50257) for the recipes in
#      LIST vs PyTorch fp32 and bf16, 1 round of 2 steps (tens of seconds a step on 2 cores).
#   7. with --llmc BIN: GPT-2 124M at llm.c's own shape (B 4, T 64) for fp32, bf16-amp and the
#      --gpt2-124m recipes vs llm.c's fp32 CPU trainer (bench/run_train_vs_llmc.sh says how BIN is
#      built), 2 alternating rounds of 5 steps.
# Writes DIR/results.json and DIR/summary.md (default bench/results/); prints the summary.
# --quick: tiny sizes and one round, for CI smoke (checks the harness runs, not a speed); Debian's
# PyTorch only.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
THREADS=2
BUILD_DIR=$ROOT/build
OUT=$ROOT/bench/results
ROUNDS=3
STEPS=6
RECIPES=fp32,bf16-amp,unit-fp8,fp8-delayed,scalify-fp8
LARGE_RECIPES=
LARGE_BATCH=8
LARGE_STEPS=3
SKIP_LARGE=0
QUICK=0
PEERS=debian,pypi-eager,pypi-compile
GPT2_RECIPES=
LLMC=
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --recipes) RECIPES=$2; shift 2 ;;
    --large-recipes) LARGE_RECIPES=$2; shift 2 ;;
    --large-batch) LARGE_BATCH=$2; shift 2 ;;
    --large-steps) LARGE_STEPS=$2; shift 2 ;;
    --skip-large) SKIP_LARGE=1; shift ;;
    --quick) QUICK=1; shift ;;
    --peers) PEERS=$2; shift 2 ;;
    --gpt2-124m) GPT2_RECIPES=$2; shift 2 ;;
    --llmc) LLMC=$2; shift 2 ;;
    -h|--help) sed -n 2,29p "$0"; exit 0 ;;
    *) echo "run_all.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for pair in "threads:$THREADS" "rounds:$ROUNDS" "steps:$STEPS" "large-batch:$LARGE_BATCH" "large-steps:$LARGE_STEPS"; do
  case ${pair#*:} in ''|*[!0-9]*|0)
    echo "run_all.sh: --${pair%%:*} must be a positive integer, got '${pair#*:}'" >&2; exit 2 ;;
  esac
done
[ -n "$LARGE_RECIPES" ] || LARGE_RECIPES=$RECIPES
mkdir -p "$OUT"
RAW=$OUT/raw
mkdir -p "$RAW"
rm -f "$RAW"/train_*.json "$RAW"/llmc.txt "$RAW"/matmul.txt "$RAW"/convert.json "$RAW"/attention.txt "$RAW"/quick  # no stale parts
[ "$QUICK" = 1 ] && touch "$RAW/quick"

[ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target bench_train bench_matmul bench_convert bench_attention -j "$THREADS" >/dev/null

TRAIN=(bash "$ROOT/bench/run_train_vs_torch.sh" --build-dir "$BUILD_DIR" --threads "$THREADS")
if [ "$QUICK" = 1 ]; then
  echo "== quick: reference GPT shrunk (L1 C64 H2 T32 B2), one round" >&2
  "${TRAIN[@]}" --peers debian --recipes "$RECIPES" --rounds 1 --steps 2 --warmup 1 --layers 1 --d-model 64 --heads 2 \
    --seq-len 32 --batch 2 --out "$RAW/train_ref.json" >/dev/null
else
  echo "== reference GPT (L4 C256 H4 T128 B16), $ROUNDS alternating rounds" >&2
  "${TRAIN[@]}" --peers "$PEERS" --recipes "$RECIPES" --rounds "$ROUNDS" --steps "$STEPS" --warmup 2 --profile-steps 2 \
    --out "$RAW/train_ref.json" >/dev/null
  echo "== quick size GPT (L2 C128 H4 T64 B16), $ROUNDS alternating rounds" >&2
  "${TRAIN[@]}" --peers "$PEERS" --recipes "$RECIPES" --rounds "$ROUNDS" --steps 10 --warmup 3 --profile-steps 2 \
    --layers 2 --d-model 128 --heads 4 --seq-len 64 --batch 16 --out "$RAW/train_quick.json" >/dev/null
  if [ "$SKIP_LARGE" = 0 ]; then
    for C in 512 768; do
      echo "== GPT L6 C$C H$((C / 64)) T256 B$LARGE_BATCH, 1 round" >&2
      "${TRAIN[@]}" --peers "$PEERS" --recipes "$LARGE_RECIPES" --rounds 1 --steps "$LARGE_STEPS" --warmup 1 --profile-steps 1 --layers 6 --d-model "$C" \
        --heads $((C / 64)) --seq-len 256 --batch "$LARGE_BATCH" --out "$RAW/train_c$C.json" >/dev/null
    done
  fi
fi

if [ -n "$GPT2_RECIPES" ] && [ "$QUICK" = 0 ]; then
  echo "== GPT-2 124M (L12 C768 H12 T1024 B4 V50257), 1 round" >&2
  "${TRAIN[@]}" --peers "$PEERS" --recipes "$GPT2_RECIPES" --rounds 1 --steps 2 --warmup 1 --profile-steps 1 \
    --layers 12 --d-model 768 --heads 12 --seq-len 1024 --batch 4 --vocab 50257 --out "$RAW/train_gpt2_124m.json" >/dev/null
fi

if [ -n "$LLMC" ] && [ "$QUICK" = 0 ]; then
  echo "== GPT-2 124M (L12 C768 H12 T64 B4 V50257) vs llm.c, 2 alternating rounds" >&2
  LLMC_RECIPES=fp32,bf16-amp
  [ -n "$GPT2_RECIPES" ] && LLMC_RECIPES=$GPT2_RECIPES
  bash "$ROOT/bench/run_train_vs_llmc.sh" --llmc "$LLMC" --build-dir "$BUILD_DIR" --threads "$THREADS" \
    --recipes "$LLMC_RECIPES" --seq-len 64 --steps 5 --warmup 2 --rounds 2 --out "$RAW/llmc.json" >"$RAW/llmc.txt"
fi

echo "== matmul wrapper vs raw oneDNN" >&2
export OMP_NUM_THREADS=$THREADS
REPS=15; [ "$QUICK" = 1 ] && REPS=1
MANTISSA_BENCH_THREADS=$THREADS MANTISSA_BENCH_REPS=$REPS "$BUILD_DIR/bench/bench_matmul" \
  --benchmark_filter='^$' >"$RAW/matmul.txt"

echo "== conversions vs memcpy" >&2
FILTER='bm_(memcpy|quantize/(bf16|fp16|e4m3fn|e5m2)|mx/mxfp8_e4m3|mx_alloc/mxfp8_e4m3)/'
MIN_TIME=0.3
if [ "$QUICK" = 1 ]; then FILTER='bm_(memcpy|quantize/bf16)/32768'; MIN_TIME=0.01; fi
"$BUILD_DIR/bench/bench_convert" --benchmark_filter="$FILTER" --benchmark_min_time=$MIN_TIME \
  --benchmark_out="$RAW/convert.json" --benchmark_out_format=json >/dev/null

if [ "$QUICK" = 0 ]; then
  echo "== conversions vs numpy + ml_dtypes astype" >&2
  bash "$ROOT/scripts/pyrun.sh" "$ROOT/bench/numpy_convert.py" --cpp "$BUILD_DIR/bench/bench_convert" \
    --large-only --rounds 3 --json "$RAW/numpy_convert.json" >"$RAW/numpy_convert.txt"
fi

echo "== attention: blockwise vs whole scores" >&2
AREPS=5; [ "$QUICK" = 1 ] && AREPS=1
MANTISSA_BENCH_THREADS=$THREADS MANTISSA_BENCH_REPS=$AREPS "$BUILD_DIR/bench/bench_attention" \
  --benchmark_filter='^$' >"$RAW/attention.txt"

/usr/bin/python3 "$ROOT/bench/summarize.py" --raw "$RAW" --out "$OUT" --root "$ROOT"
