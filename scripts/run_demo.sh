#!/usr/bin/env bash
# The main job (README): a 4-rank mpirun of CRC32-verified AllReduces with fault injection on.
# Arguments are passed to the demo (build/examples/verified_allreduce_demo --help lists them).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# Also works as root (CI, the GPU machine).
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

bash scripts/install_deps.sh
bash scripts/build.sh build

exec mpirun -np 4 --oversubscribe --bind-to none build/examples/verified_allreduce_demo "$@"
