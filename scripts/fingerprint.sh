#!/usr/bin/env bash
# fingerprint.sh OUT [RECIPE...]: trains each recipe for a few steps with
# build/mantissa (one thread, fixed seed, default corpus; GPT, plus Llama and
# the MLP for fp32) and writes OUT/<model>-<recipe>.txt: the SHA-256 of every
# saved file and the logged losses. Two builds train bit-identically when
#   diff -r OUT_BEFORE OUT_AFTER
# prints nothing. A refactor runs it before and after.
#   MANTISSA_BIN   program to run (default build/mantissa)
#   STEPS          steps per run (default 25)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:?usage: fingerprint.sh OUT [RECIPE...]}
shift
BIN=${MANTISSA_BIN:-$ROOT/build/mantissa}
STEPS=${STEPS:-25}
RECIPES=("$@")
if ((${#RECIPES[@]} == 0)); then
  RECIPES=(fp32 bf16-amp fp16-amp unit-fp8 fp8-delayed mxfp8 fp8-blockwise scalify-fp8 nvfp4 unit-fp32)
fi
[[ -x "$BIN" ]] || { echo "fingerprint.sh: no program at $BIN (build first)" >&2; exit 2; }
bash "$ROOT/scripts/data.sh" >/dev/null
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf -- "$WORK"' EXIT

run() {  # run NAME ARGS...: one training run and its fingerprint
  local name=$1
  shift
  "$BIN" train "$@" --steps "$STEPS" --seed 7 --threads 1 --eval-every "$STEPS" --eval-batches 2 \
    --metrics "$WORK/$name.jsonl" --save "$WORK/$name" >/dev/null
  {
    (cd "$WORK/$name" && sha256sum -- *)
    # Losses only: the metrics also log wall-clock times.
    grep -o '"\(loss\|val_loss\|loss_scale\|grad_norm\)":[^,}]*' "$WORK/$name.jsonl"
  } >"$OUT/$name.txt"
  echo "$name: $(sha256sum "$OUT/$name.txt" | cut -c1-16)"
}

for r in "${RECIPES[@]}"; do run "gpt-$r" --recipe "$r"; done
run llama-fp32 --model llama --recipe fp32
run llama-unit-fp32 --model llama --recipe unit-fp32
run mlp-fp32 --model mlp --recipe fp32
run mlp-unit-fp8 --model mlp --recipe unit-fp8
