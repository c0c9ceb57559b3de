#pragma once
// CRC-32 combine math (zlib's crc32_combine), header-only so that host code and CUDA kernels share one
// definition: slices are checksummed in pieces in parallel and the piece CRCs are merged without touching
// the data again.
//
// Polynomials are kept in zlib's reflected form: bit 31 is the coefficient of x^0, bit 0 that of x^31,
// and the CRC polynomial P is 0xEDB88320 (x^32 is implicit).
#include <cstdint>

#include "core/host_device.h"

namespace ringguard {

inline constexpr uint32_t kCrc32Polynomial = 0xEDB88320u;

// Entry `i` (0..255) of the standard byte-at-a-time table, for kernels that build their tables at compile
// time. The host CRC never uses it (ISA-L or zlib is much faster).
RINGGUARD_HOST_DEVICE constexpr uint32_t crc32TableEntry(uint32_t i) {
  uint32_t c = i;
  for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kCrc32Polynomial : c >> 1;
  return c;
}

// a * b mod P (zlib's multmodp): for each bit of `a`, from x^0 (bit 31) up, b * x^i is added where the bit is
// set. Without branches: the 32 steps always run (unrolled in kernels), so lanes never diverge on their data
// and no step waits on a branch. The merge of the device CRC's segment CRCs is a tree of these, one after
// another, and a branching loop (zlib's, with an early exit) took ~1.6 us a level there, most of a 16.7 us
// merge of 132 segments on an H100 (docs/PERFORMANCE.md, "The replica check", forty-ninth session).
RINGGUARD_HOST_DEVICE constexpr uint32_t crc32Multiply(uint32_t a, uint32_t b) {
  uint32_t p = 0;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int i = 31; i >= 0; --i) {
    p ^= b & (0u - ((a >> i) & 1u));
    b = (b >> 1) ^ (kCrc32Polynomial & (0u - (b & 1u)));
  }
  return p;
}

// x^(2^k) mod P for k = 0..31.
struct Crc32X2nTable {
  uint32_t v[32];
};

RINGGUARD_HOST_DEVICE constexpr Crc32X2nTable makeCrc32X2nTable() {
  Crc32X2nTable t{};
  uint32_t p = 1u << 30;  // x^1
  for (int k = 0; k < 32; ++k) {
    t.v[k] = p;
    p = crc32Multiply(p, p);
  }
  return t;
}

namespace detail {

inline constexpr Crc32X2nTable kCrc32X2nHost = makeCrc32X2nTable();

// P is primitive, so x^(2^32) == x and the powers x^(2^k) repeat with period 32; that is what lets
// crc32XPow8n index the table with k & 31 for any 64-bit length, as zlib does.
static_assert(crc32Multiply(kCrc32X2nHost.v[31], kCrc32X2nHost.v[31]) == kCrc32X2nHost.v[0],
              "x^(2^32) mod P must equal x");

#if defined(__CUDACC__)
// Device code cannot index a host constexpr array at run time, so it gets its own copy in constant memory.
// `static` gives each translation unit its own copy, which needs no relocatable device code.
static __constant__ Crc32X2nTable kCrc32X2nDevice = makeCrc32X2nTable();
#endif

RINGGUARD_HOST_DEVICE inline uint32_t crc32X2n(unsigned k) {
#if defined(__CUDA_ARCH__)
  return kCrc32X2nDevice.v[k & 31];
#else
  return kCrc32X2nHost.v[k & 31];
#endif
}

}  // namespace detail

// x^(8n) mod P: the multiplier that shifts a CRC register past n zero bytes (zlib's x2nmodp(n, 3)).
RINGGUARD_HOST_DEVICE inline uint32_t crc32XPow8n(uint64_t n) {
  uint32_t p = 1u << 31;  // x^0
  unsigned k = 3;         // 8n = n * 2^3
  while (n != 0) {
    if (n & 1u) p = crc32Multiply(detail::crc32X2n(k), p);
    n >>= 1;
    ++k;
  }
  return p;
}

// The CRC register `crc` advanced over `nbytes` zero bytes without the init/xorout conditioning, i.e. the
// linear part of combining: crc32Combine(a, b, n) == crc32ShiftZeros(a, n) ^ b.
RINGGUARD_HOST_DEVICE inline uint32_t crc32ShiftZeros(uint32_t crc, uint64_t nbytes) {
  return crc32Multiply(crc32XPow8n(nbytes), crc);
}

// CRC of A || B from crc1 = crc32(A), crc2 = crc32(B) and len2 = |B|: exactly zlib's crc32_combine64.
RINGGUARD_HOST_DEVICE inline uint32_t crc32Combine(uint32_t crc1, uint32_t crc2, uint64_t len2) {
  return crc32Multiply(crc32XPow8n(len2), crc1) ^ crc2;
}

}  // namespace ringguard
