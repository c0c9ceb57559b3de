#include "core/trailer.h"

#include <cstddef>
#include <cstdio>
#include <string>

#include "ringguard/core/crc32.h"

namespace ringguard {

namespace {
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
  Trailer t{};
  t.magic = kTrailerMagic;
  t.payloadCrc = payloadCrc;
  t.seq = id.seq;
  t.step = id.step;
  t.slice = id.slice;
  t.column = id.column;
  t.payloadBytes = id.payloadBytes;
  t.attempt = id.attempt;
  t.flags = flags;
  sealTrailer(&t);
  return t;
}

void sealTrailer(Trailer* t) { t->trailerCrc = trailerBodyCrc(*t); }

SliceCheck checkTrailer(const Trailer& t, const SliceId& e) {
  if (isTrailerVersionSkew(t)) return SliceCheck::kVersionSkew;
  if (t.magic != kTrailerMagic || t.trailerCrc != trailerBodyCrc(t)) return SliceCheck::kMalformed;
  if (t.seq != e.seq || t.step != e.step || t.slice != e.slice || t.column != e.column ||
      t.attempt != e.attempt) {
    return SliceCheck::kStale;
  }
  if (t.payloadBytes != e.payloadBytes) return SliceCheck::kSizeMismatch;
  if ((t.flags & ~kTrailerPoisoned) != 0) return SliceCheck::kMalformed;
  return SliceCheck::kOk;
}

SliceCheck checkSlice(const Trailer& t, const SliceId& expected, uint32_t receivedPayloadCrc) {
  SliceCheck c = checkTrailer(t, expected);
  if (c != SliceCheck::kOk) return c;
  if (t.payloadCrc != receivedPayloadCrc) return SliceCheck::kCorrupt;
  if (t.flags & kTrailerPoisoned) return SliceCheck::kPoisoned;
  return SliceCheck::kOk;
}

bool isTrailerVersionSkew(const Trailer& t) {
  return t.magic != kTrailerMagic && (t.magic & 0x00FFFFFFu) == kTrailerMagicFamily &&
         t.trailerCrc == trailerBodyCrc(t);
}

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
