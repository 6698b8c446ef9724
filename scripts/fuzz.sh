#!/usr/bin/env bash
# fuzz.sh [SECONDS] [TARGET...]: builds the libFuzzer targets of fuzz/ with
# clang (AddressSanitizer + UBSan; fuzz/CMakeLists.txt says which sources are
# instrumented) into build-fuzz and runs each for SECONDS (default 10) from
# its seed corpus in fuzz/corpus/<target>. Exits non-zero
# on the first finding (crash, sanitizer report, leak, timeout, escaped
# exception); the input that caused it is left in build-fuzz/findings/.
# New inputs found along the way go to build-fuzz/corpus/<target>, not into
# the repository. Prints executions per target. MANTISSA_FUZZ_SEED fixes
# libFuzzer's random seed (the test command sets it, so its short run walks
# the same inputs every time and a finding reproduces); unset, each run
# explores afresh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_EACH=${1:-10}; shift || true
DIR=${MANTISSA_FUZZ_BUILD:-$ROOT/build-fuzz}
# The uninstrumented rest of the library comes from the Release build.
bash "$ROOT/scripts/build.sh" "$ROOT/build" >/dev/null
LAUNCHER=()
if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$ROOT/fuzz" -B "$DIR" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -gline-tables-only" \
  -DMANTISSA_LIBRARY="$ROOT/build/libmantissa.a" "${LAUNCHER[@]}" >/dev/null
TARGETS=("$@")
if ((${#TARGETS[@]} == 0)); then
  for f in "$ROOT"/fuzz/fuzz_*.cpp; do TARGETS+=("$(basename "$f" .cpp)"); done
fi
cmake --build "$DIR" -j "$(nproc)" --target "${TARGETS[@]}" 2>&1 | grep -vE '^\[ *[0-9]+%\]|^Consolidate|^-- ' || true
for t in "${TARGETS[@]}"; do [[ -x "$DIR/$t" ]] || { echo "fuzz.sh: $t did not build" >&2; exit 1; }; done
mkdir -p "$DIR/findings"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
SEED_FLAG=()
if [[ -n "${MANTISSA_FUZZ_SEED:-}" ]]; then SEED_FLAG=(-seed="$MANTISSA_FUZZ_SEED"); fi
status=0
for t in "${TARGETS[@]}"; do
  work="$DIR/corpus/$t"
  mkdir -p "$work"
  log="$DIR/$t.log"
  if "$DIR/$t" "$work" "$ROOT/fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=3072 \
       -max_len=65536 "${SEED_FLAG[@]}" -print_final_stats=1 -artifact_prefix="$DIR/findings/$t-" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz $t: $runs executions in ${SECONDS_EACH} s, no findings"
  else
    echo "fuzz $t: FINDING (log: $log)" >&2
    grep -E 'ERROR|runtime error|terminate|SUMMARY|Test unit written' "$log" | head -n 8 >&2
    status=1
  fi
done
exit $status
