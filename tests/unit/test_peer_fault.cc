// The one-sided device path's fault injection (core/peer_fault.h), the part the kernels and the host share:
// which reads are hit, how many attempts a hit damages, and which bits of a chunk each mode flips. (The
// kernels' use of it, detected == injected with exact results for every mode: PeerCollectives.
// EveryFaultModeIsCaughtAndResultsStayExact on the GPU.)
#include <gtest/gtest.h>

#include <set>

#include "core/peer_fault.h"

namespace ringguard {
namespace peer {
namespace {

PeerFault withMode(uint8_t mode) {
  PeerFault f;
  f.probability = 0.25;
  f.seed = 9;
  f.mode = mode;
  return f;
}

TEST(PeerFault, HitsAboutTheProbabilityAndDependOnEpochChunkAndPeer) {
  const PeerFault f = withMode(PeerFault::kBitFlip);
  int hits = 0;
  for (uint32_t c = 0; c < 4000; ++c) hits += f.hits(f.hash(5, c, 1)) ? 1 : 0;
  EXPECT_GT(hits, 850);  // 1000 expected
  EXPECT_LT(hits, 1150);
  EXPECT_NE(f.hash(5, 3, 1), f.hash(6, 3, 1));  // a replayed graph (a new epoch) injects anew
  EXPECT_NE(f.hash(5, 3, 1), f.hash(5, 3, 2));
  EXPECT_NE(f.hash(5, 3, 1), f.hash(5, 4, 1));
  PeerFault off = f;
  off.probability = 0;
  EXPECT_FALSE(off.damagesReads());
  for (uint32_t c = 0; c < 1000; ++c) EXPECT_FALSE(off.hits(off.hash(5, c, 1)));
}

TEST(PeerFault, AttemptsDamagedPerHit) {
  PeerFault f = withMode(PeerFault::kBitFlip);
  EXPECT_EQ(f.attempts(), 1);
  f.mode = PeerFault::kRetransmit;
  EXPECT_EQ(f.attempts(), 2);  // the first read and the first re-read
  f.repeat = 5;                // past maxRereads (3): persistent
  EXPECT_EQ(f.attempts(), 5);
  f.mode = PeerFault::kDelay;
  EXPECT_FALSE(f.damagesReads());  // a late producer, no damage
}

// The flipped bits of `f` for hash h: distinct, inside the chunk.
std::set<uint32_t> flippedBits(const PeerFault& f, uint64_t h) {
  std::set<uint32_t> bits;
  for (int j = 0; j < f.span(h); ++j) {
    if (!f.flipped(h, j)) continue;
    const uint32_t b = f.position(h, j);
    EXPECT_LT(b, PeerFault::kChunkBits);
    EXPECT_TRUE(bits.insert(b).second) << "bit " << b << " flipped twice (the flips would cancel)";
  }
  return bits;
}

TEST(PeerFault, EachModeFlipsWhatItSays) {
  for (uint64_t h = 1; h < 2000; h += 7) {
    const uint64_t hash = h * 0x9E3779B97F4A7C15ull;
    EXPECT_EQ(flippedBits(withMode(PeerFault::kBitFlip), hash).size(), 1u);
    EXPECT_EQ(flippedBits(withMode(PeerFault::kRetransmit), hash).size(), 1u);
    PeerFault multi = withMode(PeerFault::kMultiBit);
    multi.bits = 64;
    EXPECT_EQ(flippedBits(multi, hash).size(), 64u);
    multi.bits = 3;
    EXPECT_EQ(flippedBits(multi, hash).size(), 3u);
    PeerFault burst = withMode(PeerFault::kBurst);
    burst.burstBits = 32;
    const std::set<uint32_t> b = flippedBits(burst, hash);
    ASSERT_GE(b.size(), 2u);
    const uint32_t len = *b.rbegin() - *b.begin() + 1;  // first and last of the span always flip
    EXPECT_EQ(int(len), burst.span(hash));
    EXPECT_GE(len, 2u);
    EXPECT_LE(len, 32u);
  }
}

// Garbage replaces every word; the first never keeps its old value, even where the garbage would equal it,
// so a garbage hit always changes the chunk.
TEST(PeerFault, GarbageNeverLeavesTheFirstWord) {
  for (uint64_t h = 0; h < 5000; ++h) {
    const uint32_t same = uint32_t(corruptionGarbageWord(h, 0));  // the old value the garbage would repeat
    EXPECT_NE(PeerFault::garbageWord(h, 0, same), same);
    EXPECT_EQ(PeerFault::garbageWord(h, 0, same ^ 1u), same);
    EXPECT_EQ(PeerFault::garbageWord(h, 3, 0), uint32_t(corruptionGarbageWord(h, 3)));
  }
}

}  // namespace
}  // namespace peer
}  // namespace ringguard
