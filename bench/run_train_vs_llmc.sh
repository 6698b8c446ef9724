#!/usr/bin/env bash
# run_train_vs_llmc.sh: training-step tokens/s of mantissa's GPT against llm.c's CPU trainer
# (train_gpt2.c, fp32) on the same shapes and threads, alternating rounds, in one run.
#
#   bash bench/run_train_vs_llmc.sh --llmc BIN [--threads 2] [--recipes fp32,bf16-amp]
#        [--layers 12 --d-model 768 --heads 12 --seq-len 1024 --batch 4 --vocab 50257]
#        [--steps 4] [--warmup 1] [--rounds 1] [--build-dir DIR] [--out FILE.json]
#
# BIN is llm.c's train_gpt2.c built beside the project (none of its code is in this repository;
# docs/results records the commit and the commands that build it), its main() reduced to the
# training loop and called as `BIN CHECKPOINT TOKENS B T STEPS`, printing llm.c's own line
# "step N: train loss X (took Y ms)" per step. bench/llmc_inputs.py writes the checkpoint
# (random-initialised, llm.c's layout) and the token file. Both sides run AdamW steps on random
# tokens; the median step after the warm-up steps gives tokens/s (B x T / step time). Each ratio
# is mantissa's recipe over llm.c's fp32.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLMC= THREADS=2 RECIPES=fp32 STEPS=4 WARMUP=1 ROUNDS=1 BUILD_DIR=$ROOT/build OUT=
L=12 C=768 H=12 T=1024 B=4 V=50257
while [ $# -gt 0 ]; do
  case $1 in
    --llmc) LLMC=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --recipes) RECIPES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --layers) L=$2; shift 2 ;;
    --d-model) C=$2; shift 2 ;;
    --heads) H=$2; shift 2 ;;
    --seq-len) T=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --vocab) V=$2; shift 2 ;;
    -h|--help) sed -n 2,16p "$0"; exit 0 ;;
    *) echo "run_train_vs_llmc.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for pair in "threads:$THREADS" "steps:$STEPS" "rounds:$ROUNDS" "layers:$L" "d-model:$C" "heads:$H" "seq-len:$T" \
            "batch:$B" "vocab:$V"; do
  case ${pair#*:} in ''|*[!0-9]*|0)
    echo "run_train_vs_llmc.sh: --${pair%%:*} must be a positive integer, got '${pair#*:}'" >&2; exit 2 ;;
  esac
done
case $WARMUP in ''|*[!0-9]*) echo "run_train_vs_llmc.sh: --warmup must be a non-negative integer" >&2; exit 2 ;; esac
[ -n "$LLMC" ] || { echo "run_train_vs_llmc.sh: --llmc BIN is required (llm.c's train_gpt2, see the header)" >&2; exit 2; }
[ -x "$LLMC" ] || { echo "run_train_vs_llmc.sh: --llmc '$LLMC' is not an executable file" >&2; exit 2; }
if [ ! -x "$BUILD_DIR/bench/bench_train" ]; then
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target bench_train -j "$THREADS" >/dev/null
fi
PY=/usr/bin/python3
OUT=${OUT:-$BUILD_DIR/train_vs_llmc.json}
WORK=$(mktemp -d)
trap 'rm -rf -- "$WORK"' EXIT
# enough tokens for every step of every round without wrapping: (warm-up + steps) x B x T + 1
"$PY" "$ROOT/bench/llmc_inputs.py" --out "$WORK" --layers "$L" --d-model "$C" --heads "$H" --seq-len "$T" \
  --vocab "$V" --tokens $(((WARMUP + STEPS) * B * T + 1)) >&2
export OMP_NUM_THREADS=$THREADS
LLMC_RUNS=() MANTISSA_RUNS=()
for round in $(seq "$ROUNDS"); do
  echo "round $round/$ROUNDS: llm.c fp32 ($THREADS threads) ..." >&2
  LLMC_RUNS+=("$("$LLMC" "$WORK/model.bin" "$WORK/tokens.bin" "$B" "$T" $((WARMUP + STEPS)) |
                 sed -n 's/^step \([0-9]*\): train loss \([^ ]*\) (took \([0-9.]*\) ms)$/\1 \2 \3/p' | tr '\n' ';')")
  echo "round $round/$ROUNDS: mantissa ($RECIPES, $THREADS threads) ..." >&2
  MANTISSA_RUNS+=("$("$BUILD_DIR/bench/bench_train" --threads "$THREADS" --recipe "$RECIPES" --steps "$STEPS" \
                     --warmup "$WARMUP" --profile-steps 0 --layers "$L" --d-model "$C" --heads "$H" --seq-len "$T" \
                     --batch "$B" --vocab "$V")")
done
"$PY" - "$OUT" "$WARMUP" "$((B * T))" "$ROOT" "$(printf '%s\n' "${LLMC_RUNS[@]}")" \
  "$(printf '%s\n' "${MANTISSA_RUNS[@]}")" "L$L C$C H$H T$T B$B V$V" <<'PYEOF'
import json, math, statistics, subprocess, sys
out, warmup, tokens, root = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
llmc_rounds = []
for line in filter(None, sys.argv[5].split("\n")):
    steps = [s.split() for s in line.split(";") if s.strip()]
    if len(steps) <= warmup:
        sys.exit("run_train_vs_llmc.sh: llm.c printed no step after the warm-up (is --llmc the bench build?)")
    losses = [float(s[1]) for s in steps]
    if not all(math.isfinite(x) for x in losses):
        sys.exit("run_train_vs_llmc.sh: llm.c's loss is not finite: " + " ".join(s[1] for s in steps))
    llmc_rounds.append(tokens / (statistics.median(float(s[2]) for s in steps[warmup:]) / 1e3))
mantissa_rounds = [json.loads(l) for l in sys.argv[6].splitlines() if l.strip()]
llmc = statistics.median(llmc_rounds)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=root).stdout.strip()
m0 = mantissa_rounds[0]
isa = f"{m0.get('host_isa', '?')} (kernels {m0.get('kernel_isa', '?')}; {m0.get('matmul_route', '?')})"
rows = []
print(f"GPT {sys.argv[7]}, {m0.get('threads')} threads, mantissa {commit}, {len(llmc_rounds)} round(s)")
print(f"host {isa}")
print(f"{'run':<24}{'tokens/s':>12}{'vs llm.c':>10}")
print(f"{'llm.c train_gpt2 fp32':<24}{llmc:>12.1f}{1:>10.2f}")
for name in mantissa_rounds[0]["recipes"]:
    tps = statistics.median(r["recipes"][name]["tokens_per_s"] for r in mantissa_rounds)
    rows.append({"mantissa": name, "tokens_per_s": round(tps, 1), "vs_llmc_fp32": round(tps / llmc, 3)})
    print(f"{'mantissa ' + name:<24}{tps:>12.1f}{tps / llmc:>10.2f}")
json.dump({"shape": sys.argv[7], "commit": commit, "llmc_tokens_per_s": round(llmc, 1),
           "llmc_rounds": [round(x, 1) for x in llmc_rounds], "rows": rows, "mantissa": mantissa_rounds},
          open(out, "w"), indent=1)
print(f"summary: {out}")
PYEOF
