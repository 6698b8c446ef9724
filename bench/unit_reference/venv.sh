#!/usr/bin/env bash
# venv.sh: creates (once) the virtual environment for the unit-scaling reference runs
# (bench/unit_reference/train_ref.py) and prints its python: Graphcore's unit-scaling 0.3.5 (the
# version the goldens in tests/golden/unit_scaling follow) on top of the benchmark venv's PyTorch 2.x
# (bench/torch_venv.sh, which it creates if needed). The torch venv is seen through a .pth file, not
# modified. Nothing in the test path uses either.
#
#   bash bench/unit_reference/venv.sh     # prints .cache/venv-unit/bin/python
#   MANTISSA_UNIT_VENV=DIR MANTISSA_BENCH_VENV=DIR bash bench/unit_reference/venv.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=${MANTISSA_UNIT_VENV:-$ROOT/.cache/venv-unit}
SPEC=${MANTISSA_UNIT_SCALING:-"unit-scaling==0.3.5"}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch, unit_scaling' 2>/dev/null; then
  echo "$VENV/bin/python"; exit 0
fi
TORCH_PY=$(bash "$ROOT/bench/torch_venv.sh")
TORCH_SITE=$("$TORCH_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
python3 -m venv "$VENV" >&2
"$VENV/bin/python" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/venv-bench.pth", "w").write(sys.argv[1] + "\n")' "$TORCH_SITE"
"$VENV/bin/pip" install -q --disable-pip-version-check "$SPEC" >&2
"$VENV/bin/python" -c 'import torch, unit_scaling' >&2
echo "$VENV/bin/python"
