#pragma once
// The planning of the one-sided collectives over peer windows (docs/design/protocol.md, "The one-sided
// protocol"): which chunks a rank publishes, which it reduces or copies and from whom. HOST_DEVICE, so the
// kernels (cuda/peer/*.cu) and the host tests (tests/unit/test_peer_plan.cc, on CI without a GPU) run the
// same code.
//
// Chunks are kChunkBytes (1 KiB) of the published bytes. Every element size divides a chunk, so a chunk
// boundary is an element boundary and a two-shot allreduce reduces every element exactly as the one-shot
// does: all ranks' values in rank order 0..N-1.
#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "core/peer_window_layout.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace peer {

// The kernel shapes of the one-sided protocol. Folded into the fingerprint every chunk carries, so ranks that
// run different shapes for one call (a different two-shot threshold, say) fail naming each other.
enum class PeerAlgorithm : uint32_t {
  kAllreduceOneShot = 0,
  kAllreduceTwoShot = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kReduceScatter = 4,
  kAlltoall = 5,        // one count for every pair: every reader computes where its block is
  kAlltoallSplits = 6,  // counts per pair: every rank publishes a block table (core/peer_alltoall_plan.h)
  kSendRecv = 7,        // a message on the channel of one ordered pair (core/peer_p2p_plan.h)
  kDecline = 8,         // a call this rank's checks rejected: its arrival alone (cuda/peer/decline.cu)
};

struct ChunkRange {
  uint32_t begin = 0;  // first chunk
  uint32_t end = 0;    // one past the last
  RINGGUARD_HOST_DEVICE bool contains(uint32_t c) const { return c >= begin && c < end; }
  RINGGUARD_HOST_DEVICE uint32_t size() const { return end - begin; }
};

RINGGUARD_HOST_DEVICE inline uint32_t chunkCount(size_t bytes) {
  return uint32_t((bytes + kChunkBytes - 1) / kChunkBytes);
}

// Two-shot allreduce: rank r reduces (and publishes the result of) chunks [chunks * r / n, chunks * (r+1) /
// n): contiguous, sizes differing by at most one, empty when there are fewer chunks than ranks.
RINGGUARD_HOST_DEVICE inline ChunkRange twoShotShare(uint32_t chunks, int size, int rank) {
  ChunkRange s;
  s.begin = uint32_t(uint64_t(chunks) * uint64_t(rank) / uint64_t(size));
  s.end = uint32_t(uint64_t(chunks) * uint64_t(rank + 1) / uint64_t(size));
  return s;
}

// The rank whose two-shot share holds chunk c (c < chunks).
RINGGUARD_HOST_DEVICE inline int twoShotOwner(uint32_t chunks, int size, uint32_t c) {
  int owner = 0;
  for (int r = 1; r < size; ++r) {
    if (twoShotShare(chunks, size, r).begin <= c) owner = r;
  }
  return owner;
}

// Reduce-scatter: rank r's result is bytes [r * shareBytes, (r + 1) * shareBytes) of every rank's input. The
// chunks it reads from every rank are those that overlap that range; a chunk on a share boundary is read by
// both ranks, each writing only its own bytes.
RINGGUARD_HOST_DEVICE inline ChunkRange reduceScatterChunks(size_t shareBytes, int rank) {
  ChunkRange s;
  if (shareBytes == 0) return s;
  const size_t lo = shareBytes * size_t(rank), hi = lo + shareBytes;
  s.begin = uint32_t(lo / kChunkBytes);
  s.end = uint32_t((hi + kChunkBytes - 1) / kChunkBytes);
  return s;
}

// Does some rank other than `rank` read chunk c of `rank`'s reduce-scatter input? (Only those are published.)
RINGGUARD_HOST_DEVICE inline bool reduceScatterChunkReadByPeer(size_t shareBytes, int size, int rank,
                                                               uint32_t c) {
  for (int q = 0; q < size; ++q) {
    if (q != rank && reduceScatterChunks(shareBytes, q).contains(c)) return true;
  }
  return false;
}

// Which allreduce kernel runs: the one-shot up to `twoShotBytes` (exclusive), the two-shot from there on. A
// pure function of arguments every rank has alike, so every rank picks the same.
RINGGUARD_HOST_DEVICE inline PeerAlgorithm chooseAllreduce(size_t bytes, int size, size_t twoShotBytes) {
  return size >= 2 && bytes >= twoShotBytes ? PeerAlgorithm::kAllreduceTwoShot
                                            : PeerAlgorithm::kAllreduceOneShot;
}

// Does the peer path take a collective of `kind` whose every rank publishes `publishedBytes` (the allreduce's
// and reduce-scatter's whole input, the all-gather's and broadcast's count, the equal all-to-all's chunked
// blocks, the split all-to-all's block table alone: its blocks differ per rank, so no rank can route by them)
// on `size` ranks with windows of `capacity` bytes? Every collective but send/recv (its channels decide,
// peer_p2p_plan.h) when it fits. Arguments every rank has alike, so every rank routes a call alike.
inline bool peerPathTakes(CollectiveKind kind, size_t publishedBytes, int size, size_t capacity) {
  if (size < 2 || publishedBytes > capacity) return false;
  switch (kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kAllgather:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAlltoall:
      return true;
    default:
      return false;
  }
}

}  // namespace peer
}  // namespace ringguard
