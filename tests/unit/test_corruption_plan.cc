// Corruption plans (FaultInjector::plan, applyCorruptionPlan, HostExecutor::corruptReceived): a plan is
// computed without the payload, applied in executor order, and damages exactly what the host-side corrupt()
// damaged before plans existed. Every mode but garbage must flip the very same bits as that implementation
// (kept below as the reference); garbage is a counter-based expansion that still changes at least one byte.
// The device kernel (corruptDevice) is checked against applyCorruptionPlan in tests/gpu.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "core/corruption_plan.h"
#include "core/fault_injector.h"
#include "core/trailer.h"
#include "executor/host_executor.h"
#include "ringguard/core/options.h"
#include "verifiable.h"  // randomBytes

namespace ringguard {
namespace {

using testing::randomBytes;

// ---- The host-side corrupt() as it was before plans (commit 7d80243), the reference
// ------------------------

uint64_t legacyMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t legacyHash(uint64_t seed, uint64_t seq, int step, int slice, int receiver, int attempt) {
  uint64_t h = legacyMix(seed);
  for (uint64_t v : {seq, uint64_t(uint32_t(step)), uint64_t(uint32_t(slice)), uint64_t(uint32_t(receiver)),
                     uint64_t(uint32_t(attempt))}) {
    h = legacyMix(h ^ v);
  }
  return h;
}

void legacyFlip(uint8_t* p, size_t bit) { p[bit / 8] ^= uint8_t(1u << (bit % 8)); }

// The non-garbage modes of the old FaultInjector::corrupt.
bool legacyCorrupt(const FaultOptions& o, uint64_t seq, int step, int slice, int receiver, int attempt,
                   uint8_t* payload, size_t bytes, Trailer* trailer) {
  std::mt19937_64 rng(legacyHash(o.seed, seq, step, slice, receiver, attempt));
  const size_t bits = bytes * 8;
  switch (o.mode) {
    case FaultMode::kBitFlip:
    case FaultMode::kRetransmit:
      if (bits == 0) return false;
      legacyFlip(payload, rng() % bits);
      return true;
    case FaultMode::kMultiBit: {
      if (bits == 0) return false;
      size_t k = std::min<size_t>(size_t(o.bits), bits);
      std::vector<size_t> chosen;
      while (chosen.size() < k) {
        size_t b = rng() % bits;
        if (std::find(chosen.begin(), chosen.end(), b) == chosen.end()) chosen.push_back(b);
      }
      for (size_t b : chosen) legacyFlip(payload, b);
      return true;
    }
    case FaultMode::kBurst: {
      if (bits < 2) return false;
      size_t len = 2 + rng() % size_t(std::max(1, o.burstBits - 1));
      len = std::min(len, bits);
      size_t start = rng() % (bits - len + 1);
      legacyFlip(payload, start);
      legacyFlip(payload, start + len - 1);
      for (size_t b = start + 1; b + 1 < start + len; ++b) {
        if (rng() & 1) legacyFlip(payload, b);
      }
      return true;
    }
    case FaultMode::kTrailer:
      legacyFlip(reinterpret_cast<uint8_t*>(trailer), rng() % (sizeof(Trailer) * 8));
      return true;
    default:
      return false;
  }
}

// ---- Helpers
// -----------------------------------------------------------------------------------------------

FaultOptions withMode(FaultMode mode, uint64_t seed = 1) {
  FaultOptions o;
  o.mode = mode;
  o.probability = 1.0;
  o.seed = seed;
  return o;
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

const size_t kSizes[] = {0, 1, 2, 3, 5, 8, 17, 64, 1000, 4099};

// The options of every slice-damaging mode, with the parameters each one has.
std::vector<FaultOptions> everyFlipMode() {
  std::vector<FaultOptions> out;
  for (FaultMode m : {FaultMode::kBitFlip, FaultMode::kRetransmit, FaultMode::kTrailer})
    out.push_back(withMode(m));
  for (int bits : {1, 2, 3, 7, 16, 64}) {
    FaultOptions o = withMode(FaultMode::kMultiBit);
    o.bits = bits;
    out.push_back(o);
  }
  for (int burst : {2, 3, 8, 17, 32}) {
    FaultOptions o = withMode(FaultMode::kBurst);
    o.burstBits = burst;
    out.push_back(o);
  }
  return out;
}

// ---- Plans against the old corrupt()
// -----------------------------------------------------------------------

TEST(CorruptionPlanTest, FlipModesDamageExactlyTheBitsTheOldCorruptDid) {
  for (const FaultOptions& o : everyFlipMode()) {
    SCOPED_TRACE(std::string(faultModeName(o.mode)) + " bits " + std::to_string(o.bits) + " burst " +
                 std::to_string(o.burstBits));
    const FaultInjector inj(o);
    for (size_t bytes : kSizes) {
      for (int slice = 0; slice < 40; ++slice) {
        const uint64_t seq = 3 + uint64_t(slice % 5);
        const int step = slice % 7, receiver = slice % 4, attempt = slice % 3;
        const std::vector<uint8_t> original = randomBytes(bytes, uint32_t(bytes * 131 + slice));
        std::vector<uint8_t> want = original, got = original;
        Trailer wantT = sampleTrailer(), gotT = sampleTrailer();
        const bool wantChanged =
            legacyCorrupt(o, seq, step, slice, receiver, attempt, want.data(), bytes, &wantT);
        const bool gotChanged = inj.corrupt(seq, step, slice, receiver, attempt, got.data(), bytes, &gotT);
        ASSERT_EQ(wantChanged, gotChanged) << "bytes " << bytes << " slice " << slice;
        ASSERT_EQ(want, got) << "bytes " << bytes << " slice " << slice;
        ASSERT_EQ(0, std::memcmp(&wantT, &gotT, sizeof(Trailer))) << "bytes " << bytes << " slice " << slice;
      }
    }
  }
}

TEST(CorruptionPlanTest, EditsAreAscendingDistinctBytesWhoseMasksAreTheFlippedBits) {
  for (const FaultOptions& o : everyFlipMode()) {
    SCOPED_TRACE(faultModeName(o.mode));
    const FaultInjector inj(o);
    for (size_t bytes : kSizes) {
      for (int slice = 0; slice < 40; ++slice) {
        const CorruptionPlan plan = inj.plan(9, 1, slice, 2, 0, bytes);
        ASSERT_TRUE(corruptionPlanFits(plan, bytes));
        ASSERT_EQ(plan.bytes, bytes);
        ASSERT_FALSE(plan.garbage);
        const bool trailerMode = o.mode == FaultMode::kTrailer;
        if (!plan.damages()) {
          // Only the payload modes on a payload too short for them.
          ASSERT_FALSE(trailerMode);
          ASSERT_TRUE(bytes == 0 || (o.mode == FaultMode::kBurst && bytes * 8 < 2));
          ASSERT_EQ(0, plan.edits);
          continue;
        }
        ASSERT_EQ(trailerMode ? CorruptionPlan::Target::kTrailer : CorruptionPlan::Target::kPayload,
                  plan.target);
        ASSERT_GT(plan.edits, 0);
        for (int k = 0; k < plan.edits; ++k) {
          ASSERT_NE(0, plan.mask[k]);
          if (k > 0) {
            ASSERT_LT(plan.offset[k - 1], plan.offset[k]);
          }
        }
        // Applying it XORs exactly those masks, whatever the payload holds (it was never read).
        for (uint32_t fill : {0u, 1u, 2u}) {
          const std::vector<uint8_t> before = randomBytes(bytes, fill);
          std::vector<uint8_t> after = before;
          Trailer t = sampleTrailer();
          const Trailer tBefore = t;
          ASSERT_TRUE(applyCorruptionPlan(plan, after.data(), &t));
          const uint8_t* b = trailerMode ? reinterpret_cast<const uint8_t*>(&tBefore) : before.data();
          const uint8_t* a = trailerMode ? reinterpret_cast<const uint8_t*>(&t) : after.data();
          const size_t n = trailerMode ? sizeof(Trailer) : bytes;
          int k = 0;
          for (size_t i = 0; i < n; ++i) {
            const uint8_t x = uint8_t(a[i] ^ b[i]);
            if (k < plan.edits && plan.offset[k] == i) {
              ASSERT_EQ(plan.mask[k], x) << "byte " << i;
              ++k;
            } else {
              ASSERT_EQ(0, x) << "byte " << i << " is not in the plan";
            }
          }
          ASSERT_EQ(k, int(plan.edits));
          if (trailerMode) {
            ASSERT_EQ(before, after);
          } else {
            ASSERT_EQ(0, std::memcmp(&t, &tBefore, sizeof t)) << "payload modes leave the trailer alone";
          }
        }
      }
    }
  }
}

TEST(CorruptionPlanTest, GarbageIsTheCounterBasedExpansionAndAlwaysChangesAByte) {
  const FaultInjector inj(withMode(FaultMode::kGarbage));
  EXPECT_FALSE(inj.plan(0, 0, 0, 0, 0, 0).damages()) << "an empty payload cannot be damaged";
  for (size_t bytes : kSizes) {
    if (bytes == 0) continue;
    for (int slice = 0; slice < 30; ++slice) {
      const CorruptionPlan plan = inj.plan(4, 2, slice, 1, 0, bytes);
      ASSERT_TRUE(plan.damages());
      ASSERT_TRUE(plan.garbage);
      ASSERT_EQ(CorruptionPlan::Target::kPayload, plan.target);
      ASSERT_EQ(0, plan.edits);
      ASSERT_TRUE(corruptionPlanFits(plan, bytes));
      std::vector<uint8_t> payload = randomBytes(bytes, uint32_t(slice));
      // Byte 0 set to what the garbage would put there: the forced change must kick in.
      const uint8_t g0 = static_cast<uint8_t>(corruptionGarbageWord(plan.seed, 0));
      if (slice % 2 == 0) payload[0] = g0;
      const std::vector<uint8_t> before = payload;
      ASSERT_TRUE(applyCorruptionPlan(plan, payload.data(), nullptr));
      ASSERT_NE(before[0], payload[0]);
      for (size_t i = 1; i < bytes; ++i) {
        ASSERT_EQ(static_cast<uint8_t>(corruptionGarbageWord(plan.seed, i / 8) >> (8 * (i % 8))), payload[i])
            << "byte " << i;
      }
      ASSERT_EQ(g0 == before[0] ? uint8_t(g0 ^ 1) : g0, payload[0]);
    }
  }
}

TEST(CorruptionPlanTest, GarbageWordsAreTheSplitmix64Stream) {
  for (uint64_t seed : {0ull, 1ull, 0x123456789abcdefull}) {
    uint64_t state = seed;
    for (uint64_t w = 0; w < 100; ++w) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      ASSERT_EQ(z, corruptionGarbageWord(seed, w)) << "seed " << seed << " word " << w;
    }
  }
}

TEST(CorruptionPlanTest, DelayModePlansNothing) {
  const FaultInjector inj(withMode(FaultMode::kDelay));
  for (size_t bytes : kSizes) {
    const CorruptionPlan plan = inj.plan(1, 2, 3, 0, 0, bytes);
    EXPECT_FALSE(plan.damages());
    EXPECT_TRUE(corruptionPlanFits(plan, bytes));
  }
}

TEST(CorruptionPlanTest, FitsRejectsPlansForAnotherPayload) {
  const FaultInjector inj(withMode(FaultMode::kBitFlip));
  const CorruptionPlan plan = inj.plan(1, 0, 0, 0, 0, 64);
  EXPECT_TRUE(corruptionPlanFits(plan, 64));
  EXPECT_FALSE(corruptionPlanFits(plan, 63));
  EXPECT_FALSE(corruptionPlanFits(plan, 65));
  CorruptionPlan outside = plan;
  outside.offset[0] = 64;
  EXPECT_FALSE(corruptionPlanFits(outside, 64));
  CorruptionPlan zeroMask = plan;
  zeroMask.mask[0] = 0;
  EXPECT_FALSE(corruptionPlanFits(zeroMask, 64));
  CorruptionPlan tooMany = plan;
  tooMany.edits = CorruptionPlan::kMaxEdits + 1;
  EXPECT_FALSE(corruptionPlanFits(tooMany, 64));
  CorruptionPlan trailer = FaultInjector(withMode(FaultMode::kTrailer)).plan(1, 0, 0, 0, 0, 64);
  EXPECT_TRUE(corruptionPlanFits(trailer, 64));
  EXPECT_TRUE(corruptionPlanFits(trailer, 0)) << "a trailer plan fits any payload";
  trailer.offset[0] = sizeof(Trailer);
  EXPECT_FALSE(corruptionPlanFits(trailer, 64));
  CorruptionPlan trailerGarbage = FaultInjector(withMode(FaultMode::kTrailer)).plan(1, 0, 0, 0, 0, 64);
  trailerGarbage.garbage = true;
  EXPECT_FALSE(corruptionPlanFits(trailerGarbage, 64));
  CorruptionPlan badTarget = plan;
  badTarget.target = static_cast<CorruptionPlan::Target>(7);
  EXPECT_FALSE(corruptionPlanFits(badTarget, 64));
}

// ---- HostExecutor::corruptReceived
// -------------------------------------------------------------------------

TEST(CorruptionPlanTest, HostExecutorAppliesPlansToTheSlotOrThePayloadGivenAndToTheSlotTrailer) {
  constexpr size_t kBytes = 1000;
  for (FaultMode m : {FaultMode::kBitFlip, FaultMode::kMultiBit, FaultMode::kBurst, FaultMode::kGarbage,
                      FaultMode::kTrailer, FaultMode::kRetransmit}) {
    SCOPED_TRACE(faultModeName(m));
    const FaultInjector inj(withMode(m, 5));
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      HostExecutor exec;
      ASSERT_TRUE(exec.prepare(4, 2, kBytes).isOk());
      const std::vector<uint8_t> original = randomBytes(kBytes, 11);
      std::vector<uint8_t> dst = original;  // an in-place receive's payload
      std::memcpy(exec.slot(1), original.data(), kBytes);
      *exec.slotTrailer(1) = sampleTrailer();
      *exec.slotTrailer(0) = sampleTrailer();
      const CorruptionPlan plan = inj.plan(7, 3, 2, 1, 0, kBytes);
      ASSERT_TRUE(exec.corruptReceived(1, inPlace ? dst.data() : nullptr, kBytes, plan).isOk());
      // What corrupt() does to copies of the same bytes.
      std::vector<uint8_t> want = original;
      Trailer wantT = sampleTrailer();
      ASSERT_TRUE(inj.corrupt(7, 3, 2, 1, 0, want.data(), kBytes, &wantT));
      const uint8_t* got = inPlace ? dst.data() : static_cast<const uint8_t*>(exec.slot(1));
      EXPECT_EQ(0, std::memcmp(want.data(), got, kBytes));
      if (inPlace) {
        EXPECT_EQ(0, std::memcmp(exec.slot(1), original.data(), kBytes)) << "the slot is not the payload";
      } else {
        EXPECT_EQ(original, dst);
      }
      EXPECT_EQ(0, std::memcmp(&wantT, exec.slotTrailer(1), sizeof(Trailer)));
      const Trailer other = sampleTrailer();
      EXPECT_EQ(0, std::memcmp(&other, exec.slotTrailer(0), sizeof(Trailer))) << "another slot's trailer";
    }
  }
}

TEST(CorruptionPlanTest, HostExecutorRefusesPlansThatDoNotFit) {
  HostExecutor exec;
  ASSERT_TRUE(exec.prepare(4, 2, 64).isOk());
  const CorruptionPlan plan = FaultInjector(withMode(FaultMode::kBitFlip)).plan(1, 0, 0, 0, 0, 64);
  EXPECT_EQ(StatusCode::kInvalidArgument, exec.corruptReceived(2, nullptr, 64, plan).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, exec.corruptReceived(-1, nullptr, 64, plan).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, exec.corruptReceived(0, nullptr, 32, plan).code());
  const CorruptionPlan big = FaultInjector(withMode(FaultMode::kBitFlip)).plan(1, 0, 0, 0, 0, 128);
  EXPECT_EQ(StatusCode::kInvalidArgument, exec.corruptReceived(0, nullptr, 128, big).code()) << "> slot";
  std::vector<uint8_t> dst(128);
  EXPECT_TRUE(exec.corruptReceived(0, dst.data(), 128, big).isOk()) << "in place: dst's size";
  EXPECT_TRUE(exec.corruptReceived(0, nullptr, 0, CorruptionPlan{}).isOk()) << "nothing to do";
}

}  // namespace
}  // namespace ringguard
