// The verified all-to-all over peer windows (docs/design/protocol.md, "All-to-all"): every rank publishes the
// blocks its peers need, each from a chunk boundary in destination order (core/peer_alltoall_plan.h), and
// reads its own block from every peer, verified, into its output; its block to itself is a local copy. In the
// split form chunk 0 of every window is the rank's block table: every block of every rank reads every peer's
// table (one warp per peer, at once) into shared memory and checks all of them before it reads a block, so
// ranks whose splits disagree, or a table that puts a block outside its window, fail on every rank naming the
// same pair, and no count or offset a peer wrote is used unchecked.
#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "core/peer_alltoall_plan.h"
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
static_assert(kWarps >= kMaxRanks, "one warp of every block reads each peer's block table");

__device__ __forceinline__ uint4 toVector(const uint32_t (&w)[4]) {
  return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void toWords(uint4 v, uint32_t (&w)[4]) {
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
}
__device__ __forceinline__ uint32_t low32(uint64_t v) {
  return v > 0xffffffffull ? 0xffffffffu : uint32_t(v);
}

// a[i] without indexing the array by a register (which would put it in local memory).
__device__ __forceinline__ uint32_t pick(const uint32_t (&a)[kMaxRanks], int i) {
  uint32_t v = 0;
#pragma unroll
  for (int j = 0; j < kMaxRanks; ++j) v = j == i ? a[j] : v;
  return v;
}

__global__ void __launch_bounds__(kBlockThreads, 1)
    alltoallKernel(const __grid_constant__ PeerAlltoallArgs a, uint32_t fpCrc, size_t esize) {
  __shared__ AlltoallTables tables;
  __shared__ int tablesOk;
  Collective k = beginCollective(a, fpCrc);
  const int n = a.size, me = a.rank;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  const AlltoallBlocks mine = alltoallBlocks(a.sendCounts, n, me, esize, a.splits);
  // A split-form publication too large for the window publishes its table alone: every rank's check of it
  // then fails naming this rank (kBlockTable). The equal form always fits (the launcher checked).
  const bool fits = mine.end <= a.layout.maxChunks;
  const uint32_t published = fits ? uint32_t(mine.end) : (a.splits ? kAlltoallTableChunks : 0u);

  publishChunks(
      k, /*result=*/false, 0, published, [](uint32_t) { return true; },
      [&](uint32_t c, uint4(&vec)[kLaneVectors]) {
        if (a.splits && c < kAlltoallTableChunks) {
          vec[0] = vec[1] = make_uint4(0, 0, 0, 0);
          if (k.lane < uint32_t(n)) {
            uint32_t sw[4], rw[4];
            alltoallTableEntry(pick(mine.first, int(k.lane)), a.sendCounts[k.lane], a.recvCounts[k.lane], sw,
                               rw);
            vec[0] = toVector(sw);
            vec[1] = toVector(rw);
          }
          return;
        }
        // The destination whose block holds chunk c (blocks are contiguous, in destination order).
        int q = 0;
        uint32_t first = 0;
#pragma unroll
        for (int d = 0; d < kMaxRanks; ++d) {
          if (d < n && d != me && a.sendCounts[d] != 0 && c >= mine.first[d]) {
            q = d;
            first = mine.first[d];
          }
        }
        const char* base = send + a.sendDispls[q] * esize;
        loadInputChunk(base, c - first, a.sendCounts[q] * esize, aligned16(base), vec);
      });

  bool ok = k.ok;
  if (a.splits) {
    const int warpInBlock = int(threadIdx.x / 32);
    if (threadIdx.x == 0) tablesOk = k.ok ? 1 : 0;
    if (threadIdx.x < unsigned(n)) {  // this rank's own row: what it published
      const int q = int(threadIdx.x);
      tables.first[me][q] = pick(mine.first, q);
      tables.send[me][q] = a.sendCounts[q];
      tables.recv[me][q] = a.recvCounts[q];
    }
    __syncthreads();
    if (k.ok && warpInBlock < n && warpInBlock != me) {
      const int p = warpInBlock;
      uint4 vec[kLaneVectors];
      if (readChunk(k, p, /*result=*/false, 0, vec)) {
        if (k.lane < uint32_t(n)) {
          uint32_t sw[4], rw[4];
          toWords(vec[0], sw);
          toWords(vec[1], rw);
          setAlltoallTableRow(tables, p, int(k.lane), sw, rw);
        }
      } else if (k.lane == 0) {
        tablesOk = 0;
      }
    }
    __syncthreads();
    if (warpInBlock == 0 && tablesOk != 0) {
      // Lane p checks sender p's row; the lowest failing sender is the verdict, the same on every rank.
      AlltoallVerdict v{PeerError::kNone, -1, -1, 0, 0};
      if (k.lane < uint32_t(n)) v = checkAlltoallSender(tables, int(k.lane), n, esize, a.layout.maxChunks);
      const uint32_t bad = __ballot_sync(0xffffffffu, v.code != PeerError::kNone);
      if (bad != 0 && k.lane == uint32_t(__ffs(bad) - 1)) {
        k.fail(v.code, v.sender, uint32_t(v.receiver), low32(v.expected), low32(v.seen));
        tablesOk = 0;
      }
    }
    __syncthreads();
    ok = ok && tablesOk != 0;
  }

  // This rank's block from every rank: its own first (a local copy), then me + 1, me + 2, ... so the ranks
  // start on different windows. Chunk j of the blocks taken one after the other is warp j % warps's.
  uint64_t total = 0;
  for (int p = 0; p < n; ++p) total += chunkCount64(a.recvCounts[p] * esize);
  for (uint64_t i = k.warp; ok && i < total; i += k.warps) {
    int p = me;
    uint64_t j = i;
    for (int s = 0; s < n; ++s) {
      p = (me + s) % n;
      const uint64_t chunks = chunkCount64(a.recvCounts[p] * esize);
      if (j < chunks) break;
      j -= chunks;
    }
    const size_t bytes = a.recvCounts[p] * esize;
    char* out = recv + a.recvDispls[p] * esize;
    uint4 vec[kLaneVectors];
    if (p == me) {
      const char* in = send + a.sendDispls[me] * esize;
      loadInputChunk(in, uint32_t(j), bytes, aligned16(in), vec);
    } else {
      const uint64_t first =
          a.splits ? uint64_t(tables.first[p][me]) : alltoallEqualFirst(chunkCount64(bytes), p, me);
      ok = readChunk(k, p, /*result=*/false, uint32_t(first + j), vec);
      if (!ok) break;
    }
    storeOutputChunk(out, uint32_t(j), 0, bytes, aligned16(out), vec);
  }
  finishCollective(k);
}

}  // namespace

Status launchPeerAlltoall(const PeerAlltoallArgs& args, void* stream) {
  const std::string name = "peer alltoall: ";
  const size_t esize = dataTypeSize(args.dtype);
  if (esize == 0) return Status(StatusCode::kInvalidArgument, name + "dtype has no element size");
  const int n = args.size >= 1 && args.size <= kMaxRanks ? args.size : 1;
  size_t sendEnd = 0, recvEnd = 0;
  // One vector's entry p: no overflow of (displacement + count) * esize, and the equal form's one count.
  const auto check = [&](const char* what, const size_t* counts, const size_t* displs, int p) -> Status {
    const std::string entry = std::string(what) + "[" + std::to_string(p) + "] ";
    const size_t most = ~size_t(0) / esize;
    if (counts[p] > most || displs[p] > most - counts[p]) {
      return Status(StatusCode::kInvalidArgument, name + entry + std::to_string(counts[p]) +
                                                      " at displacement " + std::to_string(displs[p]) +
                                                      " overflows the address space");
    }
    if (!args.splits && counts[p] != args.sendCounts[0]) {
      return Status(StatusCode::kInvalidArgument, name + "the equal form has one count: " + entry + "is " +
                                                      std::to_string(counts[p]) + ", sendCounts[0] is " +
                                                      std::to_string(args.sendCounts[0]));
    }
    return Status::ok();
  };
  bool sends = false, receives = false;
  for (int p = 0; p < n; ++p) {
    RINGGUARD_RETURN_IF_ERROR(check("sendCounts", args.sendCounts, args.sendDispls, p));
    RINGGUARD_RETURN_IF_ERROR(check("recvCounts", args.recvCounts, args.recvDispls, p));
    sendEnd = std::max(sendEnd, (args.sendDispls[p] + args.sendCounts[p]) * esize);
    recvEnd = std::max(recvEnd, (args.recvDispls[p] + args.recvCounts[p]) * esize);
    sends = sends || args.sendCounts[p] != 0;
    receives = receives || args.recvCounts[p] != 0;
  }
  // The equal form publishes N - 1 blocks of one count; the split form's blocks differ per rank, so only its
  // table is checked here and the kernel checks every rank's blocks on every rank (kBlockTable).
  const uint64_t publishedChunks = chunkCount64(uint64_t(args.sendCounts[0]) * esize) * uint64_t(n - 1);
  const size_t published = args.splits ? kChunkBytes
                           : publishedChunks > ~size_t(0) / kChunkBytes
                               ? ~size_t(0)
                               : size_t(publishedChunks) * kChunkBytes;
  RINGGUARD_RETURN_IF_ERROR(checkWindowArgs(args, "alltoall", published));
  const int me = args.rank;
  if (args.sendCounts[me] != args.recvCounts[me]) {
    return Status(StatusCode::kInvalidArgument, name + "rank " + std::to_string(me) + " sends " +
                                                    std::to_string(args.sendCounts[me]) +
                                                    " elements to itself (sendCounts) but receives " +
                                                    std::to_string(args.recvCounts[me]) + " (recvCounts)");
  }
  if (sends && args.send == nullptr) return Status(StatusCode::kInvalidArgument, name + "null send buffer");
  if (receives && args.recv == nullptr)
    return Status(StatusCode::kInvalidArgument, name + "null recv buffer");
  const uintptr_t s = reinterpret_cast<uintptr_t>(args.send), r = reinterpret_cast<uintptr_t>(args.recv);
  if (sendEnd != 0 && recvEnd != 0 && s < r + recvEnd && r < s + sendEnd) {
    return Status(StatusCode::kInvalidArgument, name + "send (" + std::to_string(sendEnd) +
                                                    " bytes) and recv (" + std::to_string(recvEnd) +
                                                    " bytes) overlap: the all-to-all is not in place");
  }
  // Enough warps for what this rank publishes and reads (ranks may differ: each rank's warps are its own).
  uint64_t reads = 0;
  for (int p = 0; p < n; ++p) reads += chunkCount64(uint64_t(args.recvCounts[p]) * esize);
  const AlltoallBlocks mine = alltoallBlocks(args.sendCounts, n, me, esize, args.splits);
  const uint64_t chunks = std::min<uint64_t>(std::max(reads, mine.end), args.layout.maxChunks * uint64_t(n));
  int blocks = 1;
  RINGGUARD_RETURN_IF_ERROR(peerGrid(size_t(chunks), n, &blocks));
  const PeerAlgorithm algorithm = args.splits ? PeerAlgorithm::kAlltoallSplits : PeerAlgorithm::kAlltoall;
  const uint32_t fpCrc = peerFingerprintCrc(args, algorithm);
  return launchPeerGrid(alltoallKernel, blocks, kThreads, stream, args, fpCrc, esize);
}

Status preloadPeerAlltoall() { return preloadKernel(alltoallKernel); }

}  // namespace peer
}  // namespace ringguard
