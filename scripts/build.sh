#!/usr/bin/env bash
# build.sh DIR [extra cmake args]: configure and build mantissa into DIR
# (Release, warnings are errors). Progress lines are filtered; errors are not.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/build}; shift || true
cmake -S "$ROOT" -B "$DIR" -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=ON "$@" >/dev/null
set +e
cmake --build "$DIR" -j "$(nproc)" 2>&1 | grep -vE '^\[ *[0-9]+%\]|^Consolidate|^-- '
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then echo "build.sh: build in $DIR failed" >&2; exit "$rc"; fi
ln -sf "$DIR/compile_commands.json" "$ROOT/compile_commands.json" 2>/dev/null || true
