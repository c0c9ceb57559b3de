#pragma once
// Bit patterns of the floating types, shared by the guard's host backend, its CUDA kernels
// (src/cuda/guard_scan.cu) and the collectives' NaN check (core/non_finite.cc), so all of them write and
// recognise exactly the same values. Elements are handled as unsigned words of their width: no float
// arithmetic, so a NaN payload or a -0 is never altered by a copy.
#include <cstdint>
#include <cstring>

#include "core/float16.h"
#include "core/host_device.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace element_bits {

// Exponent mask (non-finite iff all its bits are set), sign bit, and the values the guard writes.
// float8_e4m3fn has no infinity and one NaN per sign, S.1111.111: its mask is exponent and mantissa
// (non-finite iff all seven are set), and its "infinity" is that NaN, so an injected +-Inf is a NaN there.
struct FloatBits {
  uint64_t exponent;
  uint64_t sign;
  uint64_t quietNan;
  uint64_t posInf;
  uint64_t maxFinite;  // the largest finite value; the lowest is sign | maxFinite
  int width;           // bytes
  bool hasInf;         // false: every non-finite value is a NaN
};

RINGGUARD_HOST_DEVICE inline bool floatBits(DataType t, FloatBits* out) {
  switch (t) {
    case DataType::kFloat32:
      *out = {0x7f800000ull, 0x80000000ull, 0x7fc00000ull, 0x7f800000ull, 0x7f7fffffull, 4, true};
      return true;
    case DataType::kFloat64:
      *out = {0x7ff0000000000000ull,
              0x8000000000000000ull,
              0x7ff8000000000000ull,
              0x7ff0000000000000ull,
              0x7fefffffffffffffull,
              8,
              true};
      return true;
    case DataType::kFloat16:
      *out = {0x7c00ull, 0x8000ull, 0x7e00ull, 0x7c00ull, 0x7bffull, 2, true};
      return true;
    case DataType::kBFloat16:
      *out = {0x7f80ull, 0x8000ull, 0x7fc0ull, 0x7f80ull, 0x7f7full, 2, true};
      return true;
    case DataType::kFloat8E5M2:  // IEEE-like: 5 exponent bits, Inf 0x7c, NaN 0x7d-0x7f; largest finite 57344
      *out = {0x7cull, 0x80ull, 0x7eull, 0x7cull, 0x7bull, 1, true};
      return true;
    case DataType::kFloat8E4M3:  // e4m3fn: NaN 0x7f (and 0xff) only; largest finite 448
      *out = {0x7full, 0x80ull, 0x7full, 0x7full, 0x7eull, 1, false};
      return true;
    default:
      return false;
  }
}

// The real floating types.
RINGGUARD_HOST_DEVICE inline bool isFloatType(DataType t) {
  FloatBits f;
  return floatBits(t, &f);
}

// How a type is scanned, sanitized and injected: as `parts` elements of the real type `part` each (a
// complex value as its real and imaginary parts; a real type as itself). False for integer types, which
// hold no non-finite value. Counts of non-finite values are counts of parts; indices are the element's.
RINGGUARD_HOST_DEVICE inline bool scanParts(DataType t, DataType* part, int* parts) {
  switch (t) {
    case DataType::kComplex64:
      *part = DataType::kFloat32;
      *parts = 2;
      return true;
    case DataType::kComplex128:
      *part = DataType::kFloat64;
      *parts = 2;
      return true;
    default:
      *part = t;
      *parts = 1;
      return isFloatType(t);
  }
}

// The types that can hold a non-finite value: the floating ones and complex.
RINGGUARD_HOST_DEVICE inline bool holdsNonFinite(DataType t) {
  DataType part;
  int parts = 0;
  return scanParts(t, &part, &parts);
}

RINGGUARD_HOST_DEVICE inline bool isNonFinite(uint64_t bits, const FloatBits& f) {
  return (bits & f.exponent) == f.exponent;
}

// The replacement for a non-finite element: 0 (zero), or NaN -> 0, +-Inf -> +-maxFinite (clamp).
RINGGUARD_HOST_DEVICE inline uint64_t sanitized(uint64_t bits, const FloatBits& f, bool clamp) {
  if (!clamp) return 0;
  const bool nan = !f.hasInf || (bits & ~(f.exponent | f.sign)) != 0;  // mantissa bits set
  if (nan) return 0;
  return (bits & f.sign) | f.maxFinite;
}

// value: 0 NaN, 1 +Inf, 2 -Inf, 3 largest finite (the order of the guard's FaultValue and of the CUDA layer's
// InjectedValue).
RINGGUARD_HOST_DEVICE inline uint64_t faultBits(int value, const FloatBits& f) {
  switch (value) {
    case 0:
      return f.quietNan;
    case 1:
      return f.posInf;
    case 2:
      return f.sign | f.posInf;
    default:
      return f.maxFinite;
  }
}

// Host memory: the element of `width` bytes at `p` as an unsigned word, and back.
inline uint64_t loadBits(const unsigned char* p, int width) {
  switch (width) {
    case 1:
      return *p;
    case 2: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    default: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
}

inline void storeBits(unsigned char* p, int width, uint64_t bits) {
  // Little endian: the low `width` bytes of the word are the element.
  std::memcpy(p, &bits, static_cast<size_t>(width));
}

// The element at `p` (host memory) as a double: what an error message reports as a bad value.
inline double elementAsDouble(const unsigned char* p, DataType t) {
  switch (t) {
    case DataType::kFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return t == DataType::kFloat16 ? halfToFloat(h) : bf16ToFloat(h);
    }
    case DataType::kFloat8E4M3:
      return float8e4m3ToFloat(*p);
    case DataType::kFloat8E5M2:
      return halfToFloat(static_cast<uint16_t>(*p << 8));  // e5m2 is the high byte of an f16
    case DataType::kInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::kInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DataType::kComplex64:
    case DataType::kComplex128: {
      // The part to show for a non-finite value: the real one if it is non-finite, else the imaginary.
      const DataType part = t == DataType::kComplex64 ? DataType::kFloat32 : DataType::kFloat64;
      FloatBits f;
      floatBits(part, &f);
      const bool realBad = isNonFinite(loadBits(p, f.width), f);
      return elementAsDouble(realBad ? p : p + f.width, part);
    }
    default:
      return *p;
  }
}

}  // namespace element_bits
}  // namespace ringguard
