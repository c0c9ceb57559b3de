// The 40-byte slice trailer (docs/design/protocol.md, "Frame and trailer"): construction, the check order
// (malformed, stale, size, corrupt, poisoned) and that any single damaged bit is caught.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/trailer.h"
#include "ringguard/core/crc32.h"
#include "runtime/handshake.h"

namespace ringguard {
namespace {

constexpr SliceCheck kAllChecks[] = {SliceCheck::kOk,           SliceCheck::kMalformed, SliceCheck::kStale,
                                     SliceCheck::kSizeMismatch, SliceCheck::kCorrupt,   SliceCheck::kPoisoned,
                                     SliceCheck::kVersionSkew};

SliceId sampleId() {
  SliceId id;
  id.seq = 0x0123456789ABCDEFull;
  id.step = 5;
  id.slice = 7;
  id.column = 3;
  id.payloadBytes = 4096;
  id.attempt = 2;
  return id;
}

std::vector<uint8_t> samplePayload(size_t n) {
  std::mt19937 rng(1234);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

void flipBit(Trailer* t, size_t bit) {
  auto* p = reinterpret_cast<uint8_t*>(t);
  p[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
}

TEST(TrailerTest, WireLayoutMatchesProtocolTable) {
  EXPECT_EQ(sizeof(Trailer), 40u);
  EXPECT_EQ(offsetof(Trailer, magic), 0u);
  EXPECT_EQ(offsetof(Trailer, payloadCrc), 4u);
  EXPECT_EQ(offsetof(Trailer, seq), 8u);
  EXPECT_EQ(offsetof(Trailer, step), 16u);
  EXPECT_EQ(offsetof(Trailer, slice), 20u);
  EXPECT_EQ(offsetof(Trailer, column), 24u);
  EXPECT_EQ(offsetof(Trailer, payloadBytes), 28u);
  EXPECT_EQ(offsetof(Trailer, attempt), 32u);
  EXPECT_EQ(offsetof(Trailer, flags), 34u);
  EXPECT_EQ(offsetof(Trailer, trailerCrc), 36u);
  // "RGT1" in memory order.
  Trailer t = makeTrailer(sampleId(), 0, 0);
  EXPECT_EQ(std::memcmp(&t, "RGT1", 4), 0);
  EXPECT_EQ(kTrailerPoisoned, 1u);
}

TEST(TrailerTest, MakeTrailerFillsEveryFieldAndRoundTrips) {
  const SliceId id = sampleId();
  const std::vector<uint8_t> payload = samplePayload(id.payloadBytes);
  const uint32_t crc = crc32(payload.data(), payload.size());
  const Trailer t = makeTrailer(id, crc, 0);
  EXPECT_EQ(t.magic, kTrailerMagic);
  EXPECT_EQ(t.payloadCrc, crc);
  EXPECT_EQ(t.seq, id.seq);
  EXPECT_EQ(t.step, id.step);
  EXPECT_EQ(t.slice, id.slice);
  EXPECT_EQ(t.column, id.column);
  EXPECT_EQ(t.payloadBytes, id.payloadBytes);
  EXPECT_EQ(t.attempt, id.attempt);
  EXPECT_EQ(t.flags, 0u);
  EXPECT_EQ(t.trailerCrc, crc32(&t, 36));

  EXPECT_EQ(checkTrailer(t, id), SliceCheck::kOk);
  EXPECT_EQ(checkSlice(t, id, crc32(payload.data(), payload.size())), SliceCheck::kOk);

  // A copy through raw bytes (as it crosses the wire) is still valid.
  uint8_t wire[sizeof(Trailer)];
  std::memcpy(wire, &t, sizeof wire);
  Trailer received;
  std::memcpy(&received, wire, sizeof received);
  EXPECT_EQ(checkSlice(received, id, crc), SliceCheck::kOk);
}

TEST(TrailerTest, EmptyPayloadSliceIsValid) {
  SliceId id = sampleId();
  id.payloadBytes = 0;
  const Trailer t = makeTrailer(id, crc32(nullptr, 0), 0);
  EXPECT_EQ(t.payloadCrc, 0u);
  EXPECT_EQ(checkSlice(t, id, 0), SliceCheck::kOk);
}

TEST(TrailerTest, ExtremeFieldValuesRoundTrip) {
  SliceId id;
  id.seq = ~uint64_t(0);
  id.step = ~uint32_t(0);
  id.slice = ~uint32_t(0);
  id.column = ~uint32_t(0);
  id.payloadBytes = ~uint32_t(0);
  id.attempt = 0xFFFF;
  const Trailer t = makeTrailer(id, 0xFFFFFFFFu, kTrailerPoisoned);
  EXPECT_EQ(checkTrailer(t, id), SliceCheck::kOk);
  EXPECT_EQ(checkSlice(t, id, 0xFFFFFFFFu), SliceCheck::kPoisoned);
  EXPECT_EQ(checkTrailer(makeTrailer(SliceId{}, 0, 0), SliceId{}), SliceCheck::kOk);
}

// Each identity field that differs from what the receiver expects makes the slice stale.
TEST(TrailerTest, EveryIdentityMismatchIsStale) {
  const SliceId id = sampleId();
  const uint32_t crc = 0xA5A5A5A5u;
  const Trailer t = makeTrailer(id, crc, 0);

  struct Case {
    const char* field;
    void (*mutate)(SliceId*);
  };
  const Case cases[] = {
      {"seq+1", [](SliceId* e) { e->seq += 1; }},
      {"seq high bit", [](SliceId* e) { e->seq ^= uint64_t(1) << 63; }},
      {"seq-1", [](SliceId* e) { e->seq -= 1; }},
      {"step+1", [](SliceId* e) { e->step += 1; }},
      {"step-1", [](SliceId* e) { e->step -= 1; }},
      {"slice+1", [](SliceId* e) { e->slice += 1; }},
      {"slice 0", [](SliceId* e) { e->slice = 0; }},
      {"column+1", [](SliceId* e) { e->column += 1; }},
      {"column 0", [](SliceId* e) { e->column = 0; }},
      {"attempt+1", [](SliceId* e) { e->attempt += 1; }},
      {"attempt 0", [](SliceId* e) { e->attempt = 0; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    // The receiver expects something else ...
    SliceId expected = id;
    c.mutate(&expected);
    EXPECT_EQ(checkTrailer(t, expected), SliceCheck::kStale);
    EXPECT_EQ(checkSlice(t, expected, crc), SliceCheck::kStale);
    // ... or the sender sealed a trailer for another slice.
    SliceId other = id;
    c.mutate(&other);
    const Trailer u = makeTrailer(other, crc, 0);
    EXPECT_EQ(checkTrailer(u, id), SliceCheck::kStale);
    EXPECT_EQ(checkSlice(u, id, crc), SliceCheck::kStale);
    // Staleness is decided before the payload CRC and the poisoned flag.
    EXPECT_EQ(checkSlice(makeTrailer(other, crc, kTrailerPoisoned), id, crc ^ 1), SliceCheck::kStale);
  }
}

TEST(TrailerTest, PayloadBytesMismatchIsSizeMismatch) {
  const SliceId id = sampleId();
  const uint32_t crc = 0x12345678u;
  for (uint32_t bytes : {0u, 1u, 4095u, 4097u, 8192u, 0xFFFFFFFFu}) {
    SCOPED_TRACE(bytes);
    SliceId other = id;
    other.payloadBytes = bytes;
    EXPECT_EQ(checkTrailer(makeTrailer(other, crc, 0), id), SliceCheck::kSizeMismatch);
    EXPECT_EQ(checkSlice(makeTrailer(other, crc, 0), id, crc), SliceCheck::kSizeMismatch);
    EXPECT_EQ(checkSlice(makeTrailer(id, crc, 0), other, crc), SliceCheck::kSizeMismatch);
    // Size is checked before the payload CRC and the poisoned flag ...
    EXPECT_EQ(checkSlice(makeTrailer(other, crc, kTrailerPoisoned), id, crc + 1), SliceCheck::kSizeMismatch);
    // ... and after identity.
    other.step += 1;
    EXPECT_EQ(checkSlice(makeTrailer(other, crc, 0), id, crc), SliceCheck::kStale);
  }
}

TEST(TrailerTest, BadMagicIsMalformed) {
  const SliceId id = sampleId();
  // ("RGT2", sealed, is another version of the format: TrailerVersionTest.)
  for (uint32_t magic : {0u, 0x31544753u, 0xFFFFFFFFu, 0x52475431u /* swapped */}) {
    SCOPED_TRACE(magic);
    Trailer t = makeTrailer(id, 7, 0);
    t.magic = magic;
    EXPECT_EQ(checkTrailer(t, id), SliceCheck::kMalformed);  // trailer CRC no longer matches either
    sealTrailer(&t);  // even a correctly sealed trailer with a foreign magic is not a trailer
    EXPECT_EQ(checkTrailer(t, id), SliceCheck::kMalformed);
    EXPECT_EQ(checkSlice(t, id, 7), SliceCheck::kMalformed);
  }
}

TEST(TrailerTest, ZeroedAndGarbageTrailersAreMalformed) {
  const SliceId id = sampleId();
  Trailer zero;
  std::memset(&zero, 0, sizeof zero);
  EXPECT_EQ(checkTrailer(zero, id), SliceCheck::kMalformed);
  EXPECT_EQ(checkTrailer(zero, SliceId{}), SliceCheck::kMalformed);
  std::mt19937 rng(99);
  for (int i = 0; i < 1000; ++i) {
    Trailer g;
    auto* p = reinterpret_cast<uint8_t*>(&g);
    for (size_t b = 0; b < sizeof g; ++b) p[b] = static_cast<uint8_t>(rng());
    EXPECT_EQ(checkTrailer(g, id), SliceCheck::kMalformed) << "garbage trailer " << i;
  }
}

// CRC-32 detects every single-bit error, so any one damaged bit of the 320 makes the trailer malformed,
// whether it hits the body (magic, identity, size, payload CRC, flags) or the trailer CRC itself.
TEST(TrailerTest, EverySingleBitFlipIsMalformed) {
  const SliceId id = sampleId();
  const uint32_t payloadCrc = 0xCAFEF00Du;
  for (uint16_t flags : {uint16_t(0), kTrailerPoisoned}) {
    const Trailer good = makeTrailer(id, payloadCrc, flags);
    ASSERT_NE(checkSlice(good, id, payloadCrc), SliceCheck::kMalformed);
    for (size_t bit = 0; bit < sizeof(Trailer) * 8; ++bit) {
      Trailer t = good;
      flipBit(&t, bit);
      const SliceCheck c = checkSlice(t, id, payloadCrc);
      EXPECT_NE(c, SliceCheck::kOk) << "bit " << bit << " flags " << flags;
      EXPECT_NE(c, SliceCheck::kPoisoned) << "bit " << bit << " flags " << flags;
      EXPECT_TRUE(isLinkFailure(c)) << "bit " << bit;
      if (bit < offsetof(Trailer, trailerCrc) * 8) {
        EXPECT_EQ(c, SliceCheck::kMalformed) << "body bit " << bit << " flags " << flags;
      } else {
        EXPECT_EQ(c, SliceCheck::kMalformed) << "trailer CRC bit " << bit << " flags " << flags;
      }
      EXPECT_EQ(checkTrailer(t, id), SliceCheck::kMalformed) << "bit " << bit;
    }
  }
}

TEST(TrailerTest, UnknownFlagBitsAreMalformed) {
  const SliceId id = sampleId();
  for (int bit = 1; bit < 16; ++bit) {
    SCOPED_TRACE(bit);
    const uint16_t unknown = static_cast<uint16_t>(1u << bit);
    EXPECT_EQ(checkTrailer(makeTrailer(id, 5, unknown), id), SliceCheck::kMalformed);
    EXPECT_EQ(checkSlice(makeTrailer(id, 5, unknown), id, 5), SliceCheck::kMalformed);
    EXPECT_EQ(checkSlice(makeTrailer(id, 5, uint16_t(unknown | kTrailerPoisoned)), id, 5),
              SliceCheck::kMalformed);
    // Malformed wins over a payload CRC mismatch (the trailer cannot be trusted).
    EXPECT_EQ(checkSlice(makeTrailer(id, 5, unknown), id, 6), SliceCheck::kMalformed);
  }
  EXPECT_EQ(checkSlice(makeTrailer(id, 5, 0xFFFF), id, 5), SliceCheck::kMalformed);
}

TEST(TrailerTest, PayloadCrcMismatchIsCorrupt) {
  const SliceId id = sampleId();
  std::vector<uint8_t> payload = samplePayload(id.payloadBytes);
  const Trailer t = makeTrailer(id, crc32(payload.data(), payload.size()), 0);
  // The trailer alone is fine: only the payload was damaged.
  EXPECT_EQ(checkTrailer(t, id), SliceCheck::kOk);
  for (size_t bit : {size_t(0), size_t(7), size_t(1000), size_t(4096 * 8 - 1)}) {
    std::vector<uint8_t> damaged = payload;
    damaged[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_EQ(checkSlice(t, id, crc32(damaged.data(), damaged.size())), SliceCheck::kCorrupt) << bit;
  }
  EXPECT_EQ(checkSlice(t, id, t.payloadCrc ^ 0x80000000u), SliceCheck::kCorrupt);
  // A corrupt payload is reported as corrupt even when the sender marked it poisoned.
  const Trailer p = makeTrailer(id, 1, kTrailerPoisoned);
  EXPECT_EQ(checkSlice(p, id, 2), SliceCheck::kCorrupt);
}

TEST(TrailerTest, PoisonedWithGoodCrcIsPoisoned) {
  const SliceId id = sampleId();
  const Trailer t = makeTrailer(id, 0x0BADF00Du, kTrailerPoisoned);
  EXPECT_EQ(t.flags, kTrailerPoisoned);
  EXPECT_EQ(checkTrailer(t, id), SliceCheck::kOk);  // the trailer itself is intact
  EXPECT_EQ(checkSlice(t, id, 0x0BADF00Du), SliceCheck::kPoisoned);
  EXPECT_FALSE(isLinkFailure(checkSlice(t, id, 0x0BADF00Du)));
}

TEST(TrailerTest, SealAfterChangingAttemptOrFlagsKeepsItValid) {
  const SliceId id = sampleId();
  Trailer t = makeTrailer(id, 42, 0);
  t.attempt = 3;
  EXPECT_EQ(checkTrailer(t, id), SliceCheck::kMalformed) << "a changed field without resealing";
  sealTrailer(&t);
  SliceId retry = id;
  retry.attempt = 3;
  EXPECT_EQ(checkTrailer(t, retry), SliceCheck::kOk);
  EXPECT_EQ(checkSlice(t, retry, 42), SliceCheck::kOk);
  EXPECT_EQ(checkTrailer(t, id), SliceCheck::kStale);  // the old attempt no longer matches
  // Identical to a freshly made trailer for the new attempt.
  const Trailer fresh = makeTrailer(retry, 42, 0);
  EXPECT_EQ(std::memcmp(&t, &fresh, sizeof t), 0);

  t.flags = kTrailerPoisoned;
  sealTrailer(&t);
  EXPECT_EQ(checkSlice(t, retry, 42), SliceCheck::kPoisoned);
  // Sealing an intact trailer is a no-op.
  const Trailer before = t;
  sealTrailer(&t);
  EXPECT_EQ(std::memcmp(&t, &before, sizeof t), 0);
}

TEST(TrailerTest, IsLinkFailureTruthTable) {
  EXPECT_FALSE(isLinkFailure(SliceCheck::kOk));
  EXPECT_TRUE(isLinkFailure(SliceCheck::kMalformed));
  EXPECT_TRUE(isLinkFailure(SliceCheck::kStale));
  EXPECT_TRUE(isLinkFailure(SliceCheck::kSizeMismatch));
  EXPECT_TRUE(isLinkFailure(SliceCheck::kCorrupt));
  EXPECT_FALSE(isLinkFailure(SliceCheck::kPoisoned));
}

TEST(TrailerTest, SliceCheckNamesAreNonEmptyAndDistinct) {
  std::set<std::string> names;
  for (SliceCheck c : kAllChecks) {
    const char* name = sliceCheckName(c);
    ASSERT_NE(name, nullptr);
    EXPECT_GT(std::strlen(name), 0u) << static_cast<int>(c);
    names.insert(name);
  }
  EXPECT_EQ(names.size(), std::size(kAllChecks));
  EXPECT_STREQ(sliceCheckName(SliceCheck::kOk), "ok");
  EXPECT_STREQ(sliceCheckName(SliceCheck::kCorrupt), "payload CRC mismatch");
  EXPECT_STREQ(sliceCheckName(static_cast<SliceCheck>(200)), "unknown");
}

// Issue 17, defect 7: a trailer of another format version read as "malformed trailer", a bad link.
TEST(TrailerVersionTest, AnIntactTrailerOfAnotherVersionSaysProtocolVersion) {
  const SliceId id = sampleId();
  Trailer t = makeTrailer(id, 42, 0);
  t.magic = (kTrailerMagic & 0x00FFFFFFu) | (uint32_t('2') << 24);  // "RGT2", sealed by its sender
  sealTrailer(&t);
  EXPECT_EQ(checkTrailer(t, id), SliceCheck::kVersionSkew);
  EXPECT_EQ(checkSlice(t, id, 42), SliceCheck::kVersionSkew);
  EXPECT_TRUE(isLinkFailure(SliceCheck::kVersionSkew));  // never used; fails the collective after its retries
  EXPECT_TRUE(isTrailerVersionSkew(t));
  EXPECT_EQ(
      describeTrailerCheck(t, id, 42),
      "protocol version mismatch: trailer format version 2 (magic 0x32544752), this build reads version 1 "
      "(ranks of different ringguard builds)");
  t.magic = kTrailerMagicFamily;  // version byte 0: not a printable character
  sealTrailer(&t);
  EXPECT_NE(describeTrailerCheck(t, id, 42).find("version byte 0 (magic 0x00544752)"), std::string::npos);
}

TEST(TrailerVersionTest, DamageIsStillABadLink) {
  const SliceId id = sampleId();
  const Trailer good = makeTrailer(id, 42, 0);
  EXPECT_FALSE(isTrailerVersionSkew(good));
  EXPECT_EQ(describeTrailerCheck(good, id, 42), "ok");
  EXPECT_EQ(describeTrailerCheck(good, id, 41), "payload CRC mismatch");
  // The version byte flipped in transit: the trailer CRC no longer matches, so a link damaged it.
  for (int bit = 24; bit < 32; ++bit) {
    Trailer t = good;
    t.magic ^= 1u << bit;
    EXPECT_FALSE(isTrailerVersionSkew(t)) << bit;
    EXPECT_EQ(describeTrailerCheck(t, id, 42), "malformed trailer") << bit;
  }
  // Another format altogether (not "RGT"), even sealed, is malformed, not a version.
  Trailer other = good;
  other.magic = 0x31434752;  // "RGC1", a control frame's magic
  sealTrailer(&other);
  EXPECT_FALSE(isTrailerVersionSkew(other));
  EXPECT_EQ(describeTrailerCheck(other, id, 42), "malformed trailer");
}

// Ranks of two builds meet the handshake's version check first ("ringguard protocol version differs"), so a
// trailer of the other version never arrives, as long as a new trailer format comes with a higher
// kProtocolVersion. Trailer format 1 was current at protocol version 2: a new format fails this test until
// the protocol version is raised past 2 and the new pair recorded here.
TEST(TrailerVersionTest, TrailerFormatVersionIsPinnedToTheProtocolVersion) {
  EXPECT_EQ(kTrailerMagic, 0x31544752u)
      << "a new trailer format version needs a kProtocolVersion bump (runtime/handshake.h); record the pair";
  EXPECT_GE(kProtocolVersion, 2u);
}

}  // namespace
}  // namespace ringguard
