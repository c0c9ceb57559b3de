#!/usr/bin/env bash
# The GPU machine's check of the engine's GPU path (issue 13, item 7): in-place verify, the forwarded copy
# sealed with the verified CRC, stream-ordered fault injection, the no-GPU ctest entry.
#   configure (Release, Ninja, sm_90, CUDA + MPI + NCCL on, torch off for speed) + build (-j16),
#   ctest -L gpu (the device tests, the staged ring, NCCL loopback; gpu_kernels_nogpu too), ctest -L unit,
#   regcheck, compute-sanitizer memcheck over the GPU test binary (16 MiB buffers), bench_kernels at 128 MiB
#   and 1 GiB (the forwarded copy: fused vs sealed), the staged allreduce against copy + MPI + copy at 2 and 4
#   ranks with and without MPS (bench_collectives -D, 1-64 MiB), then a table of steps and of the copy's
#   timings.
# Every step's log goes to ${OUT:-/tmp/out}/gpu_engine/<step>.log (tee, pipefail); at the end they are packed
# into $OUT/gpu_engine_logs.tgz, next to $OUT/summary.log and $OUT/bench_copy_table.log (few files: a
# machine that hands back a bounded number of files from $OUT still returns all of it; KEEP_LOGS=1 keeps
# the folder too). Exit status: 0 only if every step passed.
#
#   scripts/gpu_engine_check.sh      build dir: <repo>/build-engine ($RINGGUARD_GPU_BUILD_DIR overrides)
#   CUDA_ARCH=90 JOBS=16 GPU_CHECK_QUICK=1 scripts/gpu_engine_check.sh   (QUICK: no memcheck)
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${RINGGUARD_GPU_BUILD_DIR:-$repo_root/build-engine}"
out_root="${OUT:-/tmp/out}"
out_dir="$out_root/gpu_engine"
cuda_arch="${CUDA_ARCH:-90}"
jobs="${JOBS:-16}"
mkdir -p "$out_dir"

export OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export PATH="$PATH:/usr/local/cuda/bin"

# run_step, record, fail_last, write_environment, print_summary
source "$repo_root/scripts/gpu_steps.sh"
write_environment

run_step configure cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch" -DRINGGUARD_WITH_CUDA=ON -DRINGGUARD_WITH_MPI=ON \
  -DRINGGUARD_WITH_NCCL=ON -DRINGGUARD_WITH_TORCH=OFF
built=0
if run_step build cmake --build "$build_dir" --parallel "$jobs"; then built=1; fi

tests_bin="$build_dir/tests/gpu/ringguard_gpu_tests"
bench_bin="$build_dir/bench/gpu/bench_kernels"

if [[ $built -eq 1 ]]; then
  # Which GPU tests exist, for the record (a renamed or missing test shows here).
  "$tests_bin" --gtest_list_tests >"$out_dir/gpu_tests_list.log" 2>&1 || true

  run_step ctest_gpu ctest --test-dir "$build_dir" -L gpu --output-on-failure
  # On this machine a skipped GPU test means the device was not usable: that is a failure here.
  if grep -q "(Skipped)" "$out_dir/ctest_gpu.log"; then fail_last "gpu tests were SKIPPED (no usable device?)"; fi
  run_step ctest_unit ctest --test-dir "$build_dir" -L unit --output-on-failure
  run_step regcheck cmake --build "$build_dir" --target regcheck

  sanitizer="$(command -v compute-sanitizer 2>/dev/null || true)"
  if [[ -z "$sanitizer" && -x /usr/local/cuda/compute-sanitizer/compute-sanitizer ]]; then
    sanitizer=/usr/local/cuda/compute-sanitizer/compute-sanitizer
  fi
  if [[ "${GPU_CHECK_QUICK:-0}" == "1" ]]; then
    record memcheck_new SKIP "GPU_CHECK_QUICK=1"
  elif [[ -n "$sanitizer" ]]; then
    # The whole binary at 16 MiB buffers (74.6 s on the H200), but for the test of a deliberate out-of-memory
    # allocation: memcheck reports that CUDA API error as an error (docs/RELIABILITY.md, compute-sanitizer).
    run_step memcheck_new env RINGGUARD_TEST_MAX_BYTES=16777216 timeout 1200 \
      "$sanitizer" --tool memcheck --error-exitcode 99 "$tests_bin" \
      --gtest_filter='-PoolTest.DevicePoolCountsRefusedAllocations'
  else
    record memcheck_new FAIL "compute-sanitizer not found"
  fi

  run_step bench_kernels "$bench_bin" --bytes 128M,1G --iters 20 --warmup 5

  # The staged allreduce against copy + MPI + copy (issue 13's goal: >= 1.0x from 4 MiB up) at 2 and 4 ranks
  # sharing the GPU, time-sliced (the default) and under MPS (one context for the rank processes).
  staged=(env RINGGUARD_DEVICE_TRANSPORT=staged mpirun --bind-to none --timeout 240)
  staged_args=(-D -o allreduce -b 1M -e 64M -f 4 -n 5 -w 2)
  for np in 2 4; do
    run_step "staged_np$np" "${staged[@]}" -np "$np" "$build_dir/bench/bench_collectives" "${staged_args[@]}"
    if start_mps; then
      run_step "staged_np${np}_mps" "${staged[@]}" -np "$np" "$build_dir/bench/bench_collectives" "${staged_args[@]}"
      stop_mps
    else
      record "staged_np${np}_mps" FAIL "nvidia-cuda-mps-control did not start"
    fi
  done
else
  for step in ctest_gpu ctest_unit regcheck memcheck_new bench_kernels staged_np2 staged_np2_mps staged_np4 \
      staged_np4_mps; do
    record "$step" FAIL "not built"
  done
fi

# The forwarded copy's rows of bench_kernels, per size: verify only, fused (verify + copy + CRC of dst in one
# pass), sealed (this change: the verified CRC after kOk), reject (after a bad verdict).
bench_log="$out_dir/bench_kernels.log"
if [[ -s "$bench_log" ]]; then
  {
    echo
    echo "forwarded copy (bench_kernels; ms, median)"
    printf '  %-12s %10s %10s %10s %10s %s\n' SIZE VERIFY FUSED SEALED REJECT SEALED_VS_FUSED
    awk '
      /^size / { size = $2 / 1048576 " MiB" }
      /^  copy   verify/ { verify = $3 }
      /^  copy   fused/ { fused = $3 }
      /^  copy   reject/ { reject = $3 }
      /^  copy   sealed/ { sealed = $3; ratio = $0; sub(/.*copy_sealed_vs_fused=/, "", ratio); sub(/ .*/, "", ratio) }
      /^  sealed copy check \(rejected\)/ {
        printf "  %-12s %10s %10s %10s %10s %s\n", size, verify, fused, sealed, reject, ratio
      }' "$bench_log"
    grep '^summary:' "$bench_log" | tail -1 | sed 's/^/  /'
  } | tee "$out_dir/bench_copy_table.log"
fi
# The staged runs' ratios per size (ringguard_vs_mpi_staged), one line per run.
for log in "$out_dir"/staged_np*.log; do
  [[ -s "$log" ]] || continue
  printf '%-16s %s\n' "$(basename "$log" .log)" \
    "$(awk '/^ *[0-9]+ +[0-9]+ +\|/ { printf "%s:%s ", $1, $(NF-2) }' "$log")"
done | tee "$out_dir/staged_table.log"

status=0
print_summary gpu_engine_check || status=1
tar -czf "$out_root/gpu_engine_logs.tgz" -C "$out_root" gpu_engine
cp "$out_dir/summary.log" "$out_root/summary.log"
if [[ -f "$out_dir/bench_copy_table.log" ]]; then cp "$out_dir/bench_copy_table.log" "$out_root/"; fi
if [[ -s "$out_dir/staged_table.log" ]]; then cp "$out_dir/staged_table.log" "$out_root/"; fi
if [[ "${KEEP_LOGS:-0}" != "1" ]]; then rm -rf "$out_dir"; fi
echo "logs: $out_root/gpu_engine_logs.tgz (tar -xzf it: gpu_engine/<step>.log)"
exit "$status"
