#!/usr/bin/env bash
# run_train_vs_torch.sh: training-step tokens/s of mantissa's GPT against PyTorch on the same CPU
# and thread count, in one run.
#
#   bash bench/run_train_vs_torch.sh [--threads 2] [--build-dir DIR] [--out FILE.json]
#                                    [--recipes fp32,bf16-amp] [--steps 10] [--warmup 3] [--rounds 1]
#                                    [any size flag: --layers L --d-model C --heads H --seq-len T --batch B
#                                     --vocab V]
#                                    [--profile-steps N]  (bench_train's profiled steps per recipe)
#                                    [--peers debian,pypi-eager,pypi-compile] [--model gpt|llama]
#
# Builds bench_train if needed, installs Debian's python3-torch if /usr/bin/python3 has no torch,
# runs bench/torch_gpt.py and bench_train with the same sizes and threads, prints both and the
# ratios, and writes a JSON summary (default DIR/train_vs_torch.json). With --rounds N the pair
# runs N times alternately and the median of each figure is reported, so that a load change on a
# shared machine hits both sides alike.
# The reference PyTorch fp32 speed depends on the BLAS behind Debian's libblas.so.3: with the
# netlib reference BLAS it is ~100x slower than with OpenBLAS, so the script installs
# libopenblas0-openmp and refuses to compare against a reference BLAS.
# Peers (--peers, all three by default): "debian" is that python3-torch; "pypi-eager" and
# "pypi-compile" are PyTorch 2.x from PyPI (bench/torch_venv.sh installs it on demand into
# .cache/venv-bench, several GB) in eager mode and under torch.compile, both with
# F.scaled_dot_product_attention. Each peer runs fp32 and autocast bf16 in every round.
# --model llama times the Llama block (RMSNorm, SwiGLU, rotary, no biases) on both sides instead.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
THREADS=2
BUILD_DIR=$ROOT/build
OUT=
RECIPES=fp32,bf16-amp
STEPS=10
WARMUP=3
ROUNDS=1
SIZE_ARGS=()
PROFILE_ARGS=()  # bench_train's default (3 profiled steps per recipe) unless given
PEERS=debian,pypi-eager,pypi-compile
MODEL=gpt
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --build-dir) BUILD_DIR=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --recipes) RECIPES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --layers|--d-model|--heads|--seq-len|--batch|--vocab) SIZE_ARGS+=("$1" "$2"); shift 2 ;;
    --profile-steps) PROFILE_ARGS=(--profile-steps "$2"); shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    -h|--help) sed -n 2,23p "$0"; exit 0 ;;
    *) echo "run_train_vs_torch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for pair in "threads:$THREADS" "steps:$STEPS" "warmup:$WARMUP" "rounds:$ROUNDS"; do
  case ${pair#*:} in ''|*[!0-9]*|0)
    echo "run_train_vs_torch.sh: --${pair%%:*} must be a positive integer, got '${pair#*:}'" >&2; exit 2 ;;
  esac
done
case $MODEL in gpt|llama) ;; *) echo "run_train_vs_torch.sh: --model must be gpt or llama, got '$MODEL'" >&2; exit 2 ;; esac
SIZE_ARGS+=(--model "$MODEL")
OUT=${OUT:-$BUILD_DIR/train_vs_torch.json}
IFS=, read -r -a PEER_LIST <<< "$PEERS"
for p in "${PEER_LIST[@]}"; do
  case $p in debian|pypi-eager|pypi-compile) ;;
    *) echo "run_train_vs_torch.sh: --peers: '$p' is not one of debian, pypi-eager, pypi-compile" >&2; exit 2 ;;
  esac
done
[ "${PEER_LIST[0]}" = debian ] || { echo "run_train_vs_torch.sh: --peers must start with debian (the reference the summary's ratios use)" >&2; exit 2; }
PYPI_PY=
case ",$PEERS," in *,pypi-*) PYPI_PY=$(bash "$ROOT/bench/torch_venv.sh") ;; esac

PY=/usr/bin/python3
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
# Debian's python3-torch calls the BLAS behind libblas.so.3; without an optimised one installed
# that is netlib's reference BLAS, and PyTorch fp32 would be measured against a strawman.
# OpenBLAS (OpenMP build) is what a Debian user of python3-torch gets with the recommended set.
if ! $PY -c 'import torch' 2>/dev/null || ! dpkg-query -W -f='${Status}' libopenblas0-openmp 2>/dev/null | grep -q "ok installed"; then
  echo "installing Debian's python3-torch and libopenblas0-openmp ..." >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-torch libopenblas0-openmp >/dev/null
fi
BLAS=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || true)
case $BLAS in
  */blas/libblas.so.3*)
    echo "run_train_vs_torch.sh: libblas.so.3 is still the netlib reference BLAS ($BLAS); PyTorch fp32 would be" \
         "measured against it. Select OpenBLAS: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
    exit 2 ;;
esac

if [ ! -x "$BUILD_DIR/bench/bench_train" ]; then
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target bench_train -j "$THREADS" >/dev/null
fi

# Both sides get exactly the threads asked for; neither is told about the other.
export OMP_NUM_THREADS=$THREADS
# A cap on mantissa (MANTISSA_MAX_ISA=avx2 or scalar) caps the peers' fp32 alike: PyTorch's
# own kernels (ATEN_CPU_CAPABILITY), MKL's and OpenBLAS's GEMM. ONEDNN_MAX_CPU_ISA is not
# passed on: PyTorch picks its bf16 kernels from cpuinfo, and the oneDNN it bundles then
# refuses them under the cap ("could not create a primitive descriptor"), so a capped peer's
# autocast bf16 still runs the host's bf16 instructions. Capped ratios compare code paths,
# not an AVX2 host's speed.
PEER_ENV=(-u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA)
case ${MANTISSA_MAX_ISA:-} in
  scalar) PEER_ENV+=(ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 OPENBLAS_CORETYPE=Nehalem) ;;
  avx2) PEER_ENV+=(ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 OPENBLAS_CORETYPE=Haswell) ;;
esac
[ ${#PEER_ENV[@]} -gt 4 ] && echo "peers capped alike: ${PEER_ENV[*]:4}" >&2
TORCH_RUNS=()
declare -A PEER_RUNS=()
MANTISSA_RUNS=()
peer_run() {  # peer name -> one torch_gpt.py JSON line
  local py=$PY flags=()
  case $1 in pypi-eager) py=$PYPI_PY; flags=(--sdpa) ;; pypi-compile) py=$PYPI_PY; flags=(--sdpa --compile) ;; esac
  env "${PEER_ENV[@]}" "$py" "$ROOT/bench/torch_gpt.py" --threads "$THREADS" --steps "$STEPS" --warmup "$WARMUP" "${flags[@]}" \
    "${SIZE_ARGS[@]}"
}
# A peer other than the reference (debian) that fails (torch.compile's AVX2 code under
# ATEN_CPU_CAPABILITY=avx2 gives a NaN loss with PyTorch 2.15) is left out of the figures and
# named with its last message in the summary, instead of ending the whole run.
declare -A PEER_FAILED=()
PEER_ERR=$(mktemp)
trap 'rm -f "$PEER_ERR"' EXIT
for round in $(seq "$ROUNDS"); do
  for p in "${PEER_LIST[@]}"; do
    [ -n "${PEER_FAILED[$p]:-}" ] && continue
    echo "round $round/$ROUNDS: PyTorch $p ($THREADS threads) ..." >&2
    if ! line=$(peer_run "$p" 2>"$PEER_ERR"); then
      cat "$PEER_ERR" >&2
      [ "$p" = debian ] && { echo "run_train_vs_torch.sh: the reference peer (debian) failed" >&2; exit 1; }
      PEER_FAILED[$p]=$(grep -v '^W[0-9]' "$PEER_ERR" | tail -1)
      echo "run_train_vs_torch.sh: PyTorch $p left out: ${PEER_FAILED[$p]}" >&2
      unset "PEER_RUNS[$p]"
      continue
    fi
    [ "$p" = debian ] && TORCH_RUNS+=("$line")
    PEER_RUNS[$p]+="$line"$'\n'
  done
  echo "round $round/$ROUNDS: mantissa ($RECIPES, $THREADS threads) ..." >&2
  MANTISSA_RUNS+=("$("$BUILD_DIR/bench/bench_train" --threads "$THREADS" --recipe "$RECIPES" --steps "$STEPS" \
                     --warmup "$WARMUP" "${SIZE_ARGS[@]}" "${PROFILE_ARGS[@]}")")
done
FAILED_JSON=$(for p in "${!PEER_FAILED[@]}"; do printf '%s\t%s\n' "$p" "${PEER_FAILED[$p]}"; done)
PEERS_JSON=$(for p in "${PEER_LIST[@]}"; do [ -n "${PEER_FAILED[$p]:-}" ] && continue; printf '%s\t%s\n' "$p" "$(printf '%s' "${PEER_RUNS[$p]}" | tr '\n' '\036')"; done)
TORCH_JSON=$(printf '%s\n' "${TORCH_RUNS[@]}")
MANTISSA_JSON=$(printf '%s\n' "${MANTISSA_RUNS[@]}")

$PY - "$OUT" "$TORCH_JSON" "$MANTISSA_JSON" "$BLAS" "$ROOT" "$PEERS_JSON" "$FAILED_JSON" <<'EOF'
import json, os, platform, statistics, subprocess, sys, time
out, blas = sys.argv[1], sys.argv[4]
peers = {}  # peer -> medians over rounds of its figures, per-round runs under "runs"
for line in filter(None, sys.argv[6].split("\n")):  # not splitlines: it splits at \x1e too
    name, runs = line.split("\t", 1)
    runs = [json.loads(r) for r in runs.split("\x1e") if r.strip()]
    med = dict(runs[0])
    for k in med:
        if k.startswith(("tokens_per_s", "step_ms")):
            med[k] = round(statistics.median(r[k] for r in runs), 3)
    med["runs"] = runs
    peers[name] = med
peers_failed = dict(l.split("\t", 1) for l in sys.argv[7].split("\n") if "\t" in l)
torch_runs = [json.loads(l) for l in sys.argv[2].splitlines() if l.strip()]
mantissa_runs = [json.loads(l) for l in sys.argv[3].splitlines() if l.strip()]
# Medians over rounds of every figure (per-round results are kept in the summary too).
torch_json = dict(torch_runs[0])
for k, v in torch_json.items():
    if k.startswith(("tokens_per_s", "step_ms")):
        torch_json[k] = round(statistics.median(r[k] for r in torch_runs), 3)
mantissa_json = json.loads(json.dumps(mantissa_runs[0]))
for name, m in mantissa_json.get("recipes", {}).items():
    for k in ("tokens_per_s", "step_ms"):
        m[k] = statistics.median(r["recipes"][name][k] for r in mantissa_runs)
    if "breakdown" in m:  # per-category medians over rounds
        for k in m["breakdown"]["ms"]:
            m["breakdown"]["ms"][k] = statistics.median(r["recipes"][name]["breakdown"]["ms"][k]
                                                        for r in mantissa_runs)
        for k in ("profiled_step_ms", "matmul_gflops", "attention_gflops", "step_gflops",
                  "matmul_fraction_of_peak", "step_fraction_of_peak"):
            m["breakdown"][k] = statistics.median(r["recipes"][name]["breakdown"][k] for r in mantissa_runs)
        total = m["breakdown"]["profiled_step_ms"]
        m["breakdown"]["share"] = {k: v / total for k, v in m["breakdown"]["ms"].items()}
if "fp32_breakdown" in mantissa_json:
    for k in mantissa_json["fp32_breakdown"]:
        mantissa_json["fp32_breakdown"][k] = statistics.median(r["fp32_breakdown"][k] for r in mantissa_runs)
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=sys.argv[5]).stdout.strip()
except OSError:
    commit = ""
rows = []
for name, m in mantissa_json.get("recipes", {}).items():
    # fp32 recipes against PyTorch fp32, every low-precision recipe against autocast bf16
    ref_key = "tokens_per_s_fp32" if "fp32" in name else "tokens_per_s_bf16"
    ref = torch_json[ref_key]
    rows.append({"mantissa": name, "mantissa_tokens_per_s": round(m["tokens_per_s"], 1),
                 "mantissa_step_ms": round(m["step_ms"], 2), "torch": ref_key[len("tokens_per_s_"):],
                 "torch_tokens_per_s": ref, "ratio": round(m["tokens_per_s"] / ref, 3),
                 "vs_torch_fp32": round(m["tokens_per_s"] / torch_json["tokens_per_s_fp32"], 3)})
    for p, pj in peers.items():  # against every peer's fp32 and bf16 and its best mode
        best = max(pj["tokens_per_s_fp32"], pj["tokens_per_s_bf16"])
        rows[-1][f"vs_{p}"] = {"fp32": round(m["tokens_per_s"] / pj["tokens_per_s_fp32"], 3),
                               "bf16": round(m["tokens_per_s"] / pj["tokens_per_s_bf16"], 3),
                               "best": round(m["tokens_per_s"] / best, 3)}
summary = {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
           "cpu": platform.processor() or platform.machine(), "blas": blas,
           "load_average": os.getloadavg()[0], "torch": torch_json, "peers": peers, "peers_failed": peers_failed, "mantissa": mantissa_json,
           "comparison": rows, "rounds": len(torch_runs),
           "per_round": {"torch": torch_runs, "mantissa": mantissa_runs},
           "targets": {"issue3_fp32_vs_torch_fp32": 1.3, "issue8_fp32_vs_torch_fp32": 1.5,
                       "issue8_bf16_amp_vs_torch_bf16": 1.5}}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(summary, f, indent=1)
os.replace(tmp, out)
t = torch_json
print(f"{'Llama' if t.get('model') == 'llama' else 'GPT'} L{t['layers']} C{t['d_model']} H{t['heads']} T{t['seq_len']} B{t['batch']}, "
      f"{t['threads']} threads, torch {t['torch_version']}, load average {summary['load_average']:.1f}")
for p, pj in peers.items():
    print(f"  PyTorch {pj['torch_version']:<12} {p:<13} fp32 {pj['tokens_per_s_fp32']:10.1f}  "
          f"autocast bf16 {pj['tokens_per_s_bf16']:10.1f} tokens/s")
for p, why in peers_failed.items():
    print(f"  PyTorch {p:<13} left out: {why}")
for r in rows:
    print(f"  mantissa {r['mantissa']:<14} {r['mantissa_tokens_per_s']:10.1f} tokens/s   "
          f"ratio vs PyTorch {r['torch']}: {r['ratio']:.2f}x   " +
          "  ".join(f"{p}: fp32 {v['fp32']:.2f}x best {v['best']:.2f}x"
                    for p, v in ((p, r[f"vs_{p}"]) for p in peers)))
b = mantissa_json.get("fp32_breakdown")
if b:
    print("  mantissa fp32 step: " + ", ".join(f"{k[:-3]} {v:.1f} ms" for k, v in b.items()))
print(f"summary: {out}")
EOF
