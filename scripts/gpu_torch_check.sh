#!/usr/bin/env bash
# The GPU machine's check of the torch layer, in one go: ctest -L gpu, the CUDA GradientAggregator (ctest -L torch,
# train_mlp and bench_train_step with --device cuda), then the Python package (pip install), the pytest
# suite (GPU cases included), the DDP example and the DDP benchmark with CUDA tensors against gloo.
# Logs under ${OUT:-/tmp/out}; a PASS/FAIL line per step at the end; exit 0 only if every step passed.
#
#   scripts/gpu_torch_check.sh          build dir: <repo>/build-gpu ($RINGGUARD_GPU_BUILD_DIR overrides)
#   GPU_TORCH_QUICK=1 ...               skips ctest -L gpu and the DDP benchmarks of ranks sharing a GPU
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
build_dir="${RINGGUARD_GPU_BUILD_DIR:-$repo_root/build-gpu}"
out_dir="${OUT:-/tmp/out}"
mkdir -p "$out_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PATH="$PATH:/usr/local/cuda/bin" NCCL_NVLS_ENABLE=0 CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-16}"
results=()
step() {
  local name="$1"; shift
  echo "=== [$name] $*" | tee "$out_dir/$name.log"
  local start=$SECONDS
  "$@" 2>&1 | tee -a "$out_dir/$name.log"
  local rc=${PIPESTATUS[0]}
  results+=("$name: $([[ $rc -eq 0 ]] && echo PASS || echo "FAIL (exit $rc)") $((SECONDS - start))s")
}
mpi=(mpirun --oversubscribe --bind-to none --timeout 300)

{ nvidia-smi -L; python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())'; } \
  >"$out_dir/environment.log" 2>&1
step configure cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
step build cmake --build "$build_dir"
quick="${GPU_TORCH_QUICK:-0}"
[[ "$quick" == 1 ]] || step ctest_gpu ctest --test-dir "$build_dir" -L gpu --output-on-failure
step ctest_torch ctest --test-dir "$build_dir" -L torch --output-on-failure
step train_mlp_cuda_np2 "${mpi[@]}" -np 2 "$build_dir/examples/train_mlp" --device cuda
step train_mlp_cuda_np4 "${mpi[@]}" -np 4 "$build_dir/examples/train_mlp" --device cuda
step bench_train_step_cuda_np2 "${mpi[@]}" -np 2 "$build_dir/bench/bench_train_step" --device cuda
step bench_train_step_cuda_np4 "${mpi[@]}" -np 4 "$build_dir/bench/bench_train_step" --device cuda

# The Python package against the machine's torch (offline: no build isolation, no dependencies).
step pip_install python3 -m pip install --no-build-isolation --no-deps -v .
step pytest python3 -m pytest tests/python -v -rs
step ddp_example_cuda_np2 python3 -m torch.distributed.run --nproc-per-node=2 examples/torch_ddp_train.py \
  --device cuda --fault-prob 0.01
step bench_ddp_cuda_np2 python3 -m torch.distributed.run --nproc-per-node=2 bench/torch/bench_ddp.py --device cuda
if [[ "$quick" != 1 ]]; then
  step bench_ddp_cuda_np4 python3 -m torch.distributed.run --nproc-per-node=4 bench/torch/bench_ddp.py --device cuda
  # Several ranks on one GPU, host-staged (named: auto would take the peer windows).
  step bench_ddp_staged_1gpu_np2 env CUDA_VISIBLE_DEVICES=0 RINGGUARD_DEVICE_TRANSPORT=staged \
    python3 -m torch.distributed.run --nproc-per-node=2 \
    bench/torch/bench_ddp.py --device cuda
fi
# One GPU per rank (2+ GPUs): DDP over ringguard's NCCL transport against DDP over NCCL itself.
# One rank per GPU of the machine (2, 4 or 8).
gpus="$(nvidia-smi -L | wc -l)"
if [[ "$gpus" -ge 2 ]]; then
  step "bench_ddp_nccl_np$gpus" python3 -m torch.distributed.run --nproc-per-node="$gpus" bench/torch/bench_ddp.py \
    --device cuda --baseline nccl
  # A real model: the small GPT on synthetic tokens (~27 M parameters, 108 MB of gradients).
  step "bench_ddp_gpt_nccl_np$gpus" python3 -m torch.distributed.run --nproc-per-node="$gpus" \
    bench/torch/bench_ddp.py --device cuda --model gpt --baseline nccl
fi
printf '%s\n' "${results[@]}" | tee "$out_dir/summary.log"
! grep -q FAIL "$out_dir/summary.log"
