#!/usr/bin/env bash
# The whole test suite (README): dependencies, build, every ctest label (tests that need a GPU report
# "skipped" on machines without one), then the CUDA register check when the build has it, the host layers
# under ASan + UBSan and TSan (scripts/run_sanitizers.sh), then the Python package (pip install
# --no-build-isolation .) and its pytest suite, tests/python.
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
source scripts/compiler_cache.sh  # the pip build and the sanitizer builds below compile through ccache too
bash scripts/build.sh "$build_dir"

status=0
ctest --test-dir "$build_dir" --output-on-failure --no-tests=error || status=$?

# `regcheck` exists only when CUDA is on. (Not `ninja ... | grep -q`: with pipefail, grep's early exit can
# fail the pipeline through SIGPIPE.)
targets="$(ninja -C "$build_dir" -t targets all 2>/dev/null || true)"
if grep -q '^regcheck:' <<<"$targets"; then
  cmake --build "$build_dir" --target regcheck || status=$?
fi

# The host layers again under ASan + UBSan (unit and mpirun suites) and TSan (the loopback suites and the
# communicator), each in a build of its own under build-sanitizers/ (docs/RELIABILITY.md, "Sanitizers in
# CI"). RINGGUARD_SKIP_SANITIZERS=1 skips them (a quick local run; CI never sets it).
if [[ "${RINGGUARD_SKIP_SANITIZERS:-0}" != "1" ]]; then
  bash scripts/run_sanitizers.sh all || status=$?
fi

# The torch.distributed backend: build and install the Python package (ringguard._C is compiled against the
# installed torch, hence --no-build-isolation; incremental in build/python-*), then tests/python (one
# torchrun launch per module and world size, each under a wall-clock limit: see tests/python/harness.py).
if python3 -c "import torch" >/dev/null 2>&1; then
  pip_log="$(mktemp -t ringguard-pip-install.XXXXXX.log)"
  if python3 -m pip install --no-build-isolation --disable-pip-version-check -v . >"$pip_log" 2>&1; then
    echo "run_tests: installed the ringguard Python package"
    python3 -m pytest tests/python -q -p no:cacheprovider || status=$?
  else
    tail -n 200 "$pip_log" >&2
    echo "run_tests: pip install --no-build-isolation . FAILED (last 200 lines of its log above)" >&2
    status=1
  fi
  rm -f "$pip_log"
else
  echo "run_tests: python3 has no torch: tests/python not run"
fi

# The Python package on the newest torch too, in a venv of its own (docs/TORCH.md, "Tests and benchmark").
bash scripts/run_torch_latest.sh || status=$?

if [[ $status -ne 0 ]]; then
  echo "run_tests: FAILED (exit $status)" >&2
else
  echo "run_tests: all passed"
fi
exit "$status"
