// Fault injection (docs/design/protocol.md, "Fault injection"): off by default, decisions a pure function
// of (seed, seq, step, slice, receiver, attempt), and each mode damages exactly what it says.
#include <gtest/gtest.h>

#include <algorithm>
#include <bitset>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/fault_injector.h"
#include "core/trailer.h"
#include "ringguard/core/options.h"
#include "verifiable.h"  // randomBytes

namespace ringguard {
namespace {

using testing::randomBytes;

constexpr FaultMode kPayloadModes[] = {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst,
                                       FaultMode::kGarbage, FaultMode::kRetransmit};

FaultOptions withMode(FaultMode mode, double probability = 1.0, uint64_t seed = 1) {
  FaultOptions o;
  o.mode = mode;
  o.probability = probability;
  o.seed = seed;
  return o;
}

// Positions (byte * 8 + bit, LSB first) of the bits that differ.
std::vector<size_t> diffBits(const uint8_t* a, const uint8_t* b, size_t bytes) {
  std::vector<size_t> bits;
  for (size_t i = 0; i < bytes; ++i) {
    const uint8_t x = a[i] ^ b[i];
    for (int k = 0; k < 8; ++k) {
      if (x & (1u << k)) bits.push_back(i * 8 + size_t(k));
    }
  }
  return bits;
}

Trailer sampleTrailer() {
  SliceId id;
  id.seq = 12;
  id.step = 3;
  id.slice = 4;
  id.column = 1;
  id.payloadBytes = 64;
  return makeTrailer(id, 0xDEADBEEFu, 0);
}

TEST(FaultInjectorTest, DisabledByDefault) {
  EXPECT_FALSE(FaultOptions{}.enabled());
  const FaultInjector none;
  EXPECT_FALSE(none.enabled());
  const FaultInjector defaults{FaultOptions{}};
  EXPECT_FALSE(defaults.enabled());
  EXPECT_EQ(defaults.options().probability, 0.0);
  EXPECT_TRUE(defaults.options().schedule.empty());
  for (uint64_t seq = 0; seq < 4; ++seq) {
    for (int step = 0; step < 6; ++step) {
      for (int slice = 0; slice < 4; ++slice) {
        for (int rank = 0; rank < 4; ++rank) {
          EXPECT_FALSE(none.corrupts(seq, step, slice, rank, 0));
          EXPECT_FALSE(defaults.corrupts(seq, step, slice, rank, 0));
          EXPECT_EQ(defaults.delayMs(seq, step, slice, rank, 0), 0);
        }
      }
    }
  }
  // A delay mode alone does not enable anything either.
  FaultOptions delay;
  delay.mode = FaultMode::kDelay;
  EXPECT_FALSE(FaultInjector(delay).enabled());
  EXPECT_EQ(FaultInjector(delay).delayMs(0, 0, 0, 0, 0), 0);
}

TEST(FaultInjectorTest, ScheduleEntryHitsExactlyThatTransferAtAttemptZero) {
  FaultOptions o;
  o.schedule = {FaultScheduleEntry{5, 3, 2, 1}};
  const FaultInjector inj(o);
  EXPECT_TRUE(inj.enabled());
  int hits = 0;
  for (uint64_t seq = 0; seq < 8; ++seq) {
    for (int step = 0; step < 8; ++step) {
      for (int slice = 0; slice < 5; ++slice) {
        for (int rank = 0; rank < 4; ++rank) {
          for (int attempt = 0; attempt < 3; ++attempt) {
            const bool expected = seq == 5 && step == 3 && slice == 2 && rank == 1 && attempt == 0;
            const bool hit = inj.corrupts(seq, step, slice, rank, attempt);
            EXPECT_EQ(hit, expected) << seq << " " << step << " " << slice << " " << rank << " " << attempt;
            hits += hit ? 1 : 0;
          }
        }
      }
    }
  }
  EXPECT_EQ(hits, 1);
  // Entries add up; probability 0 adds nothing.
  o.schedule.push_back(FaultScheduleEntry{0, 0, 0, 0});
  const FaultInjector two(o);
  EXPECT_TRUE(two.corrupts(0, 0, 0, 0, 0));
  EXPECT_TRUE(two.corrupts(5, 3, 2, 1, 0));
  EXPECT_FALSE(two.corrupts(0, 0, 0, 1, 0));
}

TEST(FaultInjectorTest, RepeatCorruptsTheFirstAttempts) {
  FaultOptions o;
  o.schedule = {FaultScheduleEntry{1, 2, 3, 0}};
  for (int repeat : {1, 2, 3, 5}) {
    o.repeat = repeat;
    o.mode = FaultMode::kBitFlip;
    const FaultInjector inj(o);
    for (int attempt = 0; attempt < 8; ++attempt) {
      EXPECT_EQ(inj.corrupts(1, 2, 3, 0, attempt), attempt < repeat) << "repeat " << repeat << " " << attempt;
      EXPECT_FALSE(inj.corrupts(1, 2, 3, 1, attempt));
    }
  }
  // kRetransmit implies at least two corrupted attempts.
  o.mode = FaultMode::kRetransmit;
  for (int repeat : {1, 2, 4}) {
    o.repeat = repeat;
    const FaultInjector inj(o);
    const int expectedHits = std::max(2, repeat);
    for (int attempt = 0; attempt < 8; ++attempt) {
      EXPECT_EQ(inj.corrupts(1, 2, 3, 0, attempt), attempt < expectedHits)
          << "repeat " << repeat << " " << attempt;
    }
  }
}

TEST(FaultInjectorTest, ProbabilityZeroNeverOneAlways) {
  FaultOptions never = withMode(FaultMode::kBitFlip, 0.0);
  never.schedule = {FaultScheduleEntry{999, 0, 0, 0}};  // enabled, but matches nothing below
  const FaultInjector n(never);
  ASSERT_TRUE(n.enabled());
  const FaultInjector a(withMode(FaultMode::kBitFlip, 1.0));
  for (uint64_t seq = 0; seq < 20; ++seq) {
    for (int step = 0; step < 10; ++step) {
      for (int slice = 0; slice < 10; ++slice) {
        for (int rank = 0; rank < 8; ++rank) {
          ASSERT_FALSE(n.corrupts(seq, step, slice, rank, 0))
              << seq << " " << step << " " << slice << " " << rank;
          ASSERT_TRUE(a.corrupts(seq, step, slice, rank, 0))
              << seq << " " << step << " " << slice << " " << rank;
          ASSERT_FALSE(a.corrupts(seq, step, slice, rank, 1)) << "repeat 1 spares the retransmission";
        }
      }
    }
  }
}

TEST(FaultInjectorTest, HitRateFollowsProbability) {
  for (uint64_t seed : {1ull, 7ull, 123456789ull}) {
    const FaultInjector inj(withMode(FaultMode::kBitFlip, 0.1, seed));
    int hits = 0;
    const int n = 100000;
    for (int i = 0; i < n; ++i) {
      hits += inj.corrupts(uint64_t(i / 1000), (i / 100) % 10, i % 100, i % 7, 0) ? 1 : 0;
    }
    const double rate = double(hits) / n;
    EXPECT_GE(rate, 0.09) << "seed " << seed;
    EXPECT_LE(rate, 0.11) << "seed " << seed;
  }
}

TEST(FaultInjectorTest, DecisionsAreDeterministicPerSeed) {
  FaultOptions o = withMode(FaultMode::kBitFlip, 0.5, 42);
  o.repeat = 2;
  const FaultInjector a(o), b(o);
  o.seed = 43;
  const FaultInjector c(o);
  int differ = 0, hits = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const uint64_t seq = uint64_t(i / 400);
    const int step = (i / 40) % 10, slice = i % 40, rank = (i * 7) % 5;
    const bool x = a.corrupts(seq, step, slice, rank, 0);
    ASSERT_EQ(x, b.corrupts(seq, step, slice, rank, 0)) << i;
    // The selection does not depend on the attempt (the same slice is hit on every corrupted attempt).
    ASSERT_EQ(x, a.corrupts(seq, step, slice, rank, 1)) << i;
    differ += x != c.corrupts(seq, step, slice, rank, 0) ? 1 : 0;
    hits += x ? 1 : 0;
  }
  // Independent seeds agree on about half the decisions at p = 0.5.
  EXPECT_GT(differ, n * 4 / 10);
  EXPECT_LT(differ, n * 6 / 10);
  EXPECT_GT(hits, n * 4 / 10);
  EXPECT_LT(hits, n * 6 / 10);
}

TEST(FaultInjectorTest, DelayModeDelaysButNeverCorrupts) {
  FaultOptions o = withMode(FaultMode::kDelay, 0.0);
  o.delayMs = 17;
  o.schedule = {FaultScheduleEntry{2, 1, 0, 3}};
  const FaultInjector inj(o);
  EXPECT_EQ(inj.delayMs(2, 1, 0, 3, 0), 17);
  EXPECT_EQ(inj.delayMs(2, 1, 0, 3, 1), 0);  // repeat 1
  EXPECT_EQ(inj.delayMs(2, 1, 0, 2, 0), 0);
  EXPECT_EQ(inj.delayMs(2, 1, 1, 3, 0), 0);
  EXPECT_EQ(inj.delayMs(3, 1, 0, 3, 0), 0);
  EXPECT_FALSE(inj.corrupts(2, 1, 0, 3, 0));

  std::vector<uint8_t> payload = randomBytes(64, 5);
  const std::vector<uint8_t> before = payload;
  Trailer t = sampleTrailer();
  const Trailer tBefore = t;
  EXPECT_FALSE(inj.corrupt(2, 1, 0, 3, 0, payload.data(), payload.size(), &t));
  EXPECT_EQ(payload, before);
  EXPECT_EQ(std::memcmp(&t, &tBefore, sizeof t), 0);

  const FaultInjector always(withMode(FaultMode::kDelay, 1.0));
  for (int slice = 0; slice < 100; ++slice) {
    EXPECT_EQ(always.delayMs(0, 0, slice, 1, 0), 50);  // the default delay
    EXPECT_FALSE(always.corrupts(0, 0, slice, 1, 0));
  }
  // The corruption modes never delay.
  for (FaultMode m : kPayloadModes) EXPECT_EQ(FaultInjector(withMode(m, 1.0)).delayMs(0, 0, 0, 1, 0), 0);
  EXPECT_EQ(FaultInjector(withMode(FaultMode::kTrailer, 1.0)).delayMs(0, 0, 0, 1, 0), 0);
}

// Runs corrupt() for many transfers and payload sizes; `check` gets (before, after, returned).
template <typename Check>
void forManyCorruptions(const FaultInjector& inj, Check check) {
  for (size_t bytes :
       {size_t(1), size_t(2), size_t(3), size_t(4), size_t(5), size_t(8), size_t(64), size_t(1000)}) {
    for (int slice = 0; slice < 60; ++slice) {
      std::vector<uint8_t> payload = randomBytes(bytes, uint32_t(bytes * 100 + slice));
      const std::vector<uint8_t> before = payload;
      Trailer t = sampleTrailer();
      const Trailer tBefore = t;
      const bool changed = inj.corrupt(9, slice % 6, slice, slice % 4, 0, payload.data(), bytes, &t);
      ASSERT_EQ(std::memcmp(&t, &tBefore, sizeof t), 0) << "payload modes leave the trailer alone";
      check(before, payload, changed);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(FaultInjectorTest, BitFlipChangesExactlyOneBit) {
  for (FaultMode m : {FaultMode::kBitFlip, FaultMode::kRetransmit}) {
    SCOPED_TRACE(faultModeName(m));
    std::vector<int> positions(8, 0);
    forManyCorruptions(FaultInjector(withMode(m)), [&](const std::vector<uint8_t>& before,
                                                       const std::vector<uint8_t>& after, bool changed) {
      ASSERT_TRUE(changed);
      const std::vector<size_t> d = diffBits(before.data(), after.data(), before.size());
      ASSERT_EQ(d.size(), 1u);
      ++positions[d[0] % 8];
    });
    // The flipped bit is not always the same bit of a byte.
    for (int k = 0; k < 8; ++k) EXPECT_GT(positions[k], 0) << "bit " << k << " never flipped";
  }
}

TEST(FaultInjectorTest, MultiBitChangesExactlyBitsBits) {
  for (int bits : {1, 2, 3, 7, 16, 64}) {
    SCOPED_TRACE(bits);
    FaultOptions o = withMode(FaultMode::kMultiBit);
    o.bits = bits;
    forManyCorruptions(FaultInjector(o), [&](const std::vector<uint8_t>& before,
                                             const std::vector<uint8_t>& after, bool changed) {
      ASSERT_TRUE(changed);
      const size_t total = before.size() * 8;
      // `bits` distinct bits; a payload with fewer bits has all of them flipped.
      ASSERT_EQ(diffBits(before.data(), after.data(), before.size()).size(),
                std::min<size_t>(size_t(bits), total))
          << "payload bytes " << before.size();
    });
  }
}

TEST(FaultInjectorTest, BurstFlipsFirstAndLastBitOfASpanOfAtMostBurstBits) {
  for (int burstBits : {2, 3, 8, 17, 32}) {
    SCOPED_TRACE(burstBits);
    FaultOptions o = withMode(FaultMode::kBurst);
    o.burstBits = burstBits;
    size_t shortest = ~size_t(0), longest = 0;
    forManyCorruptions(FaultInjector(o), [&](const std::vector<uint8_t>& before,
                                             const std::vector<uint8_t>& after, bool changed) {
      ASSERT_TRUE(changed);
      const std::vector<size_t> d = diffBits(before.data(), after.data(), before.size());
      // First and last bit of the burst flip, so at least two bits differ and they bound the span.
      ASSERT_GE(d.size(), 2u);
      const size_t span = d.back() - d.front() + 1;
      ASSERT_GE(span, 2u);
      ASSERT_LE(span, size_t(burstBits));
      ASSERT_LE(span, before.size() * 8);
      if (before.size() * 8 >= size_t(burstBits)) {
        shortest = std::min(shortest, span);
        longest = std::max(longest, span);
      }
    });
    // Lengths cover 2..burstBits (over 240 bursts in payloads that can hold the longest one).
    EXPECT_EQ(shortest, 2u);
    EXPECT_EQ(longest, size_t(burstBits));
  }
}

TEST(FaultInjectorTest, GarbageAlwaysChangesThePayload) {
  forManyCorruptions(
      FaultInjector(withMode(FaultMode::kGarbage)),
      [&](const std::vector<uint8_t>& before, const std::vector<uint8_t>& after, bool changed) {
        ASSERT_TRUE(changed);
        ASSERT_NE(before, after);
        // Large payloads are replaced wholesale, not patched.
        if (before.size() >= 64) {
          size_t same = 0;
          for (size_t i = 0; i < before.size(); ++i) same += before[i] == after[i] ? 1 : 0;
          ASSERT_LT(same, before.size() / 8);
        }
      });
  // One-byte payloads: random garbage equals the old byte about once in 256 draws, and must still differ.
  const FaultInjector inj(withMode(FaultMode::kGarbage));
  for (int slice = 0; slice < 5000; ++slice) {
    for (uint8_t value : {uint8_t(0), uint8_t(0xFF), uint8_t(0x5A)}) {
      uint8_t b = value;
      ASSERT_TRUE(inj.corrupt(1, 0, slice, 0, 0, &b, 1, nullptr));
      ASSERT_NE(b, value) << "slice " << slice;
    }
  }
}

TEST(FaultInjectorTest, TrailerModeFlipsOneTrailerBitAndNoPayloadBit) {
  const FaultInjector inj(withMode(FaultMode::kTrailer));
  std::vector<int> hitField(sizeof(Trailer), 0);
  for (int slice = 0; slice < 2000; ++slice) {
    std::vector<uint8_t> payload = randomBytes(32, uint32_t(slice));
    const std::vector<uint8_t> before = payload;
    Trailer t = sampleTrailer();
    const Trailer tBefore = t;
    ASSERT_TRUE(inj.corrupt(3, 1, slice, 2, 0, payload.data(), payload.size(), &t));
    ASSERT_EQ(payload, before);
    const std::vector<size_t> d =
        diffBits(reinterpret_cast<const uint8_t*>(&tBefore), reinterpret_cast<const uint8_t*>(&t), sizeof t);
    ASSERT_EQ(d.size(), 1u);
    ++hitField[d[0] / 8];
    // The damaged trailer is always caught.
    SliceId id;
    id.seq = 12;
    id.step = 3;
    id.slice = 4;
    id.column = 1;
    id.payloadBytes = 64;
    ASSERT_EQ(checkSlice(t, id, 0xDEADBEEFu), SliceCheck::kMalformed);
  }
  for (size_t i = 0; i < sizeof(Trailer); ++i)
    EXPECT_GT(hitField[i], 0) << "trailer byte " << i << " never hit";
  // The trailer mode damages the trailer even when the payload is empty.
  Trailer t = sampleTrailer();
  const Trailer tBefore = t;
  uint8_t dummy = 0;
  EXPECT_TRUE(inj.corrupt(0, 0, 0, 0, 0, &dummy, 0, &t));
  EXPECT_NE(std::memcmp(&t, &tBefore, sizeof t), 0);
}

TEST(FaultInjectorTest, EmptyPayloadIsNotDamagedByPayloadModes) {
  for (FaultMode m : kPayloadModes) {
    SCOPED_TRACE(faultModeName(m));
    const FaultInjector inj(withMode(m));
    uint8_t sentinel = 0xA5;
    Trailer t = sampleTrailer();
    const Trailer tBefore = t;
    for (int slice = 0; slice < 20; ++slice) {
      EXPECT_FALSE(inj.corrupt(0, 1, slice, 2, 0, &sentinel, 0, &t));
    }
    EXPECT_EQ(sentinel, 0xA5);
    EXPECT_EQ(std::memcmp(&t, &tBefore, sizeof t), 0);
  }
}

TEST(FaultInjectorTest, CorruptionIsDeterministic) {
  for (FaultMode m : {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst, FaultMode::kGarbage,
                      FaultMode::kTrailer, FaultMode::kRetransmit}) {
    SCOPED_TRACE(faultModeName(m));
    const FaultInjector a(withMode(m, 1.0, 7)), b(withMode(m, 1.0, 7)), c(withMode(m, 1.0, 8));
    int differs = 0;
    for (int slice = 0; slice < 50; ++slice) {
      const std::vector<uint8_t> original = randomBytes(256, 3);
      std::vector<uint8_t> x = original, y = original, z = original;
      Trailer tx = sampleTrailer(), ty = sampleTrailer(), tz = sampleTrailer();
      a.corrupt(4, 2, slice, 1, 0, x.data(), x.size(), &tx);
      b.corrupt(4, 2, slice, 1, 0, y.data(), y.size(), &ty);
      c.corrupt(4, 2, slice, 1, 0, z.data(), z.size(), &tz);
      EXPECT_EQ(x, y);
      EXPECT_EQ(std::memcmp(&tx, &ty, sizeof tx), 0);
      differs += (x != z || std::memcmp(&tx, &tz, sizeof tx) != 0) ? 1 : 0;
    }
    EXPECT_GT(differs, 40) << "another seed damages other bits";
  }
}

}  // namespace
}  // namespace ringguard
