#include "core/reduce.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "ringguard/core/status.h"

namespace ringguard {

namespace {

template <typename T, DataType D = DataType::kFloat32>
struct Native {
  static constexpr DataType kDtype = D;  // the dtype premulScalar rounds to (floating types only)
  using Compute = T;
  static Compute load(T v) { return v; }
  static T store(Compute v) { return v; }
};
struct Half {
  static constexpr DataType kDtype = DataType::kFloat16;
  using Compute = float;
  static float load(uint16_t v) { return halfToFloat(v); }
  static uint16_t store(float v) { return floatToHalf(v); }
};
struct BFloat {
  static constexpr DataType kDtype = DataType::kBFloat16;
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
void reduceTyped(ReduceOp op, void* dst, const void* a, const void* b, size_t n, bool finalStep, int nranks,
                 bool firstStep) {
  using C = typename Conv::Compute;
  switch (baseOp(op)) {
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
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (std::is_integral_v<C>) {
        if (baseOp(op) == ReduceOp::kBand)
          return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return C(x & y); });
        if (baseOp(op) == ReduceOp::kBor)
          return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return C(x | y); });
        return apply<T, Conv>(dst, a, b, n, [](C x, C y) { return C(x ^ y); });
      }
      break;
    case ReduceOp::kPremulSum:
      if constexpr (std::is_floating_point_v<C>) {
        const C s = C(premulScalar(Conv::kDtype, premulFactor(op)));
        if (firstStep) return apply<T, Conv>(dst, a, b, n, [s](C x, C y) { return C(C(x * s) + C(y * s)); });
        return apply<T, Conv>(dst, a, b, n, [s](C x, C y) { return C(C(x * s) + y); });
      }
      break;
  }
  RINGGUARD_ENFORCE(false, std::string("reduceHost: op ") + reduceOpName(op) + " does not reduce this dtype");
}

template <typename T, typename Conv>
void divideTyped(void* data, size_t n, int divisor) {
  using C = typename Conv::Compute;
  T* d = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) d[i] = Conv::store(C(Conv::load(d[i]) / divisor));
}

}  // namespace

double premulScalar(DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kComplex64:
      return double(float(factor));
    case DataType::kFloat16:
      return double(halfToFloat(floatToHalf(float(factor))));
    case DataType::kBFloat16:
      return double(bf16ToFloat(floatToBf16(float(factor))));
    default:
      return factor;
  }
}

void reduceHost(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                bool finalStep, int nranks, bool firstStep) {
  RINGGUARD_ENFORCE(reduceSupported(dtype, op),
                    std::string("reduceHost: op ") + reduceOpName(op) + " on dtype " + dataTypeName(dtype));
  const auto f = finalStep;
  const auto s = firstStep;
  switch (dtype) {
    case DataType::kFloat32:
      return reduceTyped<float, Native<float>>(op, dst, a, b, count, f, nranks, s);
    case DataType::kFloat64:
      return reduceTyped<double, Native<double, DataType::kFloat64>>(op, dst, a, b, count, f, nranks, s);
    case DataType::kFloat16:
      return reduceTyped<uint16_t, Half>(op, dst, a, b, count, f, nranks, s);
    case DataType::kBFloat16:
      return reduceTyped<uint16_t, BFloat>(op, dst, a, b, count, f, nranks, s);
    case DataType::kInt32:
      return reduceTyped<int32_t, Native<int32_t>>(op, dst, a, b, count, f, nranks, s);
    case DataType::kInt64:
      return reduceTyped<int64_t, Native<int64_t>>(op, dst, a, b, count, f, nranks, s);
    case DataType::kUint8:
      return reduceTyped<uint8_t, Native<uint8_t>>(op, dst, a, b, count, f, nranks, s);
    case DataType::kInt8:
      return reduceTyped<int8_t, Native<int8_t>>(op, dst, a, b, count, f, nranks, s);
    case DataType::kInt16:
      return reduceTyped<int16_t, Native<int16_t>>(op, dst, a, b, count, f, nranks, s);
    case DataType::kBool: {
      // Bytes 0 and 1: or is their max, and their min (as ProcessGroupNCCL maps SUM / PRODUCT on bool).
      const ReduceOp base = baseOp(op);
      const ReduceOp u8op = base == ReduceOp::kSum    ? ReduceOp::kMax
                            : base == ReduceOp::kProd ? ReduceOp::kMin
                                                      : base;
      return reduceTyped<uint8_t, Native<uint8_t>>(u8op, dst, a, b, count, f, nranks, s);
    }
    case DataType::kComplex64:  // (re, im) pairs: sum, avg and premul_sum act on each part alike
      return reduceTyped<float, Native<float>>(op, dst, a, b, 2 * count, f, nranks, s);
    case DataType::kComplex128:
      return reduceTyped<double, Native<double, DataType::kFloat64>>(op, dst, a, b, 2 * count, f, nranks, s);
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      break;
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
    case DataType::kInt8:
      return divideTyped<int8_t, Native<int8_t>>(data, count, divisor);
    case DataType::kInt16:
      return divideTyped<int16_t, Native<int16_t>>(data, count, divisor);
    case DataType::kComplex64:
      return divideTyped<float, Native<float>>(data, 2 * count, divisor);
    case DataType::kComplex128:
      return divideTyped<double, Native<double>>(data, 2 * count, divisor);
    default:
      break;
  }
  RINGGUARD_ENFORCE(false, std::string("divideHost: dtype ") + dataTypeName(dtype) + " cannot be divided");
}

}  // namespace ringguard
