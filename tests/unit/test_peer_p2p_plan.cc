// Send/recv over peer windows on the host (core/peer_p2p_plan.h, core/peer_window_layout.h), the code the
// kernel of cuda/peer/sendrecv.cu runs: a message's rounds cover its bytes once, a slot at a time; the
// receiving warps of a later round are among an earlier round's; the warps split between the two sides;
// the channels' slots and words sit apart inside the window; and both ends of a message route it alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "core/peer_p2p_plan.h"
#include "core/peer_window_layout.h"

namespace ringguard {
namespace peer {
namespace {

const uint64_t kSlots[] = {kChunkBytes, 3 * kChunkBytes, uint64_t(1) << 20};

TEST(PeerP2pPlan, RoundsCoverEveryByteOnceASlotAtATime) {
  for (uint64_t slot : kSlots) {
    for (uint64_t bytes : {uint64_t(0), uint64_t(1), uint64_t(7), uint64_t(kChunkBytes), slot - 1, slot,
                           slot + 1, 2 * slot, 2 * slot + 5, 5 * slot + kChunkBytes + 3}) {
      const uint64_t rounds = p2pRounds(bytes, slot);
      EXPECT_EQ(rounds, bytes == 0 ? 1u : (bytes + slot - 1) / slot) << bytes << " bytes, slot " << slot;
      uint64_t next = 0;
      uint32_t previousChunks = ~0u;
      for (uint64_t r = 0; r < rounds; ++r) {
        const P2pRound round = p2pRound(bytes, slot, r);
        EXPECT_EQ(round.offset, next) << "round " << r;
        EXPECT_LE(round.bytes, slot);
        if (r + 1 < rounds) EXPECT_EQ(round.bytes, slot) << "every round but the last is a whole slot";
        EXPECT_EQ(round.chunks, (round.bytes + kChunkBytes - 1) / kChunkBytes);
        EXPECT_LE(uint64_t(round.chunks) * kChunkBytes, slot) << "a round fits its slot";
        EXPECT_LE(round.chunks, previousChunks) << "never more chunks than the round before";
        previousChunks = round.chunks;
        next += round.bytes;
      }
      EXPECT_EQ(next, bytes);
      // Past the end: nothing.
      const P2pRound after = p2pRound(bytes, slot, rounds);
      EXPECT_EQ(after.bytes, 0u);
      EXPECT_EQ(after.chunks, 0u);
    }
  }
  // A message of nothing is one empty round (it still has a number and an acknowledgement).
  EXPECT_EQ(p2pRounds(0, kChunkBytes), 1u);
  EXPECT_EQ(p2pRound(0, kChunkBytes, 0).chunks, 0u);
  // 64 GiB through 1 MiB slots: 65536 rounds, no overflow.
  EXPECT_EQ(p2pRounds(uint64_t(64) << 30, uint64_t(1) << 20), 65536u);
  EXPECT_EQ(p2pRound(uint64_t(64) << 30, uint64_t(1) << 20, 65535).offset, (uint64_t(64) << 30) - (1u << 20));
}

// A later round's readers are a prefix of an earlier round's (its chunks never more): the kernel's in-order
// acknowledgement relies on it, and an empty round has warp 0 alone to acknowledge it.
TEST(PeerP2pPlan, ReadingWarpsAreAPrefixThatNeverGrows) {
  for (uint32_t warps : {1u, 2u, 16u, 33u, 512u}) {
    EXPECT_EQ(p2pReadingWarps(warps, 0), 1u);
    uint32_t previous = warps;
    for (uint32_t chunks : {2000u, 1024u, 512u, 100u, 33u, 16u, 3u, 1u}) {
      const uint32_t n = p2pReadingWarps(warps, chunks);
      EXPECT_EQ(n, std::min(warps, chunks));
      EXPECT_LE(n, previous);
      previous = n;
    }
  }
}

TEST(PeerP2pPlan, WarpsSplitBetweenSendingAndReceivingInProportion) {
  EXPECT_EQ(p2pSendWarps(16, false, true, 0, 5), 0u);
  EXPECT_EQ(p2pSendWarps(16, true, false, 5, 0), 16u);
  EXPECT_EQ(p2pSendWarps(16, true, false, 0, 0), 16u);
  EXPECT_EQ(p2pSendWarps(16, true, true, 0, 0), 8u);      // two empty messages: half each
  EXPECT_EQ(p2pSendWarps(16, true, true, 10, 10), 8u);    // equal
  EXPECT_EQ(p2pSendWarps(32, true, true, 1024, 0), 31u);  // a side with nothing keeps a warp
  EXPECT_EQ(p2pSendWarps(32, true, true, 0, 1024), 1u);
  EXPECT_EQ(p2pSendWarps(32, true, true, 3, 1), 24u);
  for (uint32_t warps : {16u, 48u, 2048u}) {
    for (uint64_t s : {uint64_t(0), uint64_t(1), uint64_t(7), uint64_t(1024)}) {
      for (uint64_t r : {uint64_t(0), uint64_t(1), uint64_t(9), uint64_t(1024)}) {
        const uint32_t n = p2pSendWarps(warps, true, true, s, r);
        EXPECT_GE(n, 1u);
        EXPECT_LE(n, warps - 1) << "the receive keeps a warp";
      }
    }
  }
}

TEST(PeerP2pPlan, ChannelsIndexEveryOtherRankOnce) {
  for (int size = 2; size <= kMaxRanks; ++size) {
    for (int owner = 0; owner < size; ++owner) {
      std::vector<int> seen;
      for (int dst = 0; dst < size; ++dst) {
        if (dst == owner) continue;
        const int c = p2pChannel(owner, dst);
        EXPECT_GE(c, 0);
        EXPECT_LT(c, size - 1);
        seen.push_back(c);
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_TRUE(std::adjacent_find(seen.begin(), seen.end()) == seen.end()) << "owner " << owner;
    }
  }
}

// The channels follow the collective halves, two slots each of {table, data}, inside the window and apart;
// no channels, the layout of before.
TEST(PeerP2pPlan, WindowLayoutHoldsTwoSlotsPerDestination) {
  const size_t capacity = size_t(1) << 20;
  const WindowLayout none = makeWindowLayout(capacity);
  EXPECT_EQ(none.p2pChannels, 0);
  EXPECT_EQ(none.bytes, none.dataOffset[1] + none.capacity);
  EXPECT_EQ(makeWindowLayout(capacity, 0, 8).bytes, none.bytes) << "0 bytes: no channels";
  EXPECT_EQ(makeWindowLayout(capacity, size_t(1) << 20, 1).bytes, none.bytes) << "one rank: no channels";
  for (int size = 2; size <= kMaxRanks; ++size) {
    for (size_t p2p : {size_t(1), size_t(kChunkBytes), size_t(3000), size_t(1) << 20}) {
      const WindowLayout l = makeWindowLayout(capacity, p2p, size);
      const size_t slot = (p2p + kChunkBytes - 1) / kChunkBytes * kChunkBytes;
      EXPECT_EQ(l.p2pBytes, slot) << "whole chunks";
      EXPECT_EQ(l.p2pChunks, slot / kChunkBytes);
      EXPECT_EQ(l.p2pChannels, size - 1);
      EXPECT_GE(l.p2pTableBytes, l.p2pChunks * sizeof(ChunkEntry));
      EXPECT_EQ(l.p2pTableBytes % kLine, 0u);
      EXPECT_EQ(l.p2pOffset, none.bytes) << "after the collective halves";
      // Every slot's table and data: line aligned (data 16-byte vectors), inside the window, apart.
      std::vector<std::pair<size_t, size_t>> ranges;
      for (int c = 0; c < l.p2pChannels; ++c) {
        for (uint32_t s = 0; s < 2; ++s) {
          const size_t table = p2pTableOffset(l, c, s), data = p2pDataOffset(l, c, s);
          EXPECT_EQ(table % kLine, 0u);
          EXPECT_EQ(data % kLine, 0u);
          ranges.push_back({table, table + l.p2pChunks * sizeof(ChunkEntry)});
          ranges.push_back({data, data + l.p2pBytes});
        }
      }
      std::sort(ranges.begin(), ranges.end());
      EXPECT_GE(ranges.front().first, none.bytes);
      for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);
      EXPECT_EQ(ranges.back().second, l.bytes) << "the last slot's data ends the window";
    }
  }
  // The design's figure: 8 ranks with 1 MiB slots map 14 MiB of slots (and their tables) per rank.
  const WindowLayout eight = makeWindowLayout(capacity, size_t(1) << 20, 8);
  EXPECT_EQ(eight.bytes - eight.p2pOffset, 14 * ((size_t(1) << 20) + 1024 * sizeof(ChunkEntry)));
}

// The channels' header words: each on lines of its own, past the collectives' and the IPC close flags, inside
// the header; the rendezvous entries of every peer and parity apart.
TEST(PeerP2pPlan, ChannelWordsSitApartInTheHeader) {
  std::vector<std::pair<size_t, size_t>> words = {
      {kSeqOffset, kSeqOffset + 8},
      {kArriveOffset, kArriveOffset + 4},
      {kDoneOffset, kDoneOffset + 8},
      {kErrorOffset, kErrorOffset + 28},
      {kFingerprintOffset, kFingerprintOffset + 4 * kFingerprintWords},
      {kCountersOffset, kCountersOffset + 40},
      {kArrivalOffset, kArrivalOffset + 64 + 12},
      {kClosedOffset, kClosedOffset + 4 * kMaxRanks},
      {kP2pStateOffset, kP2pStateOffset + 16},
      {kP2pCountersOffset, kP2pCountersOffset + 8 * size_t(kP2pRoundsReceived + kMaxRanks)},
      {kAckOffset, kAckOffset + 8 * kMaxRanks},
  };
  for (int p = 0; p < kMaxRanks; ++p) {
    for (uint64_t m : {uint64_t(1), uint64_t(2)}) {
      words.push_back(
          {messageEntryOffset(kPostedOffset, p, m), messageEntryOffset(kPostedOffset, p, m) + 32});
      words.push_back(
          {messageEntryOffset(kOfferedOffset, p, m), messageEntryOffset(kOfferedOffset, p, m) + 32});
    }
  }
  EXPECT_EQ(messageEntryOffset(kPostedOffset, 3, 5), messageEntryOffset(kPostedOffset, 3, 7)) << "by parity";
  std::sort(words.begin(), words.end());
  for (size_t i = 1; i < words.size(); ++i) EXPECT_LE(words[i - 1].second, words[i].first) << i;
  EXPECT_LE(words.back().second, kHeaderBytes);
  // The channels' words share no line with the collectives' (a send/recv and a collective never touch the
  // same line).
  EXPECT_GE(kP2pStateOffset, kClosedOffset + kLine);
}

// Both ends of a message decide from what they have alike: every (sender, receiver) pair routes the same on
// both sides, and only with channels and another rank at the other end.
TEST(PeerP2pPlan, BothEndsOfAMessageRouteItAlike) {
  const size_t slot = size_t(1) << 20;
  for (int size = 1; size <= kMaxRanks; ++size) {
    for (int s = 0; s < size; ++s) {
      for (int d = 0; d < size; ++d) {
        for (size_t bytes : {size_t(0), slot}) {
          const bool sender = peerPathTakesSendRecv(size, s, d, -1, bytes);
          const bool receiver = peerPathTakesSendRecv(size, d, -1, s, bytes);
          EXPECT_EQ(sender, receiver) << s << " -> " << d;
          EXPECT_EQ(sender, bytes != 0 && size >= 2 && s != d) << s << " -> " << d;
        }
      }
    }
  }
  // A ring shift: each rank sends to the next and receives from the previous, in one call.
  for (int size = 2; size <= kMaxRanks; ++size) {
    for (int r = 0; r < size; ++r)
      EXPECT_TRUE(peerPathTakesSendRecv(size, r, (r + 1) % size, (r + size - 1) % size, slot));
  }
  EXPECT_FALSE(peerPathTakesSendRecv(4, 1, -1, -1, slot)) << "nothing to move";
  EXPECT_FALSE(peerPathTakesSendRecv(4, 1, 1, 1, slot)) << "a message to itself: the pipeline's copy";
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
