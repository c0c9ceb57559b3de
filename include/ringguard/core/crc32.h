#pragma once
// CRC-32 as in IEEE 802.3 / zlib / boost::crc_32_type: reflected polynomial 0xEDB88320, init and xorout
// 0xFFFFFFFF. crc32("123456789") == 0xCBF43926.
//
// Chaining follows zlib: crc32(crc32(0, a), b) == crc32(0, a || b), and the empty input gives 0.
#include <cstddef>
#include <cstdint>

namespace ringguard {

// CRC of `len` bytes at `data`, continuing from `crc` (0 to start). Hot path: ISA-L crc32_gzip_refl,
// or zlib's crc32 where ISA-L is missing (crc32Backend() says which).
uint32_t crc32(const void* data, size_t len, uint32_t crc = 0);

// "isa-l" or "zlib": which library computes crc32() in this build.
const char* crc32Backend();

}  // namespace ringguard
