// An abort of the communicator (Communicator::abort; runtime/device/peer_path.cc) marks this rank's error
// word failed with kAborted, in its own window in device memory, where every kernel of this rank looks at its
// entry (beginCollective): a kernel that starts after the abort, one queued behind something that held the
// stream (the replica check's gate: docs/REPLICAS.md, "The gate"), ends there, publishing and reading
// nothing, as after any failure of this rank, even where every peer's chunks are already there; the peers'
// kernels see it as this rank's failure. The record's abortRequested word (mapped host memory, which the
// spins read every kSpinCheckEvery rounds) still ends a kernel already spinning; read at every entry, it
// would put a PCIe round trip on every call.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/peer/kernel_preload.h"
#include "cuda/peer/peer_collectives.h"
#include "cuda/peer/peer_launch.h"

namespace ringguard {
namespace peer {
namespace {

// A literal, so scripts/regcheck.py reads the kernel's bounds from this file.
constexpr int kMarkThreads = 32;

__global__ void __launch_bounds__(kMarkThreads, 1) abortMarkKernel(void* window) {
  if (threadIdx.x != 0) return;
  auto* e = reinterpret_cast<uint32_t*>(static_cast<char*>(window) + kErrorOffset);
  if (atomicCAS(e, 0u, uint32_t(PeerError::kAborted)) == 0u) {
    e[1] = ~0u;  // no peer
    e[2] = ~0u;  // no chunk
    __threadfence_system();
  }
}

}  // namespace

Status launchPeerAbortMark(void* ownWindow, void* stream) {
  if (ownWindow == nullptr) return Status(StatusCode::kInvalidArgument, "peer abort mark: no window");
  abortMarkKernel<<<1, kMarkThreads, 0, static_cast<cudaStream_t>(stream)>>>(ownWindow);
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status preloadPeerAbortMark() { return preloadKernel(abortMarkKernel); }

}  // namespace peer
}  // namespace ringguard
