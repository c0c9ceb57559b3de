#!/usr/bin/env bash
# The README's test command: every suite a change can break, on the pinned torch.
#   1. dependencies (scripts/install_deps.sh) and the build of every target (build/; tests, benchmarks and
#      examples, the CUDA kernels when nvcc is there);
#   2. ctest over every label: unit (the loopback suites and the fuzz corpora replayed), mpi (real mpirun),
#      torch (the aggregator under mpirun), install, bench smoke runs; tests that need a GPU report
#      "skipped" without one; then the CUDA register check when the build has it;
#   3. the Python package (pip install --no-build-isolation .) and its pytest suite, tests/python.
# About 20 minutes on a fresh 2-core machine after the main job (scripts/run_demo.sh); a second run
# recompiles only what changed (ccache). Each stage prints how long it took.
# The sanitizer builds and the newest torch run in CI after this (scripts/run_extended_tests.sh, .ci/run).
# Exits non-zero on any failure. Build directory: <repo>/build (override with $RINGGUARD_BUILD_DIR).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${RINGGUARD_BUILD_DIR:-build}"

# CI and the GPU machine run as root; the MPI tests oversubscribe small machines.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

stage_start=$SECONDS
stage() {  # prints how long the stage that just ended took
  echo "run_tests: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}

bash scripts/install_deps.sh
source scripts/compiler_cache.sh  # the pip build below compiles through ccache too
bash scripts/build.sh "$build_dir"
stage "install + build"

status=0
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error || status=$?

# `regcheck` exists only when CUDA is on. (Not `ninja ... | grep -q`: with pipefail, grep's early exit can
# fail the pipeline through SIGPIPE.)
targets="$(ninja -C "$build_dir" -t targets all 2>/dev/null || true)"
if grep -q '^regcheck:' <<<"$targets"; then
  cmake --build "$build_dir" --target regcheck || status=$?
fi
stage "ctest + regcheck"

# The torch.distributed backend: build and install the Python package (ringguard._C is compiled against the
# installed torch, hence --no-build-isolation; incremental in build-python-*), then tests/python (one
# torchrun launch per module and world size, each under a wall-clock limit: see tests/python/harness.py).
if python3 -c "import torch" >/dev/null 2>&1; then
  pip_log="$(mktemp -t ringguard-pip-install.XXXXXX.log)"
  if python3 -m pip install --no-build-isolation --disable-pip-version-check -v . >"$pip_log" 2>&1; then
    echo "run_tests: installed the ringguard Python package"
    stage "pip install"
    python3 -m pytest tests/python -q -p no:cacheprovider || status=$?
    stage "pytest"
  else
    tail -n 200 "$pip_log" >&2
    echo "run_tests: pip install --no-build-isolation . FAILED (last 200 lines of its log above)" >&2
    status=1
  fi
  rm -f "$pip_log"
else
  echo "run_tests: python3 has no torch: tests/python not run"
fi

if [[ $status -ne 0 ]]; then
  echo "run_tests: FAILED (exit $status)" >&2
else
  echo "run_tests: all passed"
fi
exit "$status"
