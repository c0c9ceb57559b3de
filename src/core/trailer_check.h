#pragma once
// The trailer's build and check (docs/design/protocol.md, "Frame and trailer") as host + device templates
// over the CRC of the trailer body, so that makeTrailer / checkSlice of core/trailer.cc and the device's
// trailer kernels (src/cuda/trailer_kernels.cu, and the verdict of the verify + apply kernels) are one
// implementation. The host passes its CRC-32 (ISA-L, core/crc32); the device passes trailerWordsCrc below,
// the same CRC-32 computed on the nine words of the body with slicing-by-4 tables built at compile time.
// tests/unit/test_element_ops.cc checks trailerWordsCrc against the host CRC.
#include <cstddef>
#include <cstdint>

#include "core/crc32_combine.h"
#include "core/host_device.h"
#include "core/trailer.h"

namespace ringguard {
namespace trailer_check {

// `#pragma unroll` for the device pass only: the host compiler sees these bodies too.
#if defined(__CUDA_ARCH__)
#define RINGGUARD_TRAILER_UNROLL _Pragma("unroll")
#else
#define RINGGUARD_TRAILER_UNROLL
#endif

// `BodyCrc` is a callable uint32_t(const Trailer&): the CRC-32 of the 36 bytes before trailerCrc.

template <typename BodyCrc>
RINGGUARD_HOST_DEVICE inline Trailer makeTrailer(const SliceId& id, uint32_t payloadCrc, uint16_t flags,
                                                 BodyCrc bodyCrc) {
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
  t.trailerCrc = bodyCrc(t);
  return t;
}

template <typename BodyCrc>
RINGGUARD_HOST_DEVICE inline bool isVersionSkew(const Trailer& t, BodyCrc bodyCrc) {
  return t.magic != kTrailerMagic && (t.magic & 0x00FFFFFFu) == kTrailerMagicFamily &&
         t.trailerCrc == bodyCrc(t);
}

// Everything except the payload CRC. The body CRC is computed at most once: only a trailer with the
// format's name is checksummed.
template <typename BodyCrc>
RINGGUARD_HOST_DEVICE inline SliceCheck checkTrailer(const Trailer& t, const SliceId& e, BodyCrc bodyCrc) {
  if (isVersionSkew(t, bodyCrc)) return SliceCheck::kVersionSkew;
  if (t.magic != kTrailerMagic || t.trailerCrc != bodyCrc(t)) return SliceCheck::kMalformed;
  if (t.seq != e.seq || t.step != e.step || t.slice != e.slice || t.column != e.column ||
      t.attempt != e.attempt) {
    return SliceCheck::kStale;
  }
  if (t.payloadBytes != e.payloadBytes) return SliceCheck::kSizeMismatch;
  if ((t.flags & ~kTrailerPoisoned) != 0) return SliceCheck::kMalformed;
  return SliceCheck::kOk;
}

// The full check, in protocol order: the trailer, then the payload CRC, then the poisoned flag.
template <typename BodyCrc>
RINGGUARD_HOST_DEVICE inline SliceCheck checkSlice(const Trailer& t, const SliceId& expected,
                                                   uint32_t receivedPayloadCrc, BodyCrc bodyCrc) {
  const SliceCheck c = checkTrailer(t, expected, bodyCrc);
  if (c != SliceCheck::kOk) return c;
  if (t.payloadCrc != receivedPayloadCrc) return SliceCheck::kCorrupt;
  if (t.flags & kTrailerPoisoned) return SliceCheck::kPoisoned;
  return SliceCheck::kOk;
}

// ---- The body CRC on words: slicing-by-4 tables at compile time -------------------------------------------

struct WordCrcTables {
  uint32_t t[4][256];  // t[k][b]: the register after byte b followed by k zero bytes, from 0
};

RINGGUARD_HOST_DEVICE constexpr WordCrcTables makeWordCrcTables() {
  WordCrcTables s{};
  for (uint32_t b = 0; b < 256; ++b) s.t[0][b] = crc32TableEntry(b);
  for (int k = 1; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) s.t[k][b] = (s.t[k - 1][b] >> 8) ^ s.t[0][s.t[k - 1][b] & 0xffu];
  }
  return s;
}

static_assert(sizeof(Trailer) == 40 && offsetof(Trailer, trailerCrc) == 36, "trailer wire layout");

// CRC-32 of the first 36 bytes of `t`, as the nine little-endian words before trailerCrc (no byte access to
// the struct: on the device the trailer stays in registers). `tab` is makeWordCrcTables(), wherever it lives.
RINGGUARD_HOST_DEVICE inline uint32_t trailerWordsCrc(const Trailer& t, const WordCrcTables& tab) {
  const uint32_t words[9] = {t.magic,
                             t.payloadCrc,
                             uint32_t(t.seq),
                             uint32_t(t.seq >> 32),
                             t.step,
                             t.slice,
                             t.column,
                             t.payloadBytes,
                             uint32_t(t.attempt) | (uint32_t(t.flags) << 16)};
  uint32_t c = 0xFFFFFFFFu;
  RINGGUARD_TRAILER_UNROLL
  for (int w = 0; w < 9; ++w) {
    c ^= words[w];
    c = tab.t[3][c & 0xffu] ^ tab.t[2][(c >> 8) & 0xffu] ^ tab.t[1][(c >> 16) & 0xffu] ^ tab.t[0][c >> 24];
  }
  return c ^ 0xFFFFFFFFu;
}

#undef RINGGUARD_TRAILER_UNROLL

}  // namespace trailer_check
}  // namespace ringguard
