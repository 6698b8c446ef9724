#!/usr/bin/env bash
# The run command: installs dependencies, builds, fetches the default corpus
# (Jane Austen's novels, from Debian's r-cran-janeaustenr) and trains the
# reference GPT (4 layers, d_model 256, 4 heads, T 128, batch 16) in fp32,
# printing validation bits per character as it goes. Extra arguments go to
# `mantissa train` (e.g. --recipe bf16-amp --steps 1000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
bash scripts/build.sh build
bash scripts/data.sh >/dev/null
OUT=${MANTISSA_OUT:-$ROOT/report}
mkdir -p "$OUT"
./build/mantissa train --model gpt --steps 600 --eval-every 100 --threads "$(nproc)" \
  --metrics "$OUT/train.jsonl" --save "$OUT/model" "$@"
echo "run: metrics in $OUT/train.jsonl, model in $OUT/model (safetensors + config.json)"
./build/mantissa eval --checkpoint "$OUT/model" --data .cache/data/austen.txt
