// A call this rank declined (docs/design/protocol.md, "A call rejected on one rank"): its arguments failed
// this rank's own checks, so it publishes no chunk, but it still takes its place in the windows' order of
// collectives: the epoch, the acknowledgements and an arrival slot whose fingerprint (the call's kind marked
// invalid-arguments, core/fingerprint.h) no real call has. The other ranks' kernels, waiting for its chunks,
// see that arrival (Collective::arrivedOtherwise) and fail at once naming this rank, instead of at their
// deadline; this rank's own kernel sees theirs and records the same mismatch.
#include <cuda_runtime.h>

#include "cuda/cuda_check.h"
#include "cuda/peer/kernel_preload.h"
#include "cuda/peer/peer_device.cuh"
#include "cuda/peer/peer_launch.h"

namespace ringguard {
namespace peer {
namespace {

// A literal, so scripts/regcheck.py reads the kernels' bounds from this file.
constexpr int kBlockThreads = 512;
static_assert(kBlockThreads == kThreads, "the block size of peer_device.cuh");

__global__ void __launch_bounds__(kBlockThreads, 1)
    declineKernel(const __grid_constant__ PeerWindowArgs a, uint32_t fpCrc) {
  Collective k = beginCollective(a, fpCrc);
  finishCollective(k);
}

}  // namespace

Status launchPeerDecline(const PeerWindowArgs& args, void* stream) {
  RINGGUARD_RETURN_IF_ERROR(checkWindowArgs(args, "decline", 0));
  declineKernel<<<1, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      args, peerFingerprintCrc(args, PeerAlgorithm::kDecline));
  RINGGUARD_CUDA_CHECK_LAUNCH();
  return Status::ok();
}

Status preloadPeerDecline() { return preloadKernel(declineKernel); }

}  // namespace peer
}  // namespace ringguard
