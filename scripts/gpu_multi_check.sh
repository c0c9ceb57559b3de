#!/usr/bin/env bash
# The NCCL transport with one rank per GPU (machines with 2+ GPUs): the device ring tests and
# bench_allreduce -D against ncclAllReduce, default NCCL algorithm and NCCL_ALGO=Ring.
# Logs under ${OUT:-/tmp/out}; a PASS/FAIL line per step at the end.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${RINGGUARD_GPU_BUILD_DIR:-$repo_root/build-gpu}"
out_dir="${OUT:-/tmp/out}"
mkdir -p "$out_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PATH="$PATH:/usr/local/cuda/bin"
export NCCL_NVLS_ENABLE=0 RINGGUARD_DEVICE_TRANSPORT=nccl RINGGUARD_TIMEOUT_MS=10000
np="${NP:-$(nvidia-smi -L | wc -l)}"
results=()
step() {
  local name="$1"; shift
  echo "=== [$name] $*" | tee "$out_dir/$name.log"
  "$@" 2>&1 | tee -a "$out_dir/$name.log"
  local rc=${PIPESTATUS[0]}
  results+=("$name: $([[ $rc -eq 0 ]] && echo PASS || echo "FAIL (exit $rc)")")
}
nvidia-smi -L > "$out_dir/environment.log" 2>&1
step configure cmake -S "$repo_root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
step build cmake --build "$build_dir" --parallel 32 --target ringguard_gpu_ring_tests bench_allreduce
mpirun_args=(--oversubscribe --bind-to none --timeout 150 -np "$np")
step ring_nccl mpirun "${mpirun_args[@]}" "$build_dir/tests/gpu/ringguard_gpu_ring_tests" --gtest_filter=-*Stalled*
step ring_nccl_stall mpirun "${mpirun_args[@]/150/60}" "$build_dir/tests/gpu/ringguard_gpu_ring_tests" \
  --gtest_filter=*Stalled*
# Default slice size (the NCCL transport's: 64 MiB), 1 KiB to 4 GiB, NCCL's default algorithm and Ring.
step bench_nccl_default mpirun "${mpirun_args[@]}" "$build_dir/bench/bench_allreduce" -D -b 1K -e 4G -f 4 -n 5 -w 2
step bench_nccl_ring env NCCL_ALGO=Ring mpirun "${mpirun_args[@]}" -x NCCL_ALGO "$build_dir/bench/bench_allreduce" \
  -D -b 1K -e 4G -f 4 -n 5 -w 2
# One corrupted slice transfer in a thousand (detected, retransmitted; the bench checks the result).
step bench_nccl_faults env RINGGUARD_FAULT_PROB=0.001 mpirun "${mpirun_args[@]}" -x RINGGUARD_FAULT_PROB \
  "$build_dir/bench/bench_allreduce" -D -b 256M -e 4G -f 4 -n 20 -w 2
# Slice size and slot sweep (RINGGUARD_SLICE_BYTES / RINGGUARD_SLOTS) at the sizes of the goal.
for slice in ${SWEEP_SLICES:-16777216 33554432 134217728}; do
  for slots in ${SWEEP_SLOTS:-2}; do
    step "sweep_s${slice}_w${slots}" env RINGGUARD_SLOTS="$slots" mpirun "${mpirun_args[@]}" -x RINGGUARD_SLOTS \
      "$build_dir/bench/bench_allreduce" -D -b 64M -e 4G -f 4 -n 5 -w 2 -s "$slice"
  done
done
# Where the gap to ncclAllReduce goes: our kernels capped to fewer SMs (NCCL's kernels run beside them), and
# NCCL's point-to-point chunk size (default 512 KiB over NVLink).
for sms in ${SWEEP_KERNEL_SMS:-16 66}; do
  step "sweep_sms$sms" env RINGGUARD_KERNEL_SMS="$sms" mpirun "${mpirun_args[@]}" -x RINGGUARD_KERNEL_SMS \
    "$build_dir/bench/bench_allreduce" -D -b 1G -e 4G -f 4 -n 5 -w 2
done
for chunk in ${SWEEP_P2P_CHUNK:-2097152}; do
  step "sweep_p2pchunk$chunk" env NCCL_P2P_NVL_CHUNKSIZE="$chunk" mpirun "${mpirun_args[@]}" \
    -x NCCL_P2P_NVL_CHUNKSIZE "$build_dir/bench/bench_allreduce" -D -b 1G -e 4G -f 4 -n 5 -w 2
done
printf '%s\n' "${results[@]}" | tee "$out_dir/summary.log"
