#!/usr/bin/env bash
# The GPU machine's check of the torch layer over the one-sided path (issue 42, "Where it is used"; issue 43's
# figures), in one call of about 8 minutes: what must pass before RINGGUARD_DEVICE_TRANSPORT=auto hands every
# peer collective to the path (docs/GPU.md, "The one-sided path"). Every rank a process on the one GPU under
# MPS:
#   1. the package (pip install, sm_90 only: half the CUDA build of the default 80;90);
#   2. the pytest modules that run on CUDA tensors (RINGGUARD_TEST_DEVICE=cuda) with
#      RINGGUARD_DEVICE_TRANSPORT=peer: collectives, send/recv (test_p2p.py's cuda- cases: on the peer windows),
#      DDP, FSDP2, replicas, the killed rank;
#   3. DDP and FSDP2 on the small GPT, the staged path and the peer path each against gloo in the same
#      session (bench_ddp.py / bench_fsdp.py print ringguard_vs_gloo);
#   4. the replica check's figures (bench_replica_check.py, the small GPT and the 1 GB and 8 GB sets; its
#      --profile tables in the step's log, the traces left in /tmp/replica_profile: too large to hand back).
# Logs under /tmp/gpu_peer_torch, packed into $OUT/gpu_peer_torch_logs.tgz with the summary in
# $OUT/gpu_peer_torch_summary.log; exit 0 only if every step passed.
#   PEER_TORCH_SKIP_INSTALL=1 reuses the installed package; PEER_TORCH_PYTEST="test_ddp.py ..." narrows step 2
#   (a step per module, each torchrun launch cut at PEER_TORCH_LAUNCH_TIMEOUT s, default 150);
#   PEER_TORCH_TRANSPORT=auto runs step 2 with the default transport instead of peer asked by name;
#   PEER_TORCH_SKIP_BENCH=1 skips steps 3 and 4; GPU_DEADLINE_S (scripts/gpu_steps.sh) bounds the whole run
#   (the pip install alone took 228 s on the H100, 2026-12-05: set it under the call's limit, e.g. 560).
set -uo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
out_dir=/tmp/gpu_peer_torch
mkdir -p "$out_dir"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PATH="$PATH:/usr/local/cuda/bin" NCCL_NVLS_ENABLE=0 CMAKE_BUILD_PARALLEL_LEVEL=16 PYTHONUNBUFFERED=1

source "$repo_root/scripts/gpu_steps.sh"
write_environment

[[ "${PEER_TORCH_SKIP_INSTALL:-0}" == "1" ]] || run_step pip_install python3 -m pip install --no-build-isolation \
  --no-deps -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 .
torchrun=(timeout 300 python3 -m torch.distributed.run --nproc-per-node=2)
if start_mps; then
  transport="${PEER_TORCH_TRANSPORT:-peer}"
  modules="${PEER_TORCH_PYTEST:-test_collectives.py test_p2p.py test_ddp.py test_fsdp.py test_replicas.py test_replicas_hsdp.py test_killed_rank.py}"
  # A step per module, each torchrun launch bounded (RINGGUARD_TEST_LAUNCH_TIMEOUT): a launch that hangs
  # costs its module, not the run; RINGGUARD_TIMEOUT_MS=30000 ends a kernel left waiting on a group made
  # without a timeout (torch's 30 minutes) well inside it.
  for m in $modules; do
    run_step "pytest_${transport}_${m%.py}" env RINGGUARD_DEVICE_TRANSPORT="$transport" RINGGUARD_TEST_DEVICE=cuda \
      RINGGUARD_TEST_LAUNCH_TIMEOUT="${PEER_TORCH_LAUNCH_TIMEOUT:-150}" \
      RINGGUARD_TIMEOUT_MS="${PEER_TORCH_TIMEOUT_MS:-30000}" timeout 420 \
      python3 -m pytest "tests/python/$m" -q -rfs -p no:cacheprovider
  done
  if [[ "${PEER_TORCH_SKIP_BENCH:-0}" != "1" ]]; then
    for path in staged peer; do
      run_step "bench_ddp_gpt_$path" env RINGGUARD_DEVICE_TRANSPORT=$path "${torchrun[@]}" bench/torch/bench_ddp.py \
        --device cuda --model gpt
      run_step "bench_fsdp_$path" env RINGGUARD_DEVICE_TRANSPORT=$path "${torchrun[@]}" bench/torch/bench_fsdp.py \
        --device cuda
    done
    run_step bench_replica_check "${torchrun[@]}" bench/torch/bench_replica_check.py --model gpt --device cuda \
      --profile /tmp/replica_profile \
      --set-gb 1 --set-gb 8
  fi
  stop_mps
else
  record mps FAIL "nvidia-cuda-mps-control -d did not start"
fi
finish_run "gpu_peer_torch"
