#!/usr/bin/env bash
# build.sh DIR [extra cmake args]: configure and build mantissa into DIR
# (Release, warnings are errors). Progress lines are filtered; errors are not.
# MANTISSA_BUILD_TARGETS (space-separated CMake targets) builds only those,
# e.g. the command-line program alone for a run; default: everything.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/build}; shift || true
# ccache (when installed) lets several build directories share compiled objects.
LAUNCHER=()
if command -v ccache >/dev/null; then LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache); fi
cmake -S "$ROOT" -B "$DIR" -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=ON "${LAUNCHER[@]}" "$@" >/dev/null
set +e
TARGETS=()
for t in ${MANTISSA_BUILD_TARGETS:-}; do TARGETS+=(--target "$t"); done
cmake --build "$DIR" -j "$(nproc)" "${TARGETS[@]}" 2>&1 | grep -vE '^\[ *[0-9]+%\]|^Consolidate|^-- '
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then echo "build.sh: build in $DIR failed" >&2; exit "$rc"; fi
ln -sf "$DIR/compile_commands.json" "$ROOT/compile_commands.json" 2>/dev/null || true
