#!/usr/bin/env bash
# The run command: installs dependencies, builds, fetches the default data
# (Jane Austen's novels from Debian's r-cran-janeaustenr, Fashion-MNIST from
# dataset-fashion-mnist) and runs the recipe study
# `mantissa experiment --preset quick` (about 2 minutes on 2 idle cores): the same
# GPT trained under every recipe, plus a Fashion-MNIST MLP, then a report with
# tables and figures. Extra arguments go to `mantissa experiment`
# (e.g. --preset paper, --recipes fp32,bf16-amp,unit-fp8, --resume).
# MANTISSA_OUT sets the report directory (default <repo>/report).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
# Only the program the study runs: the test command builds the tests.
MANTISSA_BUILD_TARGETS=mantissa_cli bash scripts/build.sh build
bash scripts/data.sh >/dev/null
OUT=${MANTISSA_OUT:-$ROOT/report}
start=$(date +%s)
status=0
./build/mantissa experiment --preset quick --threads "$(nproc)" --out "$OUT" "$@" || status=$?
echo "run: study took $(($(date +%s) - start)) s"
if [[ -f $OUT/report.md ]]; then
  echo "run: report in $OUT/report.md and $OUT/report.html (figures in $OUT/figures, per-run metrics in $OUT/runs)"
fi
if [[ $status -eq 130 ]]; then
  echo "run: interrupted; finished runs are kept: rerun with --resume to complete the study"
fi
exit "$status"
