#!/usr/bin/env bash
# The test command: installs dependencies, builds twice (Release, and
# AddressSanitizer+UBSan), and runs the whole test suite in both.
# Exhaustive tests (all 2^32 fp32 inputs) run on demand: ctest -L exhaustive.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
bash scripts/pyenv.sh >/dev/null
bash scripts/data.sh >/dev/null   # real Fashion-MNIST / corpus checks need the data
JOBS=$(nproc)
echo "== Release build"
bash scripts/build.sh build
(cd build && ctest --output-on-failure -j "$JOBS" -LE exhaustive)
echo "== AddressSanitizer + UBSan build"
bash scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMANTISSA_SANITIZE=ON -DMANTISSA_BUILD_BENCH=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$JOBS" -LE "exhaustive|oracle|slow")
