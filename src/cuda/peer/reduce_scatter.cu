// The verified reduce-scatter over peer windows (docs/design/protocol.md, "All-gather, broadcast,
// reduce-scatter"): every rank publishes the chunks of its input that another rank's share overlaps
// (core/peer_plan.h), reduces the chunks its own share overlaps over every rank in rank order 0..N-1 (its
// own bytes from its input) and keeps the bytes of its share: the two-shot allreduce's first half, on shares
// that need not be whole chunks.
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

template <typename Final>
__global__ void __launch_bounds__(kBlockThreads, 1)
    reduceScatterKernel(const __grid_constant__ PeerReduceScatterArgs a, uint32_t fpCrc, size_t shareBytes,
                        element_ops::OpArg arg) {
  Collective k = beginCollective(a, fpCrc);
  const size_t totalBytes = shareBytes * size_t(a.size);
  const uint32_t chunks = chunkCount(totalBytes);
  const ChunkRange mine = reduceScatterChunks(shareBytes, a.rank);
  const bool sendAligned = aligned16(a.send);
  const size_t lo = shareBytes * size_t(a.rank), hi = lo + shareBytes;
  const bool recvAligned = ((reinterpret_cast<uintptr_t>(a.recv) - lo) & 15u) == 0;
  publishChunks(
      k, /*result=*/false, 0, chunks,
      [&](uint32_t c) { return reduceScatterChunkReadByPeer(shareBytes, a.size, a.rank, c); },
      [&](uint32_t c, uint4(&vec)[kLaneVectors]) {
        loadInputChunk(a.send, c, totalBytes, sendAligned, vec);
      });
  for (uint32_t c = k.firstOf(mine.begin); k.ok && c < mine.end; c += k.warps) {
    uint4 acc[kLaneVectors];
    const bool read = reduceChunk<Final>(
        a.size, arg,
        [&](int p, uint4(&vec)[kLaneVectors]) {
          if (p != a.rank) return readChunk(k, p, /*result=*/false, c, vec);
          loadInputChunk(a.send, c, totalBytes, sendAligned, vec);
          return true;
        },
        acc);
    if (!read) break;
    storeOutputChunk(a.recv, c, lo, hi, recvAligned, acc);
  }
  finishCollective(k);
}

}  // namespace

Status launchPeerReduceScatter(const PeerReduceScatterArgs& args, void* stream) {
  const size_t shareBytes = args.count * dataTypeSize(args.dtype);
  RINGGUARD_RETURN_IF_ERROR(
      checkWindowArgs(args, "reduce_scatter", shareBytes * size_t(args.size < 1 ? 1 : args.size)));
  if (!reduceSupported(args.dtype, args.op)) {
    return Status(StatusCode::kInvalidArgument, std::string("peer reduce_scatter: ") + reduceOpName(args.op) +
                                                    " does not reduce " + dataTypeName(args.dtype));
  }
  if (args.count != 0 && (args.send == nullptr || args.recv == nullptr)) {
    return Status(StatusCode::kInvalidArgument, "peer reduce_scatter: null buffer");
  }
  int blocks = 1;
  RINGGUARD_RETURN_IF_ERROR(peerGrid(chunkCount(shareBytes * size_t(args.size)), args.size, &blocks));
  const uint32_t fpCrc = peerFingerprintCrc(args, PeerAlgorithm::kReduceScatter);
  const element_ops::OpArg arg{args.size, premulScalar(args.dtype, premulFactor(args.op))};
  return element_ops::dispatchReduce(args.dtype, args.op, /*finalStep=*/true, /*firstStep=*/false,
                                     [&](auto tag) {
                                       using Final = typename decltype(tag)::type;
                                       return launchPeerGrid(reduceScatterKernel<Final>, blocks, kThreads,
                                                             stream, args, fpCrc, shareBytes, arg);
                                     });
}

Status preloadPeerReduceScatter() {
  return forEachFinalReduce(
      [](auto tag) { return preloadKernel(reduceScatterKernel<typename decltype(tag)::type>); });
}

}  // namespace peer
}  // namespace ringguard
