#include "core/trailer.h"

#include <cstddef>
#include <cstdio>
#include <string>

#include "core/trailer_check.h"
#include "ringguard/core/crc32.h"

namespace ringguard {

namespace {
// The host's body CRC for the shared build and check (core/trailer_check.h): ISA-L over the bytes.
uint32_t trailerBodyCrc(const Trailer& t) { return crc32(&t, offsetof(Trailer, trailerCrc)); }
}  // namespace

const char* sliceCheckName(SliceCheck c) {
  switch (c) {
    case SliceCheck::kOk:
      return "ok";
    case SliceCheck::kMalformed:
      return "malformed trailer";
    case SliceCheck::kStale:
      return "stale or duplicated slice";
    case SliceCheck::kSizeMismatch:
      return "size mismatch";
    case SliceCheck::kCorrupt:
      return "payload CRC mismatch";
    case SliceCheck::kPoisoned:
      return "poisoned";
    case SliceCheck::kVersionSkew:
      return "protocol version mismatch: a trailer of another format version (ranks of different ringguard "
             "builds)";
  }
  return "unknown";
}

Trailer makeTrailer(const SliceId& id, uint32_t payloadCrc, uint16_t flags) {
  return trailer_check::makeTrailer(id, payloadCrc, flags, trailerBodyCrc);
}

void sealTrailer(Trailer* t) { t->trailerCrc = trailerBodyCrc(*t); }

SliceCheck checkTrailer(const Trailer& t, const SliceId& e) {
  return trailer_check::checkTrailer(t, e, trailerBodyCrc);
}

SliceCheck checkSlice(const Trailer& t, const SliceId& expected, uint32_t receivedPayloadCrc) {
  return trailer_check::checkSlice(t, expected, receivedPayloadCrc, trailerBodyCrc);
}

bool isTrailerVersionSkew(const Trailer& t) { return trailer_check::isVersionSkew(t, trailerBodyCrc); }

std::string describeTrailerCheck(const Trailer& t, const SliceId& expected, uint32_t receivedPayloadCrc) {
  const SliceCheck c = checkSlice(t, expected, receivedPayloadCrc);
  if (c != SliceCheck::kVersionSkew) return sliceCheckName(c);
  // The version byte is shown as a character when it is one ('2'), else as its number.
  auto version = [](uint32_t magic) {
    const unsigned v = magic >> 24;
    return (v >= 0x21 && v <= 0x7E) ? std::string(1, char(v)) : "byte " + std::to_string(v);
  };
  char magicHex[16];
  std::snprintf(magicHex, sizeof magicHex, "0x%08X", unsigned(t.magic));
  return "protocol version mismatch: trailer format version " + version(t.magic) + " (magic " + magicHex +
         "), this build reads version " + version(kTrailerMagic) + " (ranks of different ringguard builds)";
}

}  // namespace ringguard
