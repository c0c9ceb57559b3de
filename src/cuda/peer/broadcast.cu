// The verified broadcast over peer windows (docs/design/protocol.md, "All-gather, broadcast,
// reduce-scatter"): the root publishes its input (copying it to its output unless they are one buffer); every
// other rank reads the root's chunks, verified, into its output. Every rank still checks every peer's arrival
// (finishCollective), so ranks that disagree on the root fail instead of each returning its own bytes.
#include <cuda_runtime.h>

#include "cuda/peer/grid_launch.cuh"
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
    broadcastKernel(const __grid_constant__ PeerBroadcastArgs a, uint32_t fpCrc, size_t bytes) {
  Collective k = beginCollective(a, fpCrc);
  const uint32_t chunks = chunkCount(bytes);
  const bool recvAligned = aligned16(a.recv);
  if (a.rank == a.root) {
    const bool sendAligned = aligned16(a.send), copy = a.send != a.recv;
    publishChunks(
        k, /*result=*/false, 0, chunks, [](uint32_t) { return true; },
        [&](uint32_t c, uint4(&vec)[kLaneVectors]) {
          loadInputChunk(a.send, c, bytes, sendAligned, vec);
          if (copy) storeOutputChunk(a.recv, c, 0, bytes, recvAligned, vec);
        });
  } else {
    for (uint32_t c = k.firstOf(0); k.ok && c < chunks; c += k.warps) {
      uint4 vec[kLaneVectors];
      if (!readChunk(k, a.root, /*result=*/false, c, vec)) break;
      storeOutputChunk(a.recv, c, 0, bytes, recvAligned, vec);
    }
  }
  finishCollective(k);
}

}  // namespace

Status launchPeerBroadcast(const PeerBroadcastArgs& args, void* stream) {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  RINGGUARD_RETURN_IF_ERROR(checkWindowArgs(args, "broadcast", bytes));
  if (args.root < 0 || args.root >= args.size) {
    return Status(StatusCode::kInvalidArgument, "peer broadcast: root " + std::to_string(args.root) +
                                                    " of size " + std::to_string(args.size) +
                                                    " is out of range");
  }
  if (args.count != 0 && (args.recv == nullptr || (args.rank == args.root && args.send == nullptr))) {
    return Status(StatusCode::kInvalidArgument, "peer broadcast: null buffer");
  }
  int blocks = 1;
  RINGGUARD_RETURN_IF_ERROR(peerGrid(chunkCount(bytes), args.size, &blocks));
  const uint32_t fpCrc = peerFingerprintCrc(args, PeerAlgorithm::kBroadcast);
  return launchPeerGrid(broadcastKernel, blocks, kThreads, stream, args, fpCrc, bytes);
}

Status preloadPeerBroadcast() { return preloadKernel(broadcastKernel); }

}  // namespace peer
}  // namespace ringguard
