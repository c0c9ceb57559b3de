#!/usr/bin/env bash
# The GPU machine's check of the one-sided path (issue 42): the peer windows, the one-shot and two-shot
# verified allreduce, all-gather, broadcast, reduce-scatter, all-to-all and send/recv at 2, 3 and 4 ranks on the
# one GPU under MPS (tests/gpu/test_peer_allreduce.cc, test_peer_collectives.cc, test_peer_sendrecv.cc,
# test_peer_watchdog.cc, test_peer_routing.cc: exact results, faults, CUDA graph, mismatch, stopped peer,
# abort, what auto and peer route), once time-sliced without MPS at 2 ranks (correctness only), then the benchmark
# against a D2D copy (bench_peer_allreduce, eager and graph, 2 and 4 ranks: one-shot vs two-shot 1 KiB to
# 256 MiB, clean and with 1 chunk read in a thousand corrupted; all-gather 1 KiB to 64 MiB per rank; send/recv
# as a ring shift 1 KiB to 64 MiB) and
# PyTorch SymmetricMemory's one-shot/two-shot all-reduce in the same session.
# Logs under /tmp/gpu_peer/ ($PEER_LOG_DIR), packed into $OUT/gpu_peer_logs.tgz with the summary in
# $OUT/gpu_peer_summary.log (the device machine hands back few files); exit 0 only if every step passed.
#   scripts/gpu_peer_check.sh   (build dir: <repo>/build-peer, $RINGGUARD_GPU_BUILD_DIR overrides)
#   EXTRA_TARGETS="..." adds build targets; PEER_SKIP_BENCH=1 skips the benchmarks, PEER_SKIP_SYMM=1
#   the PyTorch SymmetricMemory runs; PEER_GTEST_FILTER runs only those tests (e.g. 'PeerCollectives*'),
#   PEER_TEST_TIMEOUT (s, default 420) bounds each test run; PEER_NPS (default "2 3 4") the rank counts
#   of the tests, PEER_BENCH_NPS (default "2 4") of the benchmarks (empty: none); PEER_SKIP_TIMESLICED=1 skips the run
#   without MPS; PEER_SKIP_BUILD=1 reuses the build directory as it is.
#   PEER_STEPS=1 adds the per-step clocks of the one-shot (bench_peer_steps, built with
#   RINGGUARD_PEER_STEP_CLOCKS; docs/PERFORMANCE.md, "Per-step clocks of the peer kernels") at each of
#   PEER_STEPS_NPS (default "2 4") ranks, beside the product's bench_peer_allreduce 1 KiB to 1 MiB, and prints
#   their summaries last (also $OUT/gpu_peer_steps_table.log). Alone:
#     PEER_SKIP_BUILD=0 PEER_NPS="" PEER_BENCH_NPS="" PEER_STEPS=1 bash scripts/gpu_peer_check.sh
#   (with PEER_STEPS=1 and no PEER_NPS the tests are not built and the time-sliced run is skipped unless
#   PEER_SKIP_TIMESLICED=0).
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${RINGGUARD_GPU_BUILD_DIR:-$repo_root/build-peer}"
out_dir="${PEER_LOG_DIR:-/tmp/gpu_peer}"
mkdir -p "$out_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PATH="$PATH:/usr/local/cuda/bin"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1

source "$repo_root/scripts/gpu_steps.sh"
write_environment

steps="${PEER_STEPS:-0}"
skip_timesliced="${PEER_SKIP_TIMESLICED:-0}"
build_targets=(ringguard_gpu_peer_tests bench_peer_allreduce)
if [[ "$steps" == "1" ]]; then
  if [[ -z "${PEER_NPS-2 3 4}" ]]; then
    skip_timesliced="${PEER_SKIP_TIMESLICED:-1}"
    [[ "$skip_timesliced" == "1" ]] && build_targets=(bench_peer_allreduce)
  fi
  build_targets+=(bench_peer_steps)
fi

[[ "${PEER_SKIP_BUILD:-0}" == "1" ]] || run_step configure cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DRINGGUARD_WITH_CUDA=ON -DRINGGUARD_WITH_MPI=ON -DRINGGUARD_WITH_TORCH=OFF
[[ "${PEER_SKIP_BUILD:-0}" == "1" ]] || run_step build cmake --build "$build_dir" --parallel 16 --target "${build_targets[@]}" \
  ${EXTRA_TARGETS:-}
tests="$build_dir/tests/gpu/ringguard_gpu_peer_tests"
bench="$build_dir/bench/gpu/bench_peer_allreduce"
steps_bench="$build_dir/bench/gpu/bench_peer_steps"
mpi=(mpirun --oversubscribe --bind-to none --timeout 240)
mpi_tests=(mpirun --oversubscribe --bind-to none --timeout "${PEER_TEST_TIMEOUT:-420}")

if start_mps; then
  for np in ${PEER_NPS-2 3 4}; do
    run_step "peer_tests_np$np" "${mpi_tests[@]}" -np "$np" "$tests" ${PEER_GTEST_FILTER:+--gtest_filter="$PEER_GTEST_FILTER"}
  done
  if [[ "${PEER_SKIP_BENCH:-0}" != "1" ]]; then
    for np in ${PEER_BENCH_NPS-2 4}; do
      run_step "bench_peer_np$np" "${mpi[@]}" -np "$np" "$bench" -b 1K -e 256M
      run_step "bench_peer_faults_np$np" "${mpi[@]}" -np "$np" "$bench" -b 4K -e 64M --fault-prob 0.001
      run_step "bench_peer_allgather_np$np" "${mpi[@]}" -np "$np" "$bench" -c allgather -b 1K -e 64M
      run_step "bench_peer_sendrecv_np$np" "${mpi[@]}" -np "$np" "$bench" -c sendrecv -b 1K -e 64M
      [[ "${PEER_SKIP_SYMM:-0}" == "1" ]] || run_step "bench_symm_mem_np$np" timeout 300 python3 -m torch.distributed.run --nproc-per-node="$np" \
        "$repo_root/bench/torch/bench_symm_mem.py" --max-bytes 256M
    done
  fi
  if [[ "$steps" == "1" ]]; then
    for np in ${PEER_STEPS_NPS-2 4}; do
      run_step "bench_peer_product_np$np" "${mpi[@]}" -np "$np" "$bench" -b 1K -e 1M
      run_step "bench_peer_steps_np$np" "${mpi[@]}" -np "$np" "$steps_bench" -s 1K,64K,1M
    done
  fi
  stop_mps
else
  record mps FAIL "nvidia-cuda-mps-control -d did not start"
fi
# Time-sliced (no MPS): correctness only, the small shapes.
[[ "$skip_timesliced" == "1" ]] || run_step peer_tests_np2_timesliced "${mpi[@]}" -np 2 "$tests" \
  --gtest_filter=*ChunkCrc*:*Graph*:*DifferentCounts*:*DifferentAllreduceKernels*:*DisagreeOnTheRoot*-*Alltoall*
status=0
finish_run "gpu_peer" || status=1
if [[ "$steps" == "1" ]]; then
  # The compact tables last: per step, ns since the previous step, one column per size and mode.
  for np in ${PEER_STEPS_NPS-2 4}; do
    echo
    echo "=== per-step clocks, $np ranks (bench_peer_steps, instrumented); the product's us per call:"
    grep -E '^ *[0-9]+ ' "$out_dir/bench_peer_product_np$np.log" 2>/dev/null | awk '{print "  " $1 " B: one-shot eager " $2 ", graph " $3}'
    sed -n '/^# summary/,$p' "$out_dir/bench_peer_steps_np$np.log" 2>/dev/null
  done | tee "$out_dir/steps_table.log"
  [[ -z "${OUT:-}" ]] || cp "$out_dir/steps_table.log" "$OUT/gpu_peer_steps_table.log"
fi
exit "$status"
