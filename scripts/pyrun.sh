#!/usr/bin/env bash
# pyrun.sh SCRIPT [args]: runs a Python oracle inside the project's venv.
set -euo pipefail
VENV=$(bash "$(dirname "$0")/pyenv.sh")
exec "$VENV/bin/python" "$@"
