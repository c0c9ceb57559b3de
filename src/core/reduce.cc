#include "ringguard/core/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ringguard/core/status.h"

namespace ringguard {

float halfToFloat(uint16_t h) {
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

uint16_t floatToHalf(float f) {
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

float bf16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40);  // quiet nan
  uint32_t rounding = 0x7FFF + ((x >> 16) & 1);
  return uint16_t((x + rounding) >> 16);
}

namespace {

template <typename T>
struct Native {
  using Compute = T;
  static Compute load(T v) { return v; }
  static T store(Compute v) { return v; }
};
struct Half {
  using Compute = float;
  static float load(uint16_t v) { return halfToFloat(v); }
  static uint16_t store(float v) { return floatToHalf(v); }
};
struct BFloat {
  using Compute = float;
  static float load(uint16_t v) { return bf16ToFloat(v); }
  static uint16_t store(float v) { return floatToBf16(v); }
};

template <typename T, typename Conv, typename F>
void apply(void* dst, const void* a, const void* b, size_t n, F f) {
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Conv::store(f(Conv::load(x[i]), Conv::load(y[i])));
}

// Integer sums and products wrap (two's complement), computed in the unsigned type so that the wrap is
// defined behaviour rather than signed overflow.
template <typename C>
C addWrap(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return C(U(U(x) + U(y)));
  } else {
    return C(x + y);
  }
}
template <typename C>
C mulWrap(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;  // no promotion to int
    return C(U(W(U(x)) * W(U(y))));
  } else {
    return C(x * y);
  }
}

template <typename T, typename Conv>
void reduceTyped(ReduceOp op, void* dst, const void* a, const void* b, size_t n, bool finalStep, int nranks) {
  using C = typename Conv::Compute;
  switch (op) {
    case ReduceOp::kSum:
      return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return addWrap(x, y); });
    case ReduceOp::kAvg:
      if (finalStep) {
        // The divisor stays an int: as the element type it would wrap (u8 with 256 ranks divides by 0).
        const int div = nranks;
        return apply<T, Conv>(dst, a, b, n, [div](C x, C y) { return C(addWrap(x, y) / div); });
      }
      return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return addWrap(x, y); });
    case ReduceOp::kProd:
      return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return mulWrap(x, y); });
    case ReduceOp::kMin:
      return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return std::min(x, y); });
    case ReduceOp::kMax:
      return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return std::max(x, y); });
  }
}

template <typename T, typename Conv>
void divideTyped(void* data, size_t n, int divisor) {
  using C = typename Conv::Compute;
  T* d = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = Conv::store(C(Conv::load(d[i]) / divisor));
}

}  // namespace

void reduceHost(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                bool finalStep, int nranks) {
  switch (dtype) {
    case DataType::kFloat32:
      return reduceTyped<float, Native<float>>(op, dst, a, b, count, finalStep, nranks);
    case DataType::kFloat64:
      return reduceTyped<double, Native<double>>(op, dst, a, b, count, finalStep, nranks);
    case DataType::kFloat16:
      return reduceTyped<uint16_t, Half>(op, dst, a, b, count, finalStep, nranks);
    case DataType::kBFloat16:
      return reduceTyped<uint16_t, BFloat>(op, dst, a, b, count, finalStep, nranks);
    case DataType::kInt32:
      return reduceTyped<int32_t, Native<int32_t>>(op, dst, a, b, count, finalStep, nranks);
    case DataType::kInt64:
      return reduceTyped<int64_t, Native<int64_t>>(op, dst, a, b, count, finalStep, nranks);
    case DataType::kUint8:
      return reduceTyped<uint8_t, Native<uint8_t>>(op, dst, a, b, count, finalStep, nranks);
  }
  RINGGUARD_ENFORCE(false, "reduceHost: invalid dtype");
}

void divideHost(DataType dtype, void* data, size_t count, int divisor) {
  switch (dtype) {
    case DataType::kFloat32:
      return divideTyped<float, Native<float>>(data, count, divisor);
    case DataType::kFloat64:
      return divideTyped<double, Native<double>>(data, count, divisor);
    case DataType::kFloat16:
      return divideTyped<uint16_t, Half>(data, count, divisor);
    case DataType::kBFloat16:
      return divideTyped<uint16_t, BFloat>(data, count, divisor);
    case DataType::kInt32:
      return divideTyped<int32_t, Native<int32_t>>(data, count, divisor);
    case DataType::kInt64:
      return divideTyped<int64_t, Native<int64_t>>(data, count, divisor);
    case DataType::kUint8:
      return divideTyped<uint8_t, Native<uint8_t>>(data, count, divisor);
  }
  RINGGUARD_ENFORCE(false, "divideHost: invalid dtype");
}

}  // namespace ringguard
