#pragma once
// f16 and bf16 <-> f32 conversions (and float8_e4m3fn -> f32, for messages), round to nearest even, NaN kept
// quiet with its payload: the host reduction's and the device kernels' (core/element_ops.h uses these on the
// host, and on the device for NaN / Inf, where the hardware conversions, which round the same way, do every
// finite f16).
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace ringguard {

RINGGUARD_HOST_DEVICE inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | (uint32_t(127 - 15 - e) << 23) | ((mant & 0x3FF) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

RINGGUARD_HOST_DEVICE inline uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = uint16_t((x >> 16) & 0x8000);
  uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) {  // inf or nan (keep nan quiet)
    return uint16_t(sign | 0x7C00 | (absx > 0x7F800000u ? 0x200 | ((absx >> 13) & 0x3FF) : 0));
  }
  if (absx >= 0x477FF000u) return uint16_t(sign | 0x7C00);  // rounds to >= 65520: overflow to inf
  if (absx < 0x38800000u) {                                 // below the smallest normal half: subnormal
    if (absx < 0x33000000u) return sign;                    // < 2^-25 rounds to zero
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7FFFFF) | 0x800000;
    uint32_t shift = 126 - e;  // so that the result is m >> (shift - 1 + ...) in half-subnormal units
    // value = m * 2^(e-150); half subnormal unit = 2^-24 -> h = m * 2^(e-126) = m >> (126 - e)
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((absx - 0x38000000u) >> 13);  // rebias exponent 127 -> 15
  uint32_t rem = absx & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return uint16_t(sign | h);
}

RINGGUARD_HOST_DEVICE inline float bf16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

RINGGUARD_HOST_DEVICE inline uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  uint32_t rounding = 0x7FFF + ((x >> 16) & 1);
  return uint16_t((x + rounding) >> 16);
}

// float8_e4m3fn -> f32 (exact): sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity, NaN S.1111.111.
RINGGUARD_HOST_DEVICE inline float float8e4m3ToFloat(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t exp = (b >> 3) & 0xfu, mant = b & 0x7u;
  uint32_t bits;
  if (exp == 0xfu && mant == 0x7u) {
    bits = sign | 0x7fc00000u;
  } else if (exp != 0) {
    bits = sign | ((exp + 120u) << 23) | (mant << 20);  // 127 - 7
  } else if (mant == 0) {
    bits = sign;
  } else {                        // subnormal: mant / 8 * 2^-6, normalised
    uint32_t e = 121u, m = mant;  // 2^-6 as an f32 exponent is 121
    while ((m & 0x8u) == 0) {
      m <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((m & 0x7u) << 20);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace ringguard
