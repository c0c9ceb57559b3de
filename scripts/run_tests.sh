#!/usr/bin/env bash
# The whole test suite (README): dependencies, build, every ctest label (tests that need a GPU report
# "skipped" on machines without one), then the CUDA register check when the build has it.
# Exits non-zero on any failure. Build directory: <repo>/build (override with $RINGGUARD_BUILD_DIR).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${RINGGUARD_BUILD_DIR:-build}"

# CI and the GPU machine run as root; the MPI tests oversubscribe small machines.
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

bash scripts/install_deps.sh
bash scripts/build.sh "$build_dir"

status=0
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error || status=$?

# `regcheck` exists only when CUDA is on. (Not `ninja ... | grep -q`: with pipefail, grep's early exit can
# fail the pipeline through SIGPIPE.)
targets="$(ninja -C "$build_dir" -t targets all 2>/dev/null || true)"
if grep -q '^regcheck:' <<<"$targets"; then
  cmake --build "$build_dir" --target regcheck || status=$?
fi

if [[ $status -ne 0 ]]; then
  echo "run_tests: FAILED (exit $status)" >&2
else
  echo "run_tests: all passed"
fi
exit "$status"
