#!/usr/bin/env bash
# mpirun for this machine: loopback only, more ranks than cores allowed, and
# as root in a container (Open MPI refuses root unless told). Usage:
#   bash scripts/mpirun-local.sh -np 2 ./build/mantissa train ...
set -euo pipefail
ARGS=(--oversubscribe
      --mca btl self,vader,tcp --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo
      --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && ARGS+=(--allow-run-as-root)
exec mpirun "${ARGS[@]}" "$@"
