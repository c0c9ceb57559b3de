#include "ringguard/core/crc32.h"

#include <algorithm>

#ifdef RINGGUARD_CRC_ISAL
#include <isa-l/crc.h>
#else
#include <zlib.h>
#endif

namespace ringguard {

#ifdef RINGGUARD_CRC_ISAL

// Below this many bytes ISA-L's table-driven crc32_gzip_refl_base: the protocol's own records (a trailer's
// 36 bytes, a seal's 44, a fingerprint's 40) are checked several times in every collective, and inside a
// collective, between waits on lines another core writes, the SIMD routine took ~400 cycles for them where
// the table took ~200 (in a tight loop the SIMD routine takes ~35); a 4 KiB collective makes four to six such
// checks per rank (docs/PERFORMANCE.md, issue 45, forty-eighth session).
inline constexpr size_t kTableCrcBelowBytes = 64;

// Both ISA-L routines invert the seed on entry and the result on exit, exactly like zlib's crc32, so they
// chain the same way and crc32_gzip_refl(0, p, 0) == 0. crc32_ieee is the non-reflected (BZIP2-style) CRC
// and would give different values, so it must not be used here.
uint32_t crc32(const void* data, size_t len, uint32_t crc) {
  if (len == 0) return crc;
  // crc32_gzip_refl_base takes a non-const pointer; it only reads.
  auto* bytes = const_cast<unsigned char*>(static_cast<const unsigned char*>(data));
  if (len < kTableCrcBelowBytes) return crc32_gzip_refl_base(crc, bytes, static_cast<uint64_t>(len));
  return crc32_gzip_refl(crc, bytes, static_cast<uint64_t>(len));
}

const char* crc32Backend() { return "isa-l"; }

#else

uint32_t crc32(const void* data, size_t len, uint32_t crc) {
  // zlib's length is a uInt (32 bits), so feed buffers above 4 GiB in pieces; chaining makes it exact.
  constexpr size_t kMaxChunk = size_t(1) << 30;
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (len > 0) {
    const size_t n = std::min(len, kMaxChunk);
    c = ::crc32(c, p, static_cast<uInt>(n));
    p += n;
    len -= n;
  }
  return static_cast<uint32_t>(c);
}

const char* crc32Backend() { return "zlib"; }

#endif

}  // namespace ringguard
