#!/usr/bin/env bash
# The GPU machine's check of the NaN/Inf guard (docs/GUARD.md), in one go: build the unit and GPU test
# binaries, run the guard's unit tests, its GPU tests (and once more under compute-sanitizer, small sizes),
# the regcheck of the kernels, then the Python package (pip install), the guard's pytest cases (CUDA ones
# included) and the benchmark (bench/torch/bench_guard.py). Logs under ${OUT:-/tmp/out}; a PASS/FAIL line
# per step at the end; exit 0 only if every step passed.
#
#   scripts/gpu_guard_check.sh               build dir: <repo>/build-gpu-guard ($RINGGUARD_GPU_BUILD_DIR overrides)
#   GUARD_STEPS="build gtest" ...            only the named steps (configure build gtest sanitizer regcheck
#                                            pip pytest bench); the default is all of them, in that order
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${RINGGUARD_GPU_BUILD_DIR:-$repo_root/build-gpu-guard}"
out_dir="${OUT:-/tmp/out}"
mkdir -p "$out_dir"
export PATH="$PATH:/usr/local/cuda/bin" NCCL_NVLS_ENABLE=0 CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-16}"
steps="${GUARD_STEPS:-configure build gtest sanitizer regcheck pip pytest bench}"
results=()
want() { [[ " $steps " == *" $1 "* ]]; }
step() {
  local name="$1"; shift
  want "$name" || return 0
  echo "=== [$name] $*" | tee "$out_dir/guard_$name.log"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$out_dir/guard_$name.log"
  local rc=${PIPESTATUS[0]}
  results+=("$name: $([[ $rc -eq 0 ]] && echo PASS || echo "FAIL (exit $rc)") $((SECONDS - start))s")
}

{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())'; git log -1 --oneline; } \
  >"$out_dir/guard_environment.log" 2>&1
# The C++ side needs no torch: the guard layer, the CUDA layer and the two test binaries.
step configure cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DRINGGUARD_WITH_TORCH=OFF
step build cmake --build "$build_dir" --target ringguard_unit_tests ringguard_gpu_tests
step gtest bash -c "'$build_dir/tests/ringguard_unit_tests' --gtest_filter='Guard*' && \
  '$build_dir/tests/gpu/ringguard_gpu_tests' --gtest_filter='*Guard*'"
step sanitizer compute-sanitizer --error-exitcode 1 "$build_dir/tests/gpu/ringguard_gpu_tests" \
  --gtest_filter='GuardDevice.*'
step regcheck cmake --build "$build_dir" --target regcheck
# The Python extension against the machine's torch (offline: no build isolation, no dependencies).
step pip python3 -m pip install --no-build-isolation --no-deps -v . \
  --config-settings=build-dir="$build_dir-python"
step pytest python3 -m pytest tests/python/test_guard.py -v -rs
step bench python3 bench/torch/bench_guard.py --json "$out_dir/bench_guard.json"

echo
echo "== gpu_guard_check summary ($(date -u +%FT%TZ)) =="
failed=0
for r in "${results[@]}"; do
  echo "  $r"
  [[ "$r" == *FAIL* ]] && failed=1
done
exit "$failed"
