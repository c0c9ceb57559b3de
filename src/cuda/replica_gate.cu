// The replica check's gate (docs/REPLICAS.md, "The gate"): one block after the check's all-gather on the
// training stream. Clean (every rank's fingerprints equal), it ends at once and nothing waits for the host.
// A mismatch holds the stream, and with it everything the training thread queues next (the next forward,
// its backward, the gradients' all-reduce), until the verdict thread has decided and repaired, on every rank
// alike, and released this check's epoch. The deadline (RINGGUARD_TIMEOUT_MS) bounds the wait if the verdict
// thread never releases: the kernel records it and ends, and the host raises it (never a hang).
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/replica_gate.h"

namespace ringguard {
namespace {

// A literal, so scripts/regcheck.py reads the kernel's bounds from this file.
constexpr int kGateThreads = 256;
constexpr unsigned kPollNs = 2000;  // between reads of the mapped release word (a read crosses PCIe)

__device__ __forceinline__ uint64_t gateTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void __launch_bounds__(kGateThreads, 1) replicaGateKernel(const ReplicaGateArgs a) {
  const size_t total = a.wordsPerRank * size_t(a.ranks);
  int differs = 0;
  for (size_t i = threadIdx.x; i < total; i += blockDim.x) {
    const uint32_t w = a.words[i];
    a.copy[i] = w;
    if (i >= a.wordsPerRank) differs |= w != a.words[i % a.wordsPerRank] ? 1 : 0;
  }
  // Every thread's words visible to the host before the epoch that says they are there.
  __threadfence_system();
  differs = __syncthreads_or(differs);
  if (threadIdx.x == 0) {
    *reinterpret_cast<volatile uint64_t*>(a.copied) = a.epoch;
    __threadfence_system();
  }
  if (differs == 0 || threadIdx.x != 0) return;
  const uint64_t deadline = gateTimer() + a.timeoutNs;
  const volatile uint64_t* release = a.release;
  while (*release < a.epoch) {
    if (gateTimer() > deadline) {
      *reinterpret_cast<volatile uint64_t*>(a.expired) = a.epoch;
      __threadfence_system();
      return;
    }
    __nanosleep(kPollNs);
  }
}

}  // namespace

Status launchReplicaGate(const ReplicaGateArgs& args, cudaStream_t stream) {
  if (args.words == nullptr || args.ranks < 1 || args.epoch == 0 || args.copy == nullptr ||
      args.copied == nullptr || args.release == nullptr || args.expired == nullptr) {
    return Status(
        StatusCode::kInvalidArgument,
        "replica gate: words, copy, copied, release and expired must be set, ranks >= 1 and epoch >= 1");
  }
  replicaGateKernel<<<1, kGateThreads, 0, stream>>>(args);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

}  // namespace ringguard
