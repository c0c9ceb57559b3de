#pragma once
// The trailer that covers every slice crossing a link (docs/design/protocol.md, "Frame and trailer").
#include <cstddef>
#include <cstdint>
#include <string>

namespace ringguard {

inline constexpr uint32_t kTrailerMagic = 0x31544752;  // "RGT1" little-endian
// The magic's first three bytes name the format ("RGT"), its last byte the format's version ('1'). A change
// of the version byte goes with a kProtocolVersion bump (runtime/handshake.h), so ranks of two builds stop
// at the handshake ("ringguard protocol version differs") before a trailer of the other build arrives.
inline constexpr uint32_t kTrailerMagicFamily = kTrailerMagic & 0x00FFFFFFu;
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
  kVersionSkew,   // intact, but of another trailer format version (isTrailerVersionSkew): another build
};
// The highest code: verdict codes travel between ranks, and one above it from a peer is rejected.
inline constexpr SliceCheck kLastSliceCheck = SliceCheck::kVersionSkew;
const char* sliceCheckName(SliceCheck c);
// True for the outcomes that mean the link damaged something (counted as detected).
inline bool isLinkFailure(SliceCheck c) { return c != SliceCheck::kOk && c != SliceCheck::kPoisoned; }

// True when `t` is intact (its trailer CRC matches) and has the format's name but another version byte: a
// trailer of another protocol version, not one a link damaged. checkTrailer calls it kVersionSkew, and
// describeTrailerCheck names both versions.
bool isTrailerVersionSkew(const Trailer& t);
// checkSlice's verdict in words: sliceCheckName, except for a version skew, named with both versions:
// "protocol version mismatch: trailer format version 2 (magic 0x32544752), this build reads version 1
// (ranks of different ringguard builds)".
std::string describeTrailerCheck(const Trailer& t, const SliceId& expected, uint32_t receivedPayloadCrc);

// Builds a trailer for `id` with the given payload CRC and flags (trailerCrc filled in).
Trailer makeTrailer(const SliceId& id, uint32_t payloadCrc, uint16_t flags);
// Re-seals a trailer after a field changed (attempt, flags).
void sealTrailer(Trailer* t);
// Checks the trailer alone (everything except the payload CRC).
SliceCheck checkTrailer(const Trailer& t, const SliceId& expected);
// Full check, in protocol order, given the CRC the receiver computed over the payload it got.
SliceCheck checkSlice(const Trailer& t, const SliceId& expected, uint32_t receivedPayloadCrc);

}  // namespace ringguard
