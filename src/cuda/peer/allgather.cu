// The verified all-gather over peer windows (docs/design/protocol.md, "All-gather, broadcast,
// reduce-scatter"): every rank publishes its input (copying it to its own place in the output on the way)
// and reads every peer's chunks, verified, into the peer's place in the output.
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
    allgatherKernel(const __grid_constant__ PeerAllgatherArgs a, uint32_t fpCrc, size_t bytes) {
  Collective k = beginCollective(a, fpCrc);
  const uint32_t chunks = chunkCount(bytes);
  const bool sendAligned = aligned16(a.send);
  char* recv = static_cast<char*>(a.recv);
  publishChunks(
      k, /*result=*/false, 0, chunks, [](uint32_t) { return true; },
      [&](uint32_t c, uint4(&vec)[kLaneVectors]) {
        loadInputChunk(a.send, c, bytes, sendAligned, vec);
        char* mine = recv + size_t(a.rank) * bytes;
        storeOutputChunk(mine, c, 0, bytes, aligned16(mine), vec);
      });
  bool ok = k.ok;
  for (uint32_t c = k.firstOf(0); ok && c < chunks; c += k.warps) {
    for (int p = 0; ok && p < a.size; ++p) {
      if (p == a.rank) continue;
      uint4 vec[kLaneVectors];
      ok = readChunk(k, p, /*result=*/false, c, vec);
      char* theirs = recv + size_t(p) * bytes;
      if (ok) storeOutputChunk(theirs, c, 0, bytes, aligned16(theirs), vec);
    }
  }
  finishCollective(k);
}

}  // namespace

Status launchPeerAllgather(const PeerAllgatherArgs& args, void* stream) {
  const size_t bytes = args.count * dataTypeSize(args.dtype);
  RINGGUARD_RETURN_IF_ERROR(checkWindowArgs(args, "allgather", bytes));
  if (args.count != 0 && (args.send == nullptr || args.recv == nullptr)) {
    return Status(StatusCode::kInvalidArgument, "peer allgather: null buffer");
  }
  int blocks = 1;
  RINGGUARD_RETURN_IF_ERROR(peerGrid(chunkCount(bytes), args.size, &blocks));
  const uint32_t fpCrc = peerFingerprintCrc(args, PeerAlgorithm::kAllgather);
  return launchPeerGrid(allgatherKernel, blocks, kThreads, stream, args, fpCrc, bytes);
}

Status preloadPeerAllgather() { return preloadKernel(allgatherKernel); }

}  // namespace peer
}  // namespace ringguard
