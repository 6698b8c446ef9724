#!/usr/bin/env bash
# build.sh DIR [extra cmake args]: configure and build mantissa into DIR.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$ROOT/build}; shift || true
cmake -S "$ROOT" -B "$DIR" -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=ON "$@" >/dev/null
cmake --build "$DIR" -j "$(nproc)" 2>&1 | grep -vE '^\[ *[0-9]+%\]|^Consolidate|^-- ' || true
test "${PIPESTATUS[0]}" -eq 0
ln -sf "$DIR/compile_commands.json" "$ROOT/compile_commands.json" 2>/dev/null || true
