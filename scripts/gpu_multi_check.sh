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
step build cmake --build "$build_dir" --parallel 32 --target ringguard_gpu_ring_tests bench_allreduce \
  ringguard_gpu_tests ringguard_gpu_nccl_tests
mpirun_args=(--oversubscribe --bind-to none --timeout 150 -np "$np")
step ring_nccl mpirun "${mpirun_args[@]}" "$build_dir/tests/gpu/ringguard_gpu_ring_tests" --gtest_filter=-*Stalled*
step ring_nccl_stall mpirun "${mpirun_args[@]/150/60}" "$build_dir/tests/gpu/ringguard_gpu_ring_tests" \
  --gtest_filter=*Stalled*
# The defaults (the NCCL transport's: 128 MiB slices, 4 slots, 4 lanes), 1 KiB to 4 GiB, NCCL's default algorithm and Ring.
step bench_nccl_default mpirun "${mpirun_args[@]}" "$build_dir/bench/bench_allreduce" -D -b 1K -e 4G -f 4 -n 5 -w 2
step bench_nccl_ring env NCCL_ALGO=Ring mpirun "${mpirun_args[@]}" -x NCCL_ALGO "$build_dir/bench/bench_allreduce" \
  -D -b 1K -e 4G -f 4 -n 5 -w 2
# One corrupted slice transfer in a thousand (detected, retransmitted; the bench checks the result).
step bench_nccl_faults env RINGGUARD_FAULT_PROB=0.001 mpirun "${mpirun_args[@]}" -x RINGGUARD_FAULT_PROB \
  "$build_dir/bench/bench_allreduce" -D -b 256M -e 4G -f 4 -n 20 -w 2
# Variants at the sizes of the goal: each is a name and RINGGUARD_* / NCCL_* settings (VARIANTS overrides,
# one per line) against the defaults (128 MiB slices, 4 slots, 4 NCCL lanes, every SM): slice size, slots,
# lanes, the SMs our kernels may fill, and the pre-lanes configuration as the baseline.
variants="${VARIANTS:-s64M RINGGUARD_SLICE_BYTES=67108864
s256M RINGGUARD_SLICE_BYTES=268435456
slots8 RINGGUARD_SLOTS=8
lanes2 RINGGUARD_NCCL_LANES=2
sms66 RINGGUARD_KERNEL_SMS=66
before_lanes RINGGUARD_NCCL_LANES=1 RINGGUARD_SLOTS=2 RINGGUARD_SLICE_BYTES=67108864}"
while read -r name settings; do
  [[ -n "$name" ]] || continue
  exports=()
  for kv in $settings; do exports+=(-x "$kv"); done
  step "variant_$name" mpirun "${mpirun_args[@]}" "${exports[@]}" "$build_dir/bench/bench_allreduce" \
    -D -b 256M -e 4G -f 4 -n 5 -w 2 </dev/null  # mpirun would read the rest of the list
done <<<"$variants"
printf '%s\n' "${results[@]}" | tee "$out_dir/summary.log"
