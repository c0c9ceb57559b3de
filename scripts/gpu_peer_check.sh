#!/usr/bin/env bash
# The GPU machine's check of the one-sided path (issue 42): the peer windows, the one-shot and two-shot
# verified allreduce, all-gather, broadcast, reduce-scatter, all-to-all and send/recv at 2, 3 and 4 ranks on the
# one GPU under MPS (tests/gpu/test_peer_allreduce.cc, test_peer_collectives.cc, test_peer_sendrecv.cc: exact
# results, faults, CUDA graph, mismatch,
# stopped peer, abort), once time-sliced without MPS at 2 ranks (correctness only), then the benchmark
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

[[ "${PEER_SKIP_BUILD:-0}" == "1" ]] || run_step configure cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DRINGGUARD_WITH_CUDA=ON -DRINGGUARD_WITH_MPI=ON -DRINGGUARD_WITH_TORCH=OFF
[[ "${PEER_SKIP_BUILD:-0}" == "1" ]] || run_step build cmake --build "$build_dir" --parallel 16 --target ringguard_gpu_peer_tests bench_peer_allreduce \
  ${EXTRA_TARGETS:-}
tests="$build_dir/tests/gpu/ringguard_gpu_peer_tests"
bench="$build_dir/bench/gpu/bench_peer_allreduce"
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
  stop_mps
else
  record mps FAIL "nvidia-cuda-mps-control -d did not start"
fi
# Time-sliced (no MPS): correctness only, the small shapes.
[[ "${PEER_SKIP_TIMESLICED:-0}" == "1" ]] || run_step peer_tests_np2_timesliced "${mpi[@]}" -np 2 "$tests" \
  --gtest_filter=*ChunkCrc*:*Graph*:*DifferentCounts*:*DifferentAllreduceKernels*:*DisagreeOnTheRoot*-*Alltoall*
finish_run "gpu_peer"
