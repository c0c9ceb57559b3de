#!/usr/bin/env bash
# The GPU machine's check of the CUDA layer, in one go:
#   configure (Ninja, sm_90) + build, ctest -L gpu, regcheck, compute-sanitizer memcheck and racecheck over
#   ringguard_gpu_tests (16 MiB buffers), bench_kernels, and the torch isfinite baseline when torch exists.
# Every step is logged to ${OUT:-/tmp/out}/<step>.log; a failing step does not stop the later ones, and a
# PASS/FAIL table closes the run. Exit status: 0 only if every step passed.
#
#   scripts/gpu_check.sh            build dir: <repo>/build-gpu ($RINGGUARD_GPU_BUILD_DIR overrides)
#   CUDA_ARCH=90 JOBS=16 scripts/gpu_check.sh
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${RINGGUARD_GPU_BUILD_DIR:-$repo_root/build-gpu}"
out_dir="${OUT:-/tmp/out}"
cuda_arch="${CUDA_ARCH:-90}"
jobs="${JOBS:-16}"
mkdir -p "$out_dir"

# That machine runs as root; mpirun refuses to without these (the GPU tests do not use MPI, the build may).
export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH="$PATH:/usr/local/cuda/bin"

# run_step, record, fail_last, write_environment, print_summary
source "$repo_root/scripts/gpu_steps.sh"
write_environment

run_step configure cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" -DRINGGUARD_WITH_CUDA=ON
built=0
if run_step build cmake --build "$build_dir" --parallel "$jobs"; then built=1; fi

tests_bin="$build_dir/tests/gpu/ringguard_gpu_tests"
bench_bin="$build_dir/bench/gpu/bench_kernels"

if [[ $built -eq 1 ]]; then
  run_step ctest_gpu ctest --test-dir "$build_dir" -L gpu --output-on-failure
  # On this machine a skipped GPU test means the device was not usable: that is a failure here.
  if grep -q "(Skipped)" "$out_dir/ctest_gpu.log"; then fail_last "gpu tests were SKIPPED (no usable device?)"; fi

  run_step regcheck cmake --build "$build_dir" --target regcheck

  sanitizer="$(command -v compute-sanitizer 2>/dev/null || true)"
  if [[ -z "$sanitizer" && -x /usr/local/cuda/compute-sanitizer/compute-sanitizer ]]; then
    sanitizer=/usr/local/cuda/compute-sanitizer/compute-sanitizer
  fi
  if [[ -n "$sanitizer" && "${GPU_CHECK_QUICK:-0}" == "1" ]]; then
    record memcheck SKIP "GPU_CHECK_QUICK=1"
    record racecheck SKIP "GPU_CHECK_QUICK=1"
  elif [[ -n "$sanitizer" ]]; then
    run_step memcheck env RINGGUARD_TEST_MAX_BYTES=16777216 timeout 1800 \
      "$sanitizer" --tool memcheck --error-exitcode 99 "$tests_bin"
    # racecheck watches shared memory only: the kernel tests are what matters there.
    run_step racecheck env RINGGUARD_TEST_MAX_BYTES=16777216 timeout 1800 \
      "$sanitizer" --tool racecheck --error-exitcode 99 "$tests_bin" \
      --gtest_filter='Crc32*:NanScan*:AllFloatTypes/*'
  else
    record memcheck FAIL "compute-sanitizer not found"
    record racecheck FAIL "compute-sanitizer not found"
  fi

  torch_ms=""
  if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
    if run_step isfinite_torch python3 "$repo_root/bench/gpu/isfinite_torch.py"; then
      torch_ms="$(sed -n 's/^torch_isfinite_ms=//p' "$out_dir/isfinite_torch.log" | tail -1)"
    fi
  else
    record isfinite_torch SKIP "python3 has no CUDA torch"
  fi

  bench_args=(--bytes 1G --iters 20 --warmup 5)
  if [[ -n "$torch_ms" ]]; then bench_args+=(--torch-isfinite-ms "$torch_ms"); fi
  if run_step bench_kernels "$bench_bin" "${bench_args[@]}"; then
    summary="$(grep '^summary:' "$out_dir/bench_kernels.log" | tail -1)"
    crc_ratio="$(sed -n 's/.*crc_vs_copy=\([0-9.]*\).*/\1/p' <<<"$summary")"
    scan_ratio="$(sed -n 's/.*nanscan_vs_copy=\([0-9.]*\).*/\1/p' <<<"$summary")"
    if awk -v r="$crc_ratio" 'BEGIN { exit !(r >= 0.80) }'; then
      record goal_crc PASS "crc_vs_copy=$crc_ratio (>= 0.80)"
    else
      record goal_crc FAIL "crc_vs_copy=$crc_ratio (< 0.80)"
    fi
    if awk -v r="$scan_ratio" 'BEGIN { exit !(r >= 0.90) }'; then
      record goal_nanscan PASS "nanscan_vs_copy=$scan_ratio (>= 0.90)"
    else
      record goal_nanscan FAIL "nanscan_vs_copy=$scan_ratio (< 0.90)"
    fi
    if [[ -n "$torch_ms" ]]; then
      speedup="$(sed -n 's/.* is \([0-9.]*\)x faster.*/\1/p' "$out_dir/bench_kernels.log" | tail -1)"
      if awk -v s="$speedup" 'BEGIN { exit !(s >= 5.0) }'; then
        record goal_vs_torch PASS "nanscan f32 ${speedup}x faster than torch isfinite().all() (${torch_ms} ms)"
      else
        record goal_vs_torch FAIL "nanscan f32 only ${speedup}x faster than torch (${torch_ms} ms)"
      fi
    fi
  fi

  # The verified ring on device memory: compute-sanitizer over a 2-rank staged run (small sizes), then
  # bench_allreduce -D with 2, 3 and 4 ranks sharing the GPU (the staged defaults: 4 MiB slices, 4 slots)
  # against copy + MPI_Allreduce + copy back.
  ring_bin="$build_dir/tests/gpu/ringguard_gpu_ring_tests"
  allreduce_bin="$build_dir/bench/bench_allreduce"
  mpirun_args=(--oversubscribe --bind-to none --timeout 600)
  if [[ -n "$sanitizer" && -x "$ring_bin" ]]; then
    run_step ring_memcheck env RINGGUARD_DEVICE_TRANSPORT=staged mpirun "${mpirun_args[@]}" -np 2 \
      "$sanitizer" --tool memcheck --error-exitcode 99 "$ring_bin" \
      --gtest_filter='AllModes/DeviceRingFaults.*/bitflip:AllModes/DeviceRingFaults.*/trailer:DeviceRing.Capturing*'
  fi
  if [[ -x "$allreduce_bin" ]]; then
    for np in 2 3 4; do
      run_step "bench_staged_np$np" env RINGGUARD_DEVICE_TRANSPORT=staged timeout 300 mpirun "${mpirun_args[@]}" \
        -np "$np" "$allreduce_bin" -D -b 1M -e 256M -f 4 -n 5 -w 2
    done
    # The earlier defaults (1 MiB slices, 2 slots), for comparison with the staged transport's own.
    for np in 2 4; do
      run_step "bench_staged_np${np}_s1M_w2" env RINGGUARD_DEVICE_TRANSPORT=staged RINGGUARD_SLOTS=2 timeout 300 \
        mpirun "${mpirun_args[@]}" -np "$np" "$allreduce_bin" -D -b 16M -e 256M -f 4 -n 5 -w 2 -s 1048576
    done
    run_step bench_host_np2 timeout 300 mpirun "${mpirun_args[@]}" -np 2 "$allreduce_bin" -b 1M -e 64M -f 4 -n 10 -w 3
  fi
else
  for step in ctest_gpu regcheck memcheck racecheck bench_kernels; do record "$step" FAIL "not built"; done
fi

print_summary gpu_check
