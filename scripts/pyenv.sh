#!/usr/bin/env bash
# Creates (once) the virtual environment holding the Python test oracles and
# peer benchmarks, and prints its path. Only oracles come from pip.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${MANTISSA_VENV:-$ROOT/.cache/venv}
REQ=$ROOT/scripts/requirements-oracles.txt
STAMP=$VENV/.stamp
if [[ ! -f $STAMP ]] || ! cmp -s "$REQ" "$STAMP"; then
  python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQ" >&2
  cp "$REQ" "$STAMP"
fi
echo "$VENV"
