#!/usr/bin/env bash
# The main job (README): data-parallel training of a small MLP over 4 MPI ranks (train_mlp), gradients
# aggregated with CRC32-verified AllReduces and fault injection on. It prints a progress line every 100
# steps and ends with `final: ranks=4 ... params_identical=yes detected=<d> retransmitted=<r>`.
# Arguments go to train_mlp (--help lists them). Without torch (no libtorch found) it runs the verified
# AllReduce demo (verified_allreduce_demo) instead.
#
# It builds only what it runs, in a build directory of its own (build-demo/): host layers, MPI and the torch
# aggregator, no tests, benchmarks or CUDA kernels (about 2 minutes of a 2-core machine's time on a fresh
# clone). `--device cuda` or `--device auto` needs the CUDA layer: then it builds train_mlp in build/, the
# test command's directory, with every layer. scripts/run_tests.sh builds the rest; both compile through
# ccache, so what the demo compiled is not compiled again.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# Also works as root (CI, the GPU machine). One compute thread per rank: the ranks share the cores.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMP_NUM_THREADS=1

bash scripts/install_deps.sh

wants_cuda=0
prev=""
for arg in "$@"; do
  case "$prev $arg" in
    "--device cuda" | "--device auto" | *" --device=cuda" | *" --device=auto") wants_cuda=1 ;;
  esac
  prev="$arg"
done
build_dir=build-demo
if [[ $wants_cuda == 1 ]]; then
  build_dir=build
  bash scripts/build.sh "$build_dir" train_mlp
else
  RINGGUARD_CMAKE_ARGS="-DRINGGUARD_WITH_CUDA=OFF -DRINGGUARD_BUILD_TESTS=OFF -DRINGGUARD_BUILD_BENCH=OFF ${RINGGUARD_CMAKE_ARGS:-}" \
    bash scripts/build.sh "$build_dir" train_mlp
fi

if [[ -x $build_dir/examples/train_mlp ]]; then
  exec mpirun -np 4 --oversubscribe --bind-to none "$build_dir/examples/train_mlp" "$@"
fi
echo "run_demo: built without torch; running the verified AllReduce demo instead"
bash scripts/build.sh "$build_dir" verified_allreduce_demo
exec mpirun -np 4 --oversubscribe --bind-to none "$build_dir/examples/verified_allreduce_demo" "$@"
