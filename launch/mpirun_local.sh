#!/usr/bin/env bash
# Runs an MPI program on this machine: launch/mpirun_local.sh NP BINARY [ARGS...]
# Oversubscribes (NP may exceed the cores), no core binding, allowed as root, and killed after
# $RINGGUARD_MPIRUN_TIMEOUT seconds (default 600). $MPIRUN overrides the launcher (default: mpirun).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 NP BINARY [ARGS...]" >&2
  exit 2
fi
np="$1"
binary="$2"
shift 2
if ! [[ "$np" =~ ^[1-9][0-9]*$ ]]; then
  echo "mpirun_local: NP must be a positive integer, got '$np'" >&2
  exit 2
fi
timeout_s="${RINGGUARD_MPIRUN_TIMEOUT:-600}"

export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

exec "${MPIRUN:-mpirun}" -np "$np" --oversubscribe --bind-to none --timeout "$timeout_s" "$binary" "$@"
