// The all-to-all's planning over peer windows (core/peer_alltoall_plan.h), the code cuda/peer/alltoall.cu
// runs, here on the host: where a rank publishes each block, the block table's bytes as the kernel's lanes
// write and read them, a whole exchange simulated over host "windows", and the checks every reader makes of
// every rank's table: ranks whose splits disagree all find the same pair, and no table, however wrong, lets a
// reader read outside a window.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/peer_alltoall_plan.h"
#include "core/peer_plan.h"

namespace ringguard {
namespace peer {
namespace {

constexpr uint64_t kMaxChunks = 4096;  // a 4 MiB window

// counts[p][q]: elements rank p sends rank q (so rank q receives counts[p][q] from p).
using Matrix = std::vector<std::vector<size_t>>;

Matrix randomSplits(int size, std::mt19937& gen, size_t most) {
  Matrix m(size_t(size), std::vector<size_t>(size_t(size), 0));
  for (auto& row : m)
    for (size_t& c : row) c = gen() % 4 == 0 ? 0 : gen() % (most + 1);  // zero-size blocks among them
  return m;
}

// Rank p's table chunk as its kernel publishes it: lane q's vector 0 at byte 16 q, vector 1 at 512 + 16 q.
std::vector<uint8_t> tableChunk(const Matrix& m, int size, int p, size_t esize) {
  std::vector<size_t> recv(size_t(size), 0);
  for (int q = 0; q < size; ++q) recv[size_t(q)] = m[size_t(q)][size_t(p)];
  const AlltoallBlocks b = alltoallBlocks(m[size_t(p)].data(), size, p, esize, /*splits=*/true);
  std::vector<uint8_t> chunk(kChunkBytes, 0);
  for (int q = 0; q < size; ++q) {
    uint32_t sw[4], rw[4];
    alltoallTableEntry(b.first[q], m[size_t(p)][size_t(q)], recv[size_t(q)], sw, rw);
    std::memcpy(chunk.data() + kAlltoallSendEntries + 16 * size_t(q), sw, 16);
    std::memcpy(chunk.data() + kAlltoallRecvEntries + 16 * size_t(q), rw, 16);
  }
  return chunk;
}

// What a reader holds once it read every rank's table chunk (its own row included, as the kernel's own).
AlltoallTables readTables(const std::vector<std::vector<uint8_t>>& chunks, int size) {
  AlltoallTables t{};
  for (int p = 0; p < size; ++p) {
    for (int q = 0; q < size; ++q) {
      uint32_t sw[4], rw[4];
      std::memcpy(sw, chunks[size_t(p)].data() + kAlltoallSendEntries + 16 * size_t(q), 16);
      std::memcpy(rw, chunks[size_t(p)].data() + kAlltoallRecvEntries + 16 * size_t(q), 16);
      setAlltoallTableRow(t, p, q, sw, rw);
    }
  }
  return t;
}

TEST(PeerAlltoallPlan, BlocksAreContiguousChunkAlignedInDestinationOrderAfterTheTable) {
  std::mt19937 gen(7);
  for (int size = 1; size <= kMaxRanks; ++size) {
    for (int trial = 0; trial < 20; ++trial) {
      const Matrix m = randomSplits(size, gen, 3000);
      for (size_t esize : {size_t(1), size_t(2), size_t(4), size_t(8), size_t(16)}) {
        for (int p = 0; p < size; ++p) {
          for (bool splits : {false, true}) {
            const AlltoallBlocks b = alltoallBlocks(m[size_t(p)].data(), size, p, esize, splits);
            uint64_t next = splits ? kAlltoallTableChunks : 0;
            for (int q = 0; q < size; ++q) {
              EXPECT_EQ(b.first[q], next) << "rank " << p << " block for " << q;
              if (q != p) next += chunkCount64(m[size_t(p)][size_t(q)] * esize);
            }
            EXPECT_EQ(b.end, next);
          }
        }
      }
    }
  }
}

TEST(PeerAlltoallPlan, EqualFormReadersFindTheirBlockWithoutATable) {
  for (int size = 2; size <= kMaxRanks; ++size) {
    for (size_t count : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(1000), size_t(1) << 20}) {
      const std::vector<size_t> counts(size_t(size), count);
      const uint64_t blockChunks = chunkCount64(count * 4);
      for (int p = 0; p < size; ++p) {
        const AlltoallBlocks b = alltoallBlocks(counts.data(), size, p, 4, /*splits=*/false);
        EXPECT_EQ(b.end, blockChunks * uint64_t(size - 1));
        for (int q = 0; q < size; ++q) {
          if (q != p) EXPECT_EQ(alltoallEqualFirst(blockChunks, p, q), b.first[q]) << p << " -> " << q;
        }
      }
    }
  }
}

TEST(PeerAlltoallPlan, TableEntriesRoundTripThroughTheLanesBytes) {
  Matrix m = {{0, 5, 0}, {(size_t(1) << 40) + 3, 0, 1}, {7, 1024, 9}};
  std::vector<std::vector<uint8_t>> chunks;
  for (int p = 0; p < 3; ++p) chunks.push_back(tableChunk(m, 3, p, 8));
  const AlltoallTables t = readTables(chunks, 3);
  for (int p = 0; p < 3; ++p) {
    const AlltoallBlocks b = alltoallBlocks(m[size_t(p)].data(), 3, p, 8, true);
    for (int q = 0; q < 3; ++q) {
      EXPECT_EQ(t.send[p][q], m[size_t(p)][size_t(q)]);
      EXPECT_EQ(t.recv[p][q], m[size_t(q)][size_t(p)]);
      EXPECT_EQ(t.first[p][q], b.first[q]);
    }
  }
  // Past the ranks' entries the chunk is zeros (the padding the CRC covers).
  for (size_t i = 16 * 3; i < kAlltoallRecvEntries; ++i) EXPECT_EQ(chunks[0][i], 0) << i;
  for (size_t i = kAlltoallRecvEntries + 16 * 3; i < kChunkBytes; ++i) EXPECT_EQ(chunks[0][i], 0) << i;
}

// The whole exchange on the host: every rank lays out its window (table, then its blocks) as the kernel
// does, every reader checks every table and copies its block from each peer's window: each output is exactly
// the blocks sent to it.
TEST(PeerAlltoallPlan, AnExchangeOverHostWindowsDeliversEveryBlock) {
  std::mt19937 gen(11);
  for (int size = 2; size <= kMaxRanks; ++size) {
    const Matrix m = randomSplits(size, gen, 700);
    const size_t esize = 4;
    std::vector<std::vector<uint8_t>> windows(size_t(size),
                                              std::vector<uint8_t>(kMaxChunks * kChunkBytes, 0));
    std::vector<std::vector<uint8_t>> tables;
    // Rank p's element i for q: p * 1000003 + q * 10007 + i.
    auto value = [](int p, int q, size_t i) {
      return uint32_t(p) * 1000003u + uint32_t(q) * 10007u + uint32_t(i);
    };
    for (int p = 0; p < size; ++p) {
      tables.push_back(tableChunk(m, size, p, esize));
      std::memcpy(windows[size_t(p)].data(), tables.back().data(), kChunkBytes);
      const AlltoallBlocks b = alltoallBlocks(m[size_t(p)].data(), size, p, esize, true);
      ASSERT_LE(b.end, kMaxChunks);
      for (int q = 0; q < size; ++q) {
        if (q == p) continue;
        for (size_t i = 0; i < m[size_t(p)][size_t(q)]; ++i) {
          const uint32_t v = value(p, q, i);
          std::memcpy(windows[size_t(p)].data() + b.first[q] * kChunkBytes + i * esize, &v, esize);
        }
      }
    }
    const AlltoallTables t = readTables(tables, size);
    const AlltoallVerdict v = checkAlltoallTables(t, size, esize, kMaxChunks);
    ASSERT_EQ(v.code, PeerError::kNone) << "sender " << v.sender << " receiver " << v.receiver;
    for (int me = 0; me < size; ++me) {
      for (int p = 0; p < size; ++p) {
        if (p == me) continue;
        const size_t count = t.send[p][me];
        ASSERT_EQ(count, m[size_t(p)][size_t(me)]);
        for (size_t i = 0; i < count; ++i) {
          uint32_t got = 0;
          std::memcpy(&got, windows[size_t(p)].data() + t.first[p][me] * kChunkBytes + i * esize, esize);
          ASSERT_EQ(got, value(p, me, i)) << "rank " << me << " from " << p << " element " << i;
        }
      }
    }
  }
}

// Ranks whose splits disagree: every rank holds the same tables, so every rank finds the same first pair
// (sender, receiver) with both counts, whichever rank made the mistake.
TEST(PeerAlltoallPlan, DisagreeingSplitsAreTheSamePairOnEveryRank) {
  for (int size = 2; size <= kMaxRanks; ++size) {
    std::mt19937 gen{uint32_t(size)};
    const Matrix agreed = randomSplits(size, gen, 50);
    for (int sender = 0; sender < size; ++sender) {
      for (int receiver = 0; receiver < size; ++receiver) {
        if (sender == receiver) continue;
        // The receiver expects one element more than the sender sends.
        std::vector<std::vector<uint8_t>> chunks;
        for (int p = 0; p < size; ++p) {
          Matrix view = agreed;  // what rank p believes: its own row and the column it receives
          if (p == receiver) ++view[size_t(sender)][size_t(receiver)];
          chunks.push_back(tableChunk(view, size, p, 2));
        }
        const AlltoallTables t = readTables(chunks, size);
        const AlltoallVerdict v = checkAlltoallTables(t, size, 2, kMaxChunks);
        EXPECT_EQ(v.code, PeerError::kSplitMismatch);
        EXPECT_EQ(v.sender, sender);
        EXPECT_EQ(v.receiver, receiver);
        EXPECT_EQ(v.seen, agreed[size_t(sender)][size_t(receiver)]);
        EXPECT_EQ(v.expected, agreed[size_t(sender)][size_t(receiver)] + 1);
        // The sender's own check of its row finds it too (lane `sender` of every rank's check).
        EXPECT_EQ(checkAlltoallSender(t, sender, size, 2, kMaxChunks).code, PeerError::kSplitMismatch);
      }
    }
  }
  // Two disagreements: the first sender in rank order, then the first receiver, is the one named.
  Matrix m = {{0, 1, 1}, {1, 0, 1}, {1, 1, 0}};
  std::vector<std::vector<uint8_t>> chunks;
  for (int p = 0; p < 3; ++p) {
    Matrix view = m;
    if (p == 2) view[1][2] = 5;  // rank 2 expects 5 from rank 1
    if (p == 0) view[2][0] = 6;  // rank 0 expects 6 from rank 2
    chunks.push_back(tableChunk(view, 3, p, 4));
  }
  const AlltoallVerdict v = checkAlltoallTables(readTables(chunks, 3), 3, 4, kMaxChunks);
  EXPECT_EQ(v.code, PeerError::kSplitMismatch);
  EXPECT_EQ(v.sender, 1);
  EXPECT_EQ(v.receiver, 2);
}

TEST(PeerAlltoallPlan, ABlockOutsideTheWindowOrOverTheTableIsNamed) {
  // Rank 1's blocks do not fit: 3 blocks of 2 MiB on a 4 MiB window (every rank fails naming it).
  const size_t big = (size_t(2) << 20) / 4;
  Matrix m = {{0, big, 1, 1}, {big, 0, big, big}, {1, big, 0, 1}, {1, big, 1, 0}};
  std::vector<std::vector<uint8_t>> chunks;
  for (int p = 0; p < 4; ++p) chunks.push_back(tableChunk(m, 4, p, 4));
  AlltoallTables t = readTables(chunks, 4);
  AlltoallVerdict v = checkAlltoallTables(t, 4, 4, kMaxChunks);
  EXPECT_EQ(v.code, PeerError::kBlockTable);
  EXPECT_EQ(v.sender, 1);
  EXPECT_EQ(v.receiver, 2);  // its second block is the first past the window (1 + 2048 + 2048 chunks)
  EXPECT_EQ(v.expected, kMaxChunks);
  EXPECT_EQ(v.seen, 1u + 2048u + 2048u);

  // A table that points a block at the table itself, or past the window, or that claims a count whose bytes
  // overflow: named, never read.
  m = {{0, 3}, {3, 0}};
  chunks = {tableChunk(m, 2, 0, 4), tableChunk(m, 2, 1, 4)};
  t = readTables(chunks, 2);
  ASSERT_EQ(checkAlltoallTables(t, 2, 4, kMaxChunks).code, PeerError::kNone);
  AlltoallTables bad = t;
  bad.first[0][1] = 0;
  EXPECT_EQ(checkAlltoallTables(bad, 2, 4, kMaxChunks).code, PeerError::kBlockTable);
  bad = t;
  bad.first[1][0] = uint32_t(kMaxChunks);  // one chunk long, starting at the end
  v = checkAlltoallTables(bad, 2, 4, kMaxChunks);
  EXPECT_EQ(v.code, PeerError::kBlockTable);
  EXPECT_EQ(v.sender, 1);
  bad = t;
  bad.send[0][1] = bad.recv[1][0] = ~uint64_t(0) / 2;  // agreed, but no window holds it
  v = checkAlltoallTables(bad, 2, 4, kMaxChunks);
  EXPECT_EQ(v.code, PeerError::kBlockTable);
  EXPECT_EQ(v.sender, 0);
  // An empty block may start anywhere up to the window's end, and is never read.
  bad = t;
  bad.send[0][1] = bad.recv[1][0] = 0;
  bad.first[0][1] = uint32_t(kMaxChunks);
  EXPECT_EQ(checkAlltoallTables(bad, 2, 4, kMaxChunks).code, PeerError::kNone);
}

// Tables of random words (a buggy or hostile peer): whatever the check accepts lies inside the window.
TEST(PeerAlltoallPlan, NoTableTheCheckAcceptsReadsOutsideTheWindow) {
  std::mt19937_64 gen(5);
  int accepted = 0;
  for (int trial = 0; trial < 50000; ++trial) {
    const int size = 2 + int(gen() % (kMaxRanks - 1));
    const size_t esize = size_t(1) << (gen() % 5);
    AlltoallTables t{};
    for (int p = 0; p < size; ++p) {
      for (int q = 0; q < size; ++q) {
        // Mostly small values so that some tables pass; sometimes anything.
        const bool wild = gen() % 8 == 0;
        t.first[p][q] = wild ? uint32_t(gen()) : uint32_t(gen() % (kMaxChunks + 2));
        t.send[p][q] = wild ? gen() : gen() % 5000;
      }
    }
    for (int p = 0; p < size; ++p)
      for (int q = 0; q < size; ++q) t.recv[q][p] = gen() % 4 == 0 ? gen() % 5000 : t.send[p][q];
    if (checkAlltoallTables(t, size, esize, kMaxChunks).code != PeerError::kNone) continue;
    ++accepted;
    for (int p = 0; p < size; ++p) {
      for (int q = 0; q < size; ++q) {
        if (p == q) continue;
        ASSERT_EQ(t.send[p][q], t.recv[q][p]);
        ASSERT_GE(t.first[p][q], kAlltoallTableChunks);
        ASSERT_LE(uint64_t(t.first[p][q]) * kChunkBytes + t.send[p][q] * esize, kMaxChunks * kChunkBytes);
      }
    }
  }
  EXPECT_GT(accepted, 0);  // the property was exercised
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
