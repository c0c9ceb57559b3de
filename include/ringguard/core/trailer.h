#pragma once
// The trailer that covers every slice crossing a link (docs/design/protocol.md, "Frame and trailer").
#include <cstddef>
#include <cstdint>

namespace ringguard {

inline constexpr uint32_t kTrailerMagic = 0x31544752;  // "RGT1" little-endian
inline constexpr uint16_t kTrailerPoisoned = 1;

// Identity of one slice transfer: what the receiver expects.
struct SliceId {
  uint64_t seq = 0;
  uint32_t step = 0;
  uint32_t slice = 0;
  uint32_t column = 0;
  uint32_t payloadBytes = 0;
  uint16_t attempt = 0;
};

// Wire layout, 40 bytes, little-endian host order (all supported hosts are little-endian).
struct Trailer {
  uint32_t magic;
  uint32_t payloadCrc;
  uint64_t seq;
  uint32_t step;
  uint32_t slice;
  uint32_t column;
  uint32_t payloadBytes;
  uint16_t attempt;
  uint16_t flags;
  uint32_t trailerCrc;  // CRC-32 of the 36 bytes before it
};
static_assert(sizeof(Trailer) == 40, "trailer is a fixed 40-byte wire format");

enum class SliceCheck : uint8_t {
  kOk = 0,
  kMalformed,     // bad magic or trailer CRC: the trailer itself was damaged
  kStale,         // a valid trailer for another slice, step, attempt or collective
  kSizeMismatch,  // the trailer announces another payload size than the schedule
  kCorrupt,       // payload CRC mismatch
  kPoisoned,      // intact, but the sender had no verified value for it (not a link failure)
};
const char* sliceCheckName(SliceCheck c);
// True for the outcomes that mean the link damaged something (counted as detected).
inline bool isLinkFailure(SliceCheck c) { return c != SliceCheck::kOk && c != SliceCheck::kPoisoned; }

// Builds a trailer for `id` with the given payload CRC and flags (trailerCrc filled in).
Trailer makeTrailer(const SliceId& id, uint32_t payloadCrc, uint16_t flags);
// Re-seals a trailer after a field changed (attempt, flags).
void sealTrailer(Trailer* t);
// Checks the trailer alone (everything except the payload CRC).
SliceCheck checkTrailer(const Trailer& t, const SliceId& expected);
// Full check, in protocol order, given the CRC the receiver computed over the payload it got.
SliceCheck checkSlice(const Trailer& t, const SliceId& expected, uint32_t receivedPayloadCrc);

}  // namespace ringguard
