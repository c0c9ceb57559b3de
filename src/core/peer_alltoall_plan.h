#pragma once
// The planning of the all-to-all over peer windows (docs/design/protocol.md, "All-to-all"): where a rank
// publishes its block for each destination, the block table of the split form, and the checks a reader makes
// of every rank's table before it reads a byte. HOST_DEVICE: the kernel (cuda/peer/alltoall.cu) and the host
// tests (tests/unit/test_peer_alltoall_plan.cc, on CI without a GPU) run the same code.
//
// A rank publishes the blocks its peers need in destination order (its own skipped: that one is a local
// copy), each starting on a chunk boundary, so a reader reads whole chunks of its block and nothing else.
//
//   equal form (one count for every pair)  blocks from chunk 0, each chunkCount(count * esize) chunks: a
//                                          reader computes where its block is (alltoallEqualFirst)
//   split form (counts per pair)           chunk 0 is the block table, blocks from chunk 1: a reader cannot
//                                          compute where its block is, so it reads the table, verified as
//                                          any chunk, and trusts nothing in it before checkAlltoallTables
//
// Table chunk layout (kChunkBytes, zero padded): for destination q < kMaxRanks, at byte 16 q the words
// {first chunk of the block for q, 0, send count low, send count high}, and at byte 512 + 16 q {receive count
// from q low, high, 0, 0}. Lane q of the warp that reads the chunk holds both (its vectors 0 and 1).
#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "core/peer_window_layout.h"

namespace ringguard {
namespace peer {

// Chunks before the first block in the split form: the block table.
inline constexpr uint32_t kAlltoallTableChunks = 1;
inline constexpr size_t kAlltoallSendEntries = 0;    // byte of destination 0's send entry in the table
inline constexpr size_t kAlltoallRecvEntries = 512;  // byte of source 0's receive entry: lane vector 1
static_assert(kAlltoallRecvEntries == 32 * 16, "the receive entries are the lanes' second vectors");
static_assert(kAlltoallRecvEntries + 16 * kMaxRanks <= kChunkBytes, "the table is one chunk");

RINGGUARD_HOST_DEVICE inline uint64_t chunkCount64(uint64_t bytes) {
  return bytes / kChunkBytes + (bytes % kChunkBytes != 0 ? 1 : 0);
}

// One rank's publication: the chunk where its block for each destination starts (its own: where it would),
// and one past its last chunk. `end` may exceed the window; `first` saturates at 2^32 - 1.
struct AlltoallBlocks {
  uint32_t first[kMaxRanks];
  uint64_t end;
};

RINGGUARD_HOST_DEVICE inline AlltoallBlocks alltoallBlocks(const size_t* sendCounts, int size, int rank,
                                                           size_t esize, bool splits) {
  AlltoallBlocks b{};
  uint64_t next = splits ? kAlltoallTableChunks : 0;
  for (int q = 0; q < size && q < kMaxRanks; ++q) {
    b.first[q] = next > 0xffffffffull ? 0xffffffffu : uint32_t(next);
    if (q == rank) continue;
    // A count whose bytes overflow 64 bits cannot fit any window: saturate instead of wrapping.
    const uint64_t count = sendCounts[q];
    const uint64_t chunks = count > ~uint64_t(0) / esize ? ~uint64_t(0) / 2 : chunkCount64(count * esize);
    next = chunks > ~uint64_t(0) / 2 - next ? ~uint64_t(0) / 2 : next + chunks;
  }
  b.end = next;
  return b;
}

// The equal form's block of `producer` for `dest` (dest != producer): every block `blockChunks` chunks long.
RINGGUARD_HOST_DEVICE inline uint64_t alltoallEqualFirst(uint64_t blockChunks, int producer, int dest) {
  return uint64_t(dest - (dest > producer ? 1 : 0)) * blockChunks;
}

// The two 16-byte entries of the table for destination q, as words (lane q's vectors 0 and 1).
RINGGUARD_HOST_DEVICE inline void alltoallTableEntry(uint32_t first, uint64_t send, uint64_t recv,
                                                     uint32_t (&sendWords)[4], uint32_t (&recvWords)[4]) {
  sendWords[0] = first;
  sendWords[1] = 0;
  sendWords[2] = uint32_t(send);
  sendWords[3] = uint32_t(send >> 32);
  recvWords[0] = uint32_t(recv);
  recvWords[1] = uint32_t(recv >> 32);
  recvWords[2] = 0;
  recvWords[3] = 0;
}

// Every rank's table as a reader holds it once read and verified: row p is rank p's (this rank's own row from
// its arguments). Plain data, so it can live in a kernel's shared memory.
struct AlltoallTables {
  uint32_t first[kMaxRanks][kMaxRanks];  // [p][q]: chunk of p's window where its block for q starts
  uint64_t send[kMaxRanks][kMaxRanks];   // [p][q]: elements p sends to q
  uint64_t recv[kMaxRanks][kMaxRanks];   // [p][q]: elements p expects from q
};

RINGGUARD_HOST_DEVICE inline void setAlltoallTableRow(AlltoallTables& t, int p, int q,
                                                      const uint32_t (&sendWords)[4],
                                                      const uint32_t (&recvWords)[4]) {
  t.first[p][q] = sendWords[0];
  t.send[p][q] = uint64_t(sendWords[2]) | uint64_t(sendWords[3]) << 32;
  t.recv[p][q] = uint64_t(recvWords[0]) | uint64_t(recvWords[1]) << 32;
}

// What a check of the tables found: the first pair (sender, receiver), in that order, whose entry is wrong.
struct AlltoallVerdict {
  PeerError code;     // kNone, kSplitMismatch or kBlockTable
  int sender;         // the rank whose table holds the entry
  int receiver;       // the destination of the block
  uint64_t expected;  // kSplitMismatch: what the receiver expects; kBlockTable: the window's chunks
  uint64_t seen;      // kSplitMismatch: what the sender sends; kBlockTable: one past the block's last chunk
};

// Rank p's blocks against every receiver's expectation and the window: for q = 0.. (q != p), the count p
// sends q must be the count q expects from p (kSplitMismatch), and the block must start after the table and
// end inside the window's `maxChunks` (kBlockTable). Nothing here reads past the tables, so a table full of
// garbage is an error, never an out-of-bounds read.
RINGGUARD_HOST_DEVICE inline AlltoallVerdict checkAlltoallSender(const AlltoallTables& t, int p, int size,
                                                                 size_t esize, uint64_t maxChunks) {
  for (int q = 0; q < size && q < kMaxRanks; ++q) {
    if (q == p) continue;
    const uint64_t send = t.send[p][q], expected = t.recv[q][p];
    if (send != expected) return AlltoallVerdict{PeerError::kSplitMismatch, p, q, expected, send};
    const uint64_t first = t.first[p][q];
    const uint64_t end =
        send > maxChunks * kChunkBytes / esize ? ~uint64_t(0) : first + chunkCount64(send * esize);
    if (first < kAlltoallTableChunks || end > maxChunks)
      return AlltoallVerdict{PeerError::kBlockTable, p, q, maxChunks, end};
  }
  return AlltoallVerdict{PeerError::kNone, -1, -1, 0, 0};
}

// Every sender's, in rank order: every rank holds the same tables (each one CRC-checked), so every rank finds
// the same first bad pair, and all of them fail naming it.
RINGGUARD_HOST_DEVICE inline AlltoallVerdict checkAlltoallTables(const AlltoallTables& t, int size,
                                                                 size_t esize, uint64_t maxChunks) {
  for (int p = 0; p < size && p < kMaxRanks; ++p) {
    const AlltoallVerdict v = checkAlltoallSender(t, p, size, esize, maxChunks);
    if (v.code != PeerError::kNone) return v;
  }
  return AlltoallVerdict{PeerError::kNone, -1, -1, 0, 0};
}

}  // namespace peer
}  // namespace ringguard
