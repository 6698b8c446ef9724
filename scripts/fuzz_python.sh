#!/usr/bin/env bash
# fuzz_python.sh [SECONDS]: runs the Python package's entry points under
# atheris (fuzz/python/fuzz_python.py) for SECONDS (default 10) in the venv
# that scripts/test.sh installed the package into. New inputs go to
# build-fuzz/corpus/python; a finding is left in build-fuzz/findings/ and the
# script exits non-zero. MANTISSA_FUZZ_SEED fixes the seed, as for fuzz.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_EACH=${1:-10}
VENV=$(bash "$ROOT/scripts/pyenv.sh")
"$VENV/bin/python" -c 'import mantissa' 2>/dev/null || { echo "fuzz_python.sh: mantissa is not installed in $VENV (scripts/test.sh installs it)" >&2; exit 1; }
DIR=${MANTISSA_FUZZ_BUILD:-$ROOT/build-fuzz}
mkdir -p "$DIR/corpus/python" "$DIR/findings"
SEED_FLAG=()
if [[ -n "${MANTISSA_FUZZ_SEED:-}" ]]; then SEED_FLAG=(-seed="$MANTISSA_FUZZ_SEED"); fi
log="$DIR/python.log"
if OMP_NUM_THREADS=1 "$VENV/bin/python" "$ROOT/fuzz/python/fuzz_python.py" "$DIR/corpus/python" \
     -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=3072 "${SEED_FLAG[@]}" \
     -artifact_prefix="$DIR/findings/python-" >"$log" 2>&1; then
  echo "fuzz python: $(grep -o 'Done [0-9]* runs' "$log" | grep -o '[0-9]*' | head -1) executions in $SECONDS_EACH s, no findings"
else
  echo "fuzz python: FINDING (log: $log)"
  grep -E 'Error|Traceback|==ERROR|SUMMARY' "$log" | head -5
  exit 1
fi
