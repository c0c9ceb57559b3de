#pragma once
// Independent references for the f16 / bf16 conversions, shared by test_reduce.cc and test_element_ops.cc:
// exact values of halves by ldexp and round to nearest even by search, never through core/float16.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace ringguard {
namespace testing {

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bool isHalfNan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
inline bool isBf16Nan(uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// Exact value of a finite half, independently of halfToFloat.
inline double halfValue(uint16_t h) {
  const int exp = (h >> 10) & 0x1F;
  const int mant = h & 0x3FF;
  const double mag = exp == 0 ? std::ldexp(double(mant), -24) : std::ldexp(double(1024 + mant), exp - 25);
  return (h & 0x8000) ? -mag : mag;
}

// Reference float -> half, round to nearest even, by search over the table of all finite halves. A NaN
// gives 0x7E00 with its sign (callers that care about payloads use referenceNanToHalf).
inline uint16_t referenceFloatToHalf(float f) {
  static const std::vector<double> positive = [] {
    std::vector<double> v;
    for (uint16_t h = 0; h <= 0x7BFF; ++h) v.push_back(halfValue(h));
    return v;
  }();
  const uint32_t x = bitsOf(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  if (std::isnan(f)) return uint16_t(sign | 0x7E00);
  const double a = std::fabs(double(f));
  if (a >= 65520.0) return uint16_t(sign | 0x7C00);  // 65504 + half an ulp (16) and beyond: inf
  if (a >= 65504.0) return uint16_t(sign | 0x7BFF);
  const auto it = std::lower_bound(positive.begin(), positive.end(), a);
  const uint16_t hi = uint16_t(it - positive.begin());
  if (hi == 0 || positive[hi] == a) return uint16_t(sign | hi);
  const uint16_t lo = uint16_t(hi - 1);
  const double dlo = a - positive[lo], dhi = positive[hi] - a;
  const uint16_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
  return uint16_t(sign | pick);
}

// Reference float -> bf16 by comparing the two candidate neighbours in double (NaN: as referenceFloatToHalf,
// 0x7FC0 with its sign).
inline uint16_t referenceFloatToBf16(float f) {
  const uint32_t x = bitsOf(f);
  const uint16_t sign = uint16_t(x >> 16) & 0x8000;
  if (std::isnan(f)) return uint16_t(sign | 0x7FC0);
  const uint32_t ax = x & 0x7FFFFFFFu;
  const uint16_t lo = uint16_t(ax >> 16);  // truncation
  if ((ax & 0xFFFF) == 0) return uint16_t(sign | lo);
  const uint16_t hi = uint16_t(lo + 1);
  const double a = double(floatOf(ax));
  const double vlo = double(floatOf(uint32_t(lo) << 16));
  const double vhi = hi == 0x7F80 ? std::ldexp(1.0, 128) : double(floatOf(uint32_t(hi) << 16));
  const double dlo = a - vlo, dhi = vhi - a;
  const uint16_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
  return uint16_t(sign | pick);
}

}  // namespace testing
}  // namespace ringguard
