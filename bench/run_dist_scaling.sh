#!/usr/bin/env bash
# run_dist_scaling.sh: data-parallel scaling on this machine, at one global batch.
#
#   bash bench/run_dist_scaling.sh [--build-dir DIR] [--out DIR] [--steps 12] [--recipe bf16-amp]
#                                  [--model-args "--layers 4 --d-model 256 --heads 4 --seq-len 128 --batch-size 16"]
#
# Runs `mantissa train` (the reference GPT by default) as 1 rank x 1 thread,
# 1 rank x 2 threads and 2 ranks x 1 thread (mpirun, loopback) with the
# gradient wire formats fp32, bf16 and fp8 (+ error feedback), and reports per
# step: wall time, time in the gradient reduction (encode + collectives +
# decode), bytes each rank sent, and the speed-up over 1 rank x 1 thread
# measured in the same run. The first 2 steps (set-up) are left out.
# Also times the wire codecs alone (bench_dist_codec). Writes DIR/dist_scaling.md,
# DIR/dist_scaling.json and DIR/dist_codec.json (default bench/results/);
# bench/project_dist_scaling.py DIR projects them to more ranks.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=$ROOT/build
OUT=$ROOT/bench/results
STEPS=12
RECIPE=bf16-amp
MODEL_ARGS="--layers 4 --d-model 256 --heads 4 --seq-len 128 --batch-size 16"
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --recipe) RECIPE=$2; shift 2 ;;
    --model-args) MODEL_ARGS=$2; shift 2 ;;
    *) echo "run_dist_scaling.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v mpirun >/dev/null || { echo "run_dist_scaling.sh: mpirun missing (bash scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
BIN=$BUILD_DIR/mantissa
COMMON="train --model gpt --recipe $RECIPE $MODEL_ARGS --steps $STEPS --eval-every 0 --eval-batches 1"

run() {  # name, launcher prefix, threads, extra flags
  local name=$1 launch=$2 threads=$3 extra=$4
  OMP_NUM_THREADS=$threads $launch "$BIN" $COMMON --threads "$threads" $extra --metrics "$TMP/$name.jsonl" \
    > "$TMP/$name.log" 2>&1 || { cat "$TMP/$name.log" >&2; exit 1; }
}
MPI="bash $ROOT/scripts/mpirun-local.sh -np 2"
run r1t1 "" 1 ""
run r1t2 "" 2 ""
run r2t1_fp32 "$MPI" 1 "--comm-format fp32"
run r2t1_bf16 "$MPI" 1 "--comm-format bf16"
run r2t1_fp8 "$MPI" 1 "--comm-format fp8 --comm-error-feedback"

# The wire codecs alone, per value, one thread (bench_dist_codec).
[[ -x "$BUILD_DIR/bench/bench_dist_codec" ]] && "$BUILD_DIR/bench/bench_dist_codec" --benchmark_min_time=0.1 --benchmark_out="$OUT/dist_codec.json" \
  --benchmark_out_format=json >/dev/null

python3 - "$TMP" "$OUT" "$RECIPE" "$MODEL_ARGS" <<'PY'
import json, statistics, sys, subprocess
tmp, out, recipe, model_args = sys.argv[1:]
rows = [("r1t1", "1 rank x 1 thread", "-"), ("r1t2", "1 rank x 2 threads", "-"),
        ("r2t1_fp32", "2 ranks x 1 thread", "fp32"), ("r2t1_bf16", "2 ranks x 1 thread", "bf16"),
        ("r2t1_fp8", "2 ranks x 1 thread", "fp8 e4m3 + EF")]
res = []
for key, setup, fmt in rows:
    steps = [json.loads(l) for l in open(f"{tmp}/{key}.jsonl") if '"step_ms"' in l]
    timed = steps[2:] or steps
    med = lambda k: statistics.median(s.get(k, 0) for s in timed)
    res.append(dict(key=key, setup=setup, format=fmt, step_ms=med("step_ms"), comm_ms=med("comm_ms"),
                    comm_bytes=int(med("comm_bytes")), steps=len(timed)))
base = res[0]["step_ms"]
isa = subprocess.run("grep -o 'avx512[a-z_0-9]*\\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\\n' ' '",
                     shell=True, capture_output=True, text=True).stdout.strip()
lines = [f"# Data-parallel scaling, recipe {recipe}, {model_args}", "",
         f"ISA: {isa}. Same global batch in every row; medians over {res[0]['steps']} steps.", "",
         "| setup | wire format | step ms | comm ms | comm share | MB sent / rank / step | speed-up vs 1x1 |",
         "|---|---|---:|---:|---:|---:|---:|"]
for r in res:
    share = r["comm_ms"] / r["step_ms"] if r["step_ms"] else 0
    lines.append(f"| {r['setup']} | {r['format']} | {r['step_ms']:.1f} | {r['comm_ms']:.1f} | {100*share:.1f}% | "
                 f"{r['comm_bytes']/1e6:.2f} | {base/r['step_ms']:.2f} |")
open(f"{out}/dist_scaling.md", "w").write("\n".join(lines) + "\n")
json.dump(res, open(f"{out}/dist_scaling.json", "w"), indent=1)
print("\n".join(lines))
PY
