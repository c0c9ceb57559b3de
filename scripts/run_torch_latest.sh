#!/usr/bin/env bash
# The Python package on the newest torch, beside the pinned one (scripts/run_extended_tests.sh, which CI
# runs after the README's test command): a venv of our own with torch $TORCH_LATEST_VERSION from PyPI, the
# package built against it (ringguard._C into that venv, in a build directory of its own) and tests/python
# run with the venv's Python. Prints the seconds each phase took. Exits non-zero on any failure.
#
# PyPI has no CPU-only torch wheel for Linux x86_64: the wheel is the CUDA one and pulls the nvidia-*,
# cuda-toolkit and triton wheels (several GB; see docs/TORCH.md for what that costs). The venv lives in the
# user's cache, outside the work tree, so later runs on the same machine reuse it (and pip's cache) instead
# of downloading again; a venv whose torch is not $TORCH_LATEST_VERSION is rebuilt.
#
#   RINGGUARD_TORCH_LATEST_VENV   the venv (default ~/.cache/ringguard/venv-torch-$TORCH_LATEST_VERSION)
#   RINGGUARD_TORCH_LATEST_BUILD  the extension's build directory (default build-python-torch-<version>)
#   RINGGUARD_TORCH_LATEST_TESTS  pytest arguments (default: the version-sensitive subset below; "tests/python"
#                                 runs the whole suite)
#   RINGGUARD_SKIP_TORCH_LATEST=1 skips this script
set -euo pipefail

# The newest torch on PyPI when this was last checked; bump it to test a newer release.
TORCH_LATEST_VERSION="${RINGGUARD_TORCH_LATEST_VERSION:-2.15.0}"

if [[ "${RINGGUARD_SKIP_TORCH_LATEST:-0}" == "1" ]]; then
  echo "run_torch_latest: skipped (RINGGUARD_SKIP_TORCH_LATEST=1)"
  exit 0
fi

# The venv's Python must see only the venv's packages (a PYTHONPATH may hold a ringguard built for another torch).
unset PYTHONPATH
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
venv="${RINGGUARD_TORCH_LATEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/ringguard/venv-torch-$TORCH_LATEST_VERSION}"
build_dir="${RINGGUARD_TORCH_LATEST_BUILD:-$repo_root/build-python-torch-$TORCH_LATEST_VERSION}"
py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check)

phase_start=$SECONDS
phase() {  # prints how long the phase that just ended took
  echo "run_torch_latest: $1 took $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}

venv_ok() {
  [[ -x "$py" ]] && "$py" - "$TORCH_LATEST_VERSION" <<'PY' >/dev/null 2>&1
import sys, importlib.metadata as md
import torch, pytest, numpy, scikit_build_core  # noqa: F401
sys.exit(0 if torch.__version__.split("+")[0] == sys.argv[1] else 1)
PY
}

if venv_ok; then
  echo "run_torch_latest: reusing $venv (torch $TORCH_LATEST_VERSION)"
else
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "${pip[@]}" install -q "torch==$TORCH_LATEST_VERSION" "scikit-build-core>=0.10" pytest numpy
  venv_ok || { echo "run_torch_latest: the venv at $venv has no working torch $TORCH_LATEST_VERSION" >&2; exit 1; }
  echo "run_torch_latest: venv $venv: $(du -sh "$venv" | cut -f1) installed"
fi
phase "venv (download + install)"

pip_log="$(mktemp -t ringguard-pip-torch-latest.XXXXXX.log)"
if ! "${pip[@]}" install --no-build-isolation --no-deps -v . --config-settings=build-dir="$build_dir" \
    >"$pip_log" 2>&1; then
  tail -n 200 "$pip_log" >&2
  echo "run_torch_latest: building ringguard against torch $TORCH_LATEST_VERSION FAILED (log tail above)" >&2
  rm -f "$pip_log"
  exit 1
fi
rm -f "$pip_log"
phase "build + install of ringguard against torch $TORCH_LATEST_VERSION"

# shellcheck disable=SC2206  # word splitting of the override is intended
# Default: the tests of what differs between torch generations (the renamed Backend virtuals and the
# coalescing fast path, barrier/monitored_barrier whose Python entry points changed, Future callbacks in DDP
# hooks). The whole suite has not been run on 2.15 yet: its cost is not measured, so CI does not pay it blind.
default_tests="tests/python/test_torch_names.py tests/python/test_barriers.py"
default_tests+=" tests/python/test_ddp.py::test_hook_case tests/python/test_ddp.py::test_hook_launch"
tests=(${RINGGUARD_TORCH_LATEST_TESTS:-$default_tests})
status=0
"$py" -m pytest "${tests[@]}" -q -p no:cacheprovider || status=$?
phase "pytest ${tests[*]} on torch $TORCH_LATEST_VERSION"
exit "$status"
