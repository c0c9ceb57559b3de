#pragma once
// The element operations of every reduction, host and device alike: reduceHost (core/reduce.cc) and the
// verify + apply kernels (src/cuda/verify_apply.cu) run exactly these functions, so the bit-identity of
// host and device results rests on one implementation (docs/ARCHITECTURE.md, "Host and device arithmetic").
// tests/unit/test_element_ops.cc checks them, compiled by the host compiler, against an independent
// reference for every dtype and op; tests/gpu/test_device_executor.cc checks the device compilation.
//
// Where host and device compilations differ, it is only in how an IEEE operation is spelled: on the device
// __fadd_rn-style intrinsics, so that nothing is contracted into an FMA (on the host GCC would contract
// x * s + y where the target has an FMA instruction; the build targets baseline x86-64, which has none), and
// the hardware f16 conversions for finite values and Inf, which are the round-to-nearest-even of
// floatToHalf / halfToFloat; NaN (and, widening, Inf) bits are built by the host formulas on both. One
// difference no code can remove: an f32 / f64 sum, product or quotient that is NaN is the canonical NaN on
// the device, where x86 propagates an input NaN's payload.
//
// The operators take x, this rank's operand (reduceHost's a, the kernels' local), and y, the received one
// (b, the slot): min / max are std::min(x, y) / std::max(x, y), so x wins ties and NaN comparisons.
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#include "core/float16.h"
#include "core/host_device.h"

namespace ringguard {
namespace element_ops {

// ---- Bits ------------------------------------------------------------------------------------------------

RINGGUARD_HOST_DEVICE inline uint32_t bitsOfFloat(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

RINGGUARD_HOST_DEVICE inline float floatOfBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

RINGGUARD_HOST_DEVICE inline uint64_t bitsOfDouble(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}

RINGGUARD_HOST_DEVICE inline double doubleOfBits(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double d;
  std::memcpy(&d, &u, 8);
  return d;
#endif
}

// ---- IEEE operations rounded to nearest even, never contracted into an FMA --------------------------------

RINGGUARD_HOST_DEVICE inline float addRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(x, y);
#else
  return x + y;
#endif
}
RINGGUARD_HOST_DEVICE inline double addRn(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(x, y);
#else
  return x + y;
#endif
}
RINGGUARD_HOST_DEVICE inline float mulRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(x, y);
#else
  return x * y;
#endif
}
RINGGUARD_HOST_DEVICE inline double mulRn(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(x, y);
#else
  return x * y;
#endif
}
RINGGUARD_HOST_DEVICE inline float divRn(float x, float y) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(x, y);
#else
  return x / y;
#endif
}
RINGGUARD_HOST_DEVICE inline double divRn(double x, double y) {
#if defined(__CUDA_ARCH__)
  return __ddiv_rn(x, y);
#else
  return x / y;
#endif
}

// ---- Wrap arithmetic --------------------------------------------------------------------------------------

// Integer sums and products wrap (two's complement), computed in the unsigned type so that the wrap is
// defined behaviour rather than signed overflow; floating ones round to nearest even.
template <typename C>
RINGGUARD_HOST_DEVICE inline C addWrap(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return C(U(U(x) + U(y)));
  } else {
    return addRn(x, y);
  }
}

template <typename C>
RINGGUARD_HOST_DEVICE inline C mulWrap(C x, C y) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;  // no promotion to int
    return C(U(W(U(x)) * W(U(y))));
  } else {
    return mulRn(x, y);
  }
}

// C(value / divisor) with an int divisor (the usual arithmetic conversions): avg's final division. The
// divisor stays an int: as the element type it would wrap (u8 with 256 ranks divides by 0). Integer
// division truncates toward zero.
template <typename C>
RINGGUARD_HOST_DEVICE inline C divideByInt(C value, int divisor) {
  if constexpr (std::is_integral_v<C>) {
    return C(value / divisor);
  } else {
    return divRn(value, C(divisor));
  }
}

// ---- Element types: load to the compute type, store back -------------------------------------------------

template <typename T>
struct NativeConv {
  using Elem = T;
  using Compute = T;
  RINGGUARD_HOST_DEVICE static T load(T v) { return v; }
  RINGGUARD_HOST_DEVICE static T store(T v) { return v; }
};

// f16, computed in f32. On the device the conversion instructions are exact (f16 -> f32) and round to
// nearest even (f32 -> f16) for every finite value and for Inf; only the NaN (and, widening, the Inf) bit
// patterns are built by hand, with the host's formulas.
struct HalfConv {
  using Elem = uint16_t;
  using Compute = float;
  RINGGUARD_HOST_DEVICE static float load(uint16_t h) {
#if defined(__CUDA_ARCH__)
    if ((h & 0x7C00u) == 0x7C00u) return halfToFloat(h);  // Inf, NaN (payload kept)
    return __half2float(__ushort_as_half(h));
#else
    return halfToFloat(h);
#endif
  }
  RINGGUARD_HOST_DEVICE static uint16_t store(float f) {
#if defined(__CUDA_ARCH__)
    if ((bitsOfFloat(f) & 0x7FFFFFFFu) > 0x7F800000u) return floatToHalf(f);  // NaN: quieted, payload kept
    return __half_as_ushort(__float2half_rn(f));
#else
    return floatToHalf(f);
#endif
  }
};

// bf16, computed in f32 with the same bit manipulation everywhere.
struct BFloatConv {
  using Elem = uint16_t;
  using Compute = float;
  RINGGUARD_HOST_DEVICE static float load(uint16_t v) { return bf16ToFloat(v); }
  RINGGUARD_HOST_DEVICE static uint16_t store(float v) { return floatToBf16(v); }
};

// ---- Operators (x: this rank's operand, y: the received one) ---------------------------------------------

// What an operation needs besides its operands: avg's divisor, premul_sum's factor (premulScalar: already
// rounded to the element type, so converting it to the compute type is exact).
struct OpArg {
  int nranks;
  double scalar;
};

struct SumFn {
  template <typename C>
  RINGGUARD_HOST_DEVICE static C apply(C x, C y, const OpArg&) {
    return addWrap(x, y);
  }
};
struct ProdFn {
  template <typename C>
  RINGGUARD_HOST_DEVICE static C apply(C x, C y, const OpArg&) {
    return mulWrap(x, y);
  }
};
struct MinFn {  // std::min(x, y)
  template <typename C>
  RINGGUARD_HOST_DEVICE static C apply(C x, C y, const OpArg&) {
    return (y < x) ? y : x;
  }
};
struct MaxFn {  // std::max(x, y)
  template <typename C>
  RINGGUARD_HOST_DEVICE static C apply(C x, C y, const OpArg&) {
    return (x < y) ? y : x;
  }
};
struct AvgFinalFn {  // the final step of avg: the sum divided by nranks
  template <typename C>
  RINGGUARD_HOST_DEVICE static C apply(C x, C y, const OpArg& arg) {
    return divideByInt(addWrap(x, y), arg.nranks);
  }
};
// premul_sum: x (this rank's input) times the factor plus y, a partial sum of scaled inputs; at the first
// step y is the sending rank's input and is scaled too (reduceHost's firstStep). Floating types only; every
// product and sum is rounded in the compute type.
template <bool kFirst>
struct PremulFn {
  template <typename C>
  RINGGUARD_HOST_DEVICE static C apply(C x, C y, const OpArg& arg) {
    const C s = C(arg.scalar);
    if constexpr (kFirst) {
      return addRn(mulRn(x, s), mulRn(y, s));
    } else {
      return addRn(mulRn(x, s), y);
    }
  }
};
// Bitwise ops act on bits alone: every integer dtype (and bool) runs them on bytes, a vector a word at a
// time.
struct BandFn {
  template <typename U>
  RINGGUARD_HOST_DEVICE static U apply(U x, U y) {
    return U(x & y);
  }
};
struct BorFn {
  template <typename U>
  RINGGUARD_HOST_DEVICE static U apply(U x, U y) {
    return U(x | y);
  }
};
struct BxorFn {
  template <typename U>
  RINGGUARD_HOST_DEVICE static U apply(U x, U y) {
    return U(x ^ y);
  }
};

// ---- Apply operations: what one element of the result becomes ---------------------------------------------

// dst = x op y on elements of Conv::Elem, computed in Conv::Compute.
template <typename Conv, typename Fn>
struct ReduceOpT {
  using Elem = typename Conv::Elem;
  static constexpr bool kReadsLocal = true;
  static constexpr bool kWordwise = false;
  RINGGUARD_HOST_DEVICE static Elem element(Elem x, Elem y, const OpArg& arg) {
    return Conv::store(Fn::template apply<typename Conv::Compute>(Conv::load(x), Conv::load(y), arg));
  }
};
template <typename Fn>
struct BitwiseOpT {  // dst = x op y on bytes; whole 32-bit words inside a vector
  using Elem = uint8_t;
  static constexpr bool kReadsLocal = true;
  static constexpr bool kWordwise = true;
  RINGGUARD_HOST_DEVICE static Elem element(Elem x, Elem y, const OpArg&) { return Fn::apply(x, y); }
  RINGGUARD_HOST_DEVICE static uint32_t word(uint32_t x, uint32_t y) { return Fn::apply(x, y); }
};
struct CopyOpT {  // all-gather: dst = y, moved as bytes
  using Elem = uint8_t;
  static constexpr bool kReadsLocal = false;
  static constexpr bool kWordwise = false;
  RINGGUARD_HOST_DEVICE static Elem element(Elem, Elem y, const OpArg&) { return y; }
};

}  // namespace element_ops
}  // namespace ringguard
