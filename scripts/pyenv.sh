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
# Debian's python3-torch (scripts/setup.sh) seen from the venv, without the rest
# of Debian's packages, when the Python versions match (mantissa.torch's tests).
DT=/usr/lib/python3/dist-packages
PYV='import sys; print(sys.version_info[:2])'
if [[ ! -e $VENV/debian-torch && -d $DT/torch && $("$VENV/bin/python" -c "$PYV") == $(/usr/bin/python3 -c "$PYV" 2>/dev/null) ]]; then
  mkdir -p "$VENV/debian-torch"
  ln -sfn "$DT/torch" "$DT/typing_extensions.py" "$VENV/debian-torch/"
  "$VENV/bin/python" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/debian-torch.pth", "w").write(sys.argv[1] + "\n")' "$VENV/debian-torch"
fi
echo "$VENV"
