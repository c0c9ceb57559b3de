// The planning of the one-sided collectives (core/peer_plan.h), the code the kernels of cuda/peer/ run, here
// on the host: the two-shot allreduce's shares cover every chunk once, in rank order, and give every element
// the bits of the one-shot; the reduce-scatter's chunks are exactly those its share overlaps, and a rank
// publishes exactly the chunks another rank reads; the allreduce kernel is picked from the size alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "core/peer_plan.h"
#include "core/reduce.h"

namespace ringguard {
namespace peer {
namespace {

const uint32_t kChunkCounts[] = {0, 1, 2, 3, 7, 8, 9, 1000, 65536, 65537};

TEST(PeerPlan, ChunkCountRoundsUp) {
  EXPECT_EQ(chunkCount(0), 0u);
  EXPECT_EQ(chunkCount(1), 1u);
  EXPECT_EQ(chunkCount(kChunkBytes), 1u);
  EXPECT_EQ(chunkCount(kChunkBytes + 1), 2u);
  EXPECT_EQ(chunkCount(size_t(64) << 20), 65536u);
  // Every element size divides a chunk: a chunk boundary is an element boundary.
  for (DataType t : kAllDataTypes) EXPECT_EQ(kChunkBytes % dataTypeSize(t), 0u) << dataTypeName(t);
}

TEST(PeerPlan, TwoShotSharesCoverEveryChunkOnceInRankOrder) {
  for (uint32_t chunks : kChunkCounts) {
    for (int size = 1; size <= kMaxRanks; ++size) {
      uint32_t next = 0;
      for (int r = 0; r < size; ++r) {
        const ChunkRange s = twoShotShare(chunks, size, r);
        EXPECT_EQ(s.begin, next) << chunks << " chunks, rank " << r << " of " << size;
        EXPECT_LE(s.begin, s.end);
        // Balanced: floor or ceil of chunks / size.
        EXPECT_GE(s.size(), chunks / uint32_t(size));
        EXPECT_LE(s.size(), (chunks + uint32_t(size) - 1) / uint32_t(size));
        for (uint32_t c = s.begin; c < s.end; ++c) ASSERT_EQ(twoShotOwner(chunks, size, c), r) << c;
        next = s.end;
      }
      EXPECT_EQ(next, chunks) << chunks << " chunks over " << size;
    }
  }
}

TEST(PeerPlan, ReduceScatterReadsTheChunksItsShareOverlapsAndPublishesWhatOthersRead) {
  for (size_t shareBytes : {size_t(0), size_t(1), size_t(4), size_t(12), size_t(1000), size_t(1024),
                            size_t(1028), size_t(3 * 4096 + 8), size_t(1) << 20}) {
    for (int size = 1; size <= kMaxRanks; ++size) {
      const uint32_t chunks = chunkCount(shareBytes * size_t(size));
      for (int r = 0; r < size; ++r) {
        const ChunkRange s = reduceScatterChunks(shareBytes, r);
        const size_t lo = shareBytes * size_t(r), hi = lo + shareBytes;
        for (uint32_t c = 0; c < chunks; ++c) {
          const size_t clo = size_t(c) * kChunkBytes, chi = clo + kChunkBytes;
          const bool overlaps = clo < hi && lo < chi;
          ASSERT_EQ(s.contains(c), overlaps) << "share " << shareBytes << ", chunk " << c << ", rank " << r;
          bool readByOther = false;
          for (int q = 0; q < size; ++q) {
            const size_t qlo = shareBytes * size_t(q), qhi = qlo + shareBytes;
            readByOther |= q != r && clo < qhi && qlo < chi;
          }
          ASSERT_EQ(reduceScatterChunkReadByPeer(shareBytes, size, r, c), readByOther)
              << "share " << shareBytes << ", chunk " << c << ", rank " << r;
        }
        EXPECT_LE(s.end, chunks);
      }
    }
  }
}

TEST(PeerPlan, AllreduceKernelFromTheSizeAlone) {
  const size_t mib = size_t(1) << 20;
  EXPECT_EQ(chooseAllreduce(mib - 1, 4, mib), PeerAlgorithm::kAllreduceOneShot);
  EXPECT_EQ(chooseAllreduce(mib, 4, mib), PeerAlgorithm::kAllreduceTwoShot);
  EXPECT_EQ(chooseAllreduce(64 * mib, 1, mib), PeerAlgorithm::kAllreduceOneShot);  // one rank
  EXPECT_EQ(chooseAllreduce(0, 2, 0), PeerAlgorithm::kAllreduceTwoShot);           // threshold 0: always
}

// Every collective that fits the window (send/recv by its channels, peer_p2p_plan.h); nothing larger than
// the window, nothing on one rank.
TEST(PeerPlan, WhatThePeerPathTakes) {
  const size_t cap = size_t(1) << 20;
  for (CollectiveKind k : {CollectiveKind::kAllreduce, CollectiveKind::kAllgather, CollectiveKind::kBroadcast,
                           CollectiveKind::kReduceScatter, CollectiveKind::kAlltoall}) {
    EXPECT_TRUE(peerPathTakes(k, cap, 2, cap)) << int(k);
    EXPECT_TRUE(peerPathTakes(k, 0, 4, cap)) << int(k);
    EXPECT_FALSE(peerPathTakes(k, cap + 1, 4, cap)) << int(k);
    EXPECT_FALSE(peerPathTakes(k, 4, 1, cap)) << int(k);
  }
  EXPECT_FALSE(peerPathTakes(CollectiveKind::kSendRecv, 4, 4, cap));
}

// The two-shot as its kernel plans it, run on the host: every rank reduces the chunks of its share over
// ranks 0..N-1 in order, the others copy them. Inputs are random floats (no two orders give the same sums),
// and the result must equal the one-shot's, element by element, bit for bit.
TEST(PeerPlan, TwoShotGivesTheOneShotsBits) {
  for (int size = 2; size <= kMaxRanks; ++size) {
    for (size_t count : {size_t(1), size_t(255), size_t(256 * 5 + 3), size_t(10000)}) {
      const size_t bytes = count * 4;
      std::vector<std::vector<float>> in(static_cast<size_t>(size), std::vector<float>(count));
      std::mt19937 gen(uint32_t(size * 100000 + count));
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      for (auto& v : in)
        for (float& x : v) x = dist(gen);
      auto reduceRange = [&](size_t from, size_t n, float* out) {
        std::memcpy(out, in[0].data() + from, n * 4);
        for (int p = 1; p < size; ++p)
          reduceHost(DataType::kFloat32, ReduceOp::kSum, out, in[size_t(p)].data() + from, out, n,
                     p == size - 1, size, p == 1);
      };
      std::vector<float> oneShot(count);
      reduceRange(0, count, oneShot.data());
      std::vector<float> twoShot(count, -7.f);
      const uint32_t chunks = chunkCount(bytes);
      std::vector<int> reducedBy(chunks, -1);
      for (int r = 0; r < size; ++r) {
        const ChunkRange s = twoShotShare(chunks, size, r);
        for (uint32_t c = s.begin; c < s.end; ++c) {
          const size_t from = size_t(c) * kChunkBytes / 4;
          const size_t n = std::min(count, from + kChunkBytes / 4) - from;
          reduceRange(from, n, twoShot.data() + from);
          ASSERT_EQ(reducedBy[c], -1) << "chunk " << c << " reduced twice";
          reducedBy[c] = r;
        }
      }
      for (uint32_t c = 0; c < chunks; ++c) ASSERT_NE(reducedBy[c], -1) << "chunk " << c << " never reduced";
      EXPECT_EQ(std::memcmp(oneShot.data(), twoShot.data(), bytes), 0) << size << " ranks, count " << count;
    }
  }
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
