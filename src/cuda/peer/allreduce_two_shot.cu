// The two-shot verified allreduce over peer windows (docs/design/protocol.md, "Two-shot allreduce"): every
// rank publishes the chunks of its input that other ranks reduce; reduces its own share (core/peer_plan.h,
// twoShotShare) over every rank in rank order 0..N-1, with its own bytes from its input; publishes the
// reduced share in its window's result table, over the bytes of that share (no peer reads them); and reads
// every other share's result from its owner. Each rank reads about 2 (N - 1) / N of the data instead of the
// one-shot's N - 1 copies; every element is reduced exactly as the one-shot does, so the bits are the same.
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
    allreduceTwoShotKernel(const __grid_constant__ PeerAllreduceArgs a, uint32_t fpCrc, size_t totalBytes,
                           element_ops::OpArg arg) {
  Collective k = beginCollective(a, fpCrc);
  const uint32_t chunks = chunkCount(totalBytes);
  const ChunkRange share = twoShotShare(chunks, a.size, a.rank);
  const bool sendAligned = aligned16(a.send), recvAligned = aligned16(a.recv);

  // 1. The other shares' input, for their owners.
  publishChunks(
      k, /*result=*/false, 0, chunks, [&](uint32_t c) { return !share.contains(c); },
      [&](uint32_t c, uint4(&vec)[kLaneVectors]) {
        loadInputChunk(a.send, c, totalBytes, sendAligned, vec);
      });

  // 2. Reduce this rank's share and publish it as results: the reduced bytes go to the output and, with
  // their CRC, into the window (each chunk's slot is free: its input was not published).
  bool ok = k.ok;
  publishChunks(
      k, /*result=*/true, share.begin, share.end, [&](uint32_t) { return ok; },
      [&](uint32_t c, uint4(&acc)[kLaneVectors]) {
        ok = reduceChunk<Final>(
            a.size, arg,
            [&](int p, uint4(&vec)[kLaneVectors]) {
              if (p != a.rank) return readChunk(k, p, /*result=*/false, c, vec);
              loadInputChunk(a.send, c, totalBytes, sendAligned, vec);
              return true;
            },
            acc);
        if (ok) storeOutputChunk(a.recv, c, 0, totalBytes, recvAligned, acc);
      });
  RINGGUARD_STEP(kStepReduced);

  // 3. Every other share's result, verified, from its owner.
  for (uint32_t c = k.firstOf(0); ok && c < chunks; c += k.warps) {
    if (share.contains(c)) continue;
    uint4 vec[kLaneVectors];
    if (!readChunk(k, twoShotOwner(chunks, a.size, c), /*result=*/true, c, vec)) break;
    storeOutputChunk(a.recv, c, 0, totalBytes, recvAligned, vec);
  }
  RINGGUARD_STEP(kStepResultsRead);
  finishCollective(k);
}

}  // namespace

Status launchAllreduceTwoShot(const PeerAllreduceArgs& args, void* stream) {
  const size_t totalBytes = args.count * dataTypeSize(args.dtype);
  int blocks = 1;
  RINGGUARD_RETURN_IF_ERROR(peerGrid(chunkCount(totalBytes), args.size, &blocks));
  const uint32_t fpCrc = peerFingerprintCrc(args, PeerAlgorithm::kAllreduceTwoShot);
  const element_ops::OpArg arg{args.size, premulScalar(args.dtype, premulFactor(args.op))};
  return element_ops::dispatchReduce(args.dtype, args.op, /*finalStep=*/true, /*firstStep=*/false,
                                     [&](auto tag) {
                                       using Final = typename decltype(tag)::type;
                                       return launchPeerGrid(allreduceTwoShotKernel<Final>, blocks, kThreads,
                                                             stream, args, fpCrc, totalBytes, arg);
                                     });
}

Status preloadAllreduceTwoShot() {
  return forEachFinalReduce(
      [](auto tag) { return preloadKernel(allreduceTwoShotKernel<typename decltype(tag)::type>); });
}

}  // namespace peer
}  // namespace ringguard
