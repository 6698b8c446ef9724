#!/usr/bin/env bash
# The run command: installs dependencies, builds, and runs the main job.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
bash scripts/setup.sh
bash scripts/build.sh build
./build/mantissa formats
