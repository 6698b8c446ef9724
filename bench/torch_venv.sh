#!/usr/bin/env bash
# torch_venv.sh: creates (once) the benchmark-only virtual environment holding PyTorch 2.x from
# PyPI (the release a user installs today) and torchao (its MX / NVFP4 reference quantisers, which
# run on the CPU) and prints its python. Kept apart from the test
# oracles' venv (scripts/pyenv.sh): nothing in the test path imports it.
#
#   bash bench/torch_venv.sh            # prints .cache/venv-bench/bin/python
#   MANTISSA_BENCH_VENV=DIR bash bench/torch_venv.sh
#
# PyPI's Linux x86-64 wheel bundles the CUDA libraries (several GB installed); it runs on CPU.
# The script checks the free space first and refuses with a clear message below 12 GB.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${MANTISSA_BENCH_VENV:-$ROOT/.cache/venv-bench}
SPEC=${MANTISSA_BENCH_TORCH:-"torch>=2,<3"}
AO_SPEC=${MANTISSA_BENCH_TORCHAO:-torchao}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import torch, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
  # torchao depends on nothing but torch: added to an existing venv without touching its torch
  "$VENV/bin/python" -c 'import torchao' 2>/dev/null ||
    "$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps "$AO_SPEC" >&2
  echo "$VENV/bin/python"; exit 0
fi
mkdir -p "$(dirname "$VENV")"
FREE_KB=$(df -Pk "$(dirname "$VENV")" | awk 'NR==2 {print $4}')
if [ "$FREE_KB" -lt $((12 * 1024 * 1024)) ]; then
  echo "torch_venv.sh: only $((FREE_KB / 1024 / 1024)) GB free under $(dirname "$VENV"); PyTorch from PyPI needs about 12 GB" >&2
  exit 2
fi
python3 -m venv "$VENV" >&2
"$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir "$SPEC" numpy >&2
"$VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps "$AO_SPEC" >&2
echo "$VENV/bin/python"
