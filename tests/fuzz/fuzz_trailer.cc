// Trailer decoding (core/trailer.h): any 40 bytes against any expected slice identity and payload CRC.
// Input: Trailer (40 bytes), SliceId fields, the received payload CRC, a mode byte, a bit index; mode bit 0
// reseals the trailer first (so the fuzzer reaches the checks behind the trailer CRC: magic, identity,
// size, flags), bit 1 checks a trailer made for the expected slice and that bit flipped.
#include <cstdint>
#include <cstring>
#include <string>

#include "core/trailer.h"
#include "fuzz_util.h"

using namespace ringguard;
using ringguard::fuzz::FuzzInput;

namespace {

bool intact(const Trailer& t) {
  Trailer resealed = t;
  sealTrailer(&resealed);
  return resealed.trailerCrc == t.trailerCrc;
}

bool sameIdentity(const Trailer& t, const SliceId& e) {
  return t.seq == e.seq && t.step == e.step && t.slice == e.slice && t.column == e.column &&
         t.attempt == e.attempt && t.payloadBytes == e.payloadBytes;
}

void checkOne(const Trailer& t, const SliceId& e, uint32_t crc) {
  const SliceCheck trailerOnly = checkTrailer(t, e);
  const SliceCheck c = checkSlice(t, e, crc);
  RINGGUARD_FUZZ_CHECK(uint8_t(c) <= uint8_t(kLastSliceCheck));
  RINGGUARD_FUZZ_CHECK(std::string(sliceCheckName(c)) != "unknown");
  // The payload CRC is checked only behind an intact trailer.
  if (trailerOnly != SliceCheck::kOk) {
    RINGGUARD_FUZZ_CHECK(c == trailerOnly);
  } else {
    RINGGUARD_FUZZ_CHECK(c == SliceCheck::kOk || c == SliceCheck::kCorrupt || c == SliceCheck::kPoisoned);
  }
  if (c == SliceCheck::kOk || c == SliceCheck::kPoisoned) {
    RINGGUARD_FUZZ_CHECK(t.magic == kTrailerMagic && intact(t) && sameIdentity(t, e) && t.payloadCrc == crc);
    RINGGUARD_FUZZ_CHECK(t.flags == (c == SliceCheck::kPoisoned ? kTrailerPoisoned : 0));
    RINGGUARD_FUZZ_CHECK(!isLinkFailure(c));
  } else {
    RINGGUARD_FUZZ_CHECK(isLinkFailure(c));
  }
  if (c == SliceCheck::kStale || c == SliceCheck::kSizeMismatch) {
    RINGGUARD_FUZZ_CHECK(t.magic == kTrailerMagic && intact(t) && !sameIdentity(t, e));
  }
  const bool skew = isTrailerVersionSkew(t);
  RINGGUARD_FUZZ_CHECK(skew == (c == SliceCheck::kVersionSkew));
  if (skew) RINGGUARD_FUZZ_CHECK(intact(t));
  const std::string words = describeTrailerCheck(t, e, crc);
  RINGGUARD_FUZZ_CHECK(!words.empty());
  RINGGUARD_FUZZ_CHECK((words.find("protocol version") != std::string::npos) == skew);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  Trailer t = in.take<Trailer>();
  SliceId e;
  e.seq = in.take<uint64_t>();
  e.step = in.take<uint32_t>();
  e.slice = in.take<uint32_t>();
  e.column = in.take<uint32_t>();
  e.payloadBytes = in.take<uint32_t>();
  e.attempt = in.take<uint16_t>();
  const uint32_t crc = in.take<uint32_t>();
  const uint8_t mode = in.take<uint8_t>();
  const uint16_t bit = in.take<uint16_t>() % (sizeof(Trailer) * 8);

  if (mode & 1) sealTrailer(&t);
  checkOne(t, e, crc);

  if (mode & 2) {
    // What a sender makes for exactly this slice passes; any one bit of it flipped does not.
    const uint16_t flags = (mode & 4) ? kTrailerPoisoned : 0;
    const Trailer good = makeTrailer(e, crc, flags);
    RINGGUARD_FUZZ_CHECK(checkSlice(good, e, crc) == (flags ? SliceCheck::kPoisoned : SliceCheck::kOk));
    Trailer bad = good;
    reinterpret_cast<uint8_t*>(&bad)[bit / 8] ^= uint8_t(1u << (bit % 8));
    RINGGUARD_FUZZ_CHECK(checkSlice(bad, e, crc) == SliceCheck::kMalformed);
    RINGGUARD_FUZZ_CHECK(!isTrailerVersionSkew(bad));
    checkOne(bad, e, crc);
  }
  return 0;
}
