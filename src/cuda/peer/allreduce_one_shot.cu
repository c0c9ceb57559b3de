// The one-shot verified allreduce over peer windows (docs/design/protocol.md, "The one-sided protocol"):
// every rank publishes its whole input, reads every peer's chunks and reduces them in rank order 0..N-1.
// The least latency (one publish, one read); every rank reads N - 1 copies of the data, so the two-shot
// (allreduce_two_shot.cu) takes large messages.
#include <cuda_runtime.h>

#include "core/reduce.h"
#include "core/reduce_dispatch.h"
#include "cuda/peer/grid_launch.cuh"
#include "cuda/peer/kernel_preload.h"
#include "cuda/peer/peer_device.cuh"
#include "cuda/peer/peer_launch.h"
#include "cuda/peer/reduce_steps.cuh"

namespace ringguard {
namespace peer {
namespace {

// A literal, so scripts/regcheck.py reads the kernels' bounds from this file.
constexpr int kBlockThreads = 512;
static_assert(kBlockThreads == kThreads, "the block size of peer_device.cuh");

// At most SMs / ranks blocks per rank (peerGrid), so one block per SM: min-blocks 1 lets ptxas use the 128
// registers a 512-thread block may have (left to itself it capped the 1-byte element types at 64 and
// spilled, which regcheck refuses).
template <typename Final>
__global__ void __launch_bounds__(kBlockThreads, 1)
    allreduceOneShotKernel(const __grid_constant__ PeerAllreduceArgs a, uint32_t fpCrc, size_t totalBytes,
                           element_ops::OpArg arg) {
  Collective k = beginCollective(a, fpCrc);
  const uint32_t chunks = chunkCount(totalBytes);
  const bool sendAligned = aligned16(a.send), recvAligned = aligned16(a.recv);
  publishChunks(
      k, /*result=*/false, 0, chunks, [](uint32_t) { return true; },
      [&](uint32_t c, uint4(&vec)[kLaneVectors]) {
        loadInputChunk(a.send, c, totalBytes, sendAligned, vec);
      });
  for (uint32_t c = k.firstOf(0); k.ok && c < chunks; c += k.warps) {
    // This rank's own bytes, loaded before the lower ranks' reads: their latency hides under those waits.
    uint4 own[kLaneVectors];
    loadInputChunk(a.send, c, totalBytes, sendAligned, own);
    uint4 acc[kLaneVectors];
    const bool read = reduceChunk<Final>(
        a.size, arg,
        [&](int p, uint4(&vec)[kLaneVectors]) {
          if (p != a.rank) return readChunk(k, p, /*result=*/false, c, vec);
#pragma unroll
          for (int v = 0; v < kLaneVectors; ++v) vec[v] = own[v];
          // (Since the load moved above, this step marks the copy, not the load.)
          RINGGUARD_STEP_AFTER(kStepPeer + kPeerSteps * p + kStepPeerLoaded, vec);
          return true;
        },
        acc);
    if (!read) break;
    storeOutputChunk(a.recv, c, 0, totalBytes, recvAligned, acc);
    RINGGUARD_STEP(kStepReduced);
  }
  finishCollective(k);
}

}  // namespace

Status launchAllreduceOneShot(const PeerAllreduceArgs& args, void* stream) {
  const size_t totalBytes = args.count * dataTypeSize(args.dtype);
  int blocks = 1;
  RINGGUARD_RETURN_IF_ERROR(peerGrid(chunkCount(totalBytes), args.size, &blocks));
  const uint32_t fpCrc = peerFingerprintCrc(args, PeerAlgorithm::kAllreduceOneShot);
  const element_ops::OpArg arg{args.size, premulScalar(args.dtype, premulFactor(args.op))};
  return element_ops::dispatchReduce(args.dtype, args.op, /*finalStep=*/true, /*firstStep=*/false,
                                     [&](auto tag) {
                                       using Final = typename decltype(tag)::type;
                                       return launchPeerGrid(allreduceOneShotKernel<Final>, blocks, kThreads,
                                                             stream, args, fpCrc, totalBytes, arg);
                                     });
}

Status preloadAllreduceOneShot() {
  return forEachFinalReduce(
      [](auto tag) { return preloadKernel(allreduceOneShotKernel<typename decltype(tag)::type>); });
}

}  // namespace peer
}  // namespace ringguard
