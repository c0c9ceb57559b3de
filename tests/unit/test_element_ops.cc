// The host + device element operations (core/element_ops.h, chosen by core/reduce_dispatch.h) and the
// trailer build and check (core/trailer_check.h), compiled here by the host compiler, against references
// written independently of them: every dtype and op, every step kind, bit for bit (but for which of two NaN
// operands an IEEE operation returns: the compiler's choice), over special values
// (NaN with payloads, +-Inf, +-0, subnormals, the largest finite values, the f16 / bf16 rounding ties) and
// random ones. The kernels compile the same headers (tests/gpu/test_device_executor.cc runs them on a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/element_ops.h"
#include "core/reduce.h"
#include "core/reduce_dispatch.h"
#include "core/trailer.h"
#include "core/trailer_check.h"
#include "float_reference.h"
#include "ringguard/core/crc32.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace {

using testing::bitsOf;
using testing::floatOf;
using testing::halfValue;
using testing::referenceFloatToBf16;
using testing::referenceFloatToHalf;

// ---- The reference: what an element of each dtype becomes, written from the definitions -------------------

// One step of a reduction: x is this rank's operand, y the received one.
struct Step {
  ReduceOp op;
  bool finalStep;
  bool firstStep;
  int nranks;
  double scalar;  // premulScalar of the dtype (the factor as the element type holds it)
};

// f16 / bf16 -> f32: exact values, NaN keeps sign and payload.
float refHalfToFloat(uint16_t h) {
  if ((h & 0x7C00) == 0x7C00) {
    return floatOf((uint32_t(h & 0x8000) << 16) | 0x7F800000u | (uint32_t(h & 0x3FF) << 13));
  }
  return float(halfValue(h));
}
// f32 -> f16: round to nearest even; a NaN is quieted and keeps its sign and the top 9 bits of its payload.
uint16_t refFloatToHalf(float f) {
  const uint32_t x = bitsOf(f);
  if (std::isnan(f)) return uint16_t(((x >> 16) & 0x8000) | 0x7E00 | ((x >> 13) & 0x3FF));
  return referenceFloatToHalf(f);
}
float refBf16ToFloat(uint16_t b) { return floatOf(uint32_t(b) << 16); }
uint16_t refFloatToBf16(float f) {
  const uint32_t x = bitsOf(f);
  if (std::isnan(f)) return uint16_t((x >> 16) | 0x40);  // quieted, the top 16 bits kept
  return referenceFloatToBf16(f);
}

// Floating compute types: IEEE operations in C, each rounded to the type (ISO C++: no contraction).
template <typename C>
C refFloat(const Step& s, C x, C y) {
  switch (baseOp(s.op)) {
    case ReduceOp::kSum:
      return C(x + y);
    case ReduceOp::kAvg:
      return s.finalStep ? C(C(x + y) / C(s.nranks)) : C(x + y);
    case ReduceOp::kProd:
      return C(x * y);
    case ReduceOp::kMin:
      return std::min(x, y);
    case ReduceOp::kMax:
      return std::max(x, y);
    case ReduceOp::kPremulSum: {
      const C f = C(s.scalar);
      return s.firstStep ? C(C(x * f) + C(y * f)) : C(C(x * f) + y);
    }
    default:
      ADD_FAILURE() << "no floating reference for " << reduceOpName(s.op);
      return x;
  }
}

// Integers: arithmetic in 64 bits, wrapped to the type by conversion (modulo 2^n since C++20, and what
// every C++17 compiler does); avg truncates toward zero.
template <typename T>
T refInt(const Step& s, T x, T y) {
  const auto wrap = [](uint64_t v) { return static_cast<T>(static_cast<std::make_unsigned_t<T>>(v)); };
  const uint64_t ux = static_cast<uint64_t>(static_cast<int64_t>(x));
  const uint64_t uy = static_cast<uint64_t>(static_cast<int64_t>(y));
  switch (baseOp(s.op)) {
    case ReduceOp::kSum:
      return wrap(ux + uy);
    case ReduceOp::kAvg: {
      const T sum = wrap(ux + uy);
      return s.finalStep ? static_cast<T>(int64_t(sum) / s.nranks) : sum;
    }
    case ReduceOp::kProd:
      return wrap(ux * uy);
    case ReduceOp::kMin:
      return std::min(x, y);
    case ReduceOp::kMax:
      return std::max(x, y);
    case ReduceOp::kBand:
      return static_cast<T>(x & y);
    case ReduceOp::kBor:
      return static_cast<T>(x | y);
    case ReduceOp::kBxor:
      return static_cast<T>(x ^ y);
    default:
      ADD_FAILURE() << "no integer reference for " << reduceOpName(s.op);
      return x;
  }
}

// The reference result of one dtype element (of `size` bytes at x and y) into out.
void referenceElement(DataType dt, const Step& s, const uint8_t* x, const uint8_t* y, uint8_t* out) {
  auto scalar = [&](auto tag, auto f) {
    using T = decltype(tag);
    T a, b;
    std::memcpy(&a, x, sizeof(T));
    std::memcpy(&b, y, sizeof(T));
    const T r = f(a, b);
    std::memcpy(out, &r, sizeof(T));
  };
  switch (dt) {
    case DataType::kFloat32:
      return scalar(float{}, [&](float a, float b) { return refFloat(s, a, b); });
    case DataType::kFloat64:
      return scalar(double{}, [&](double a, double b) { return refFloat(s, a, b); });
    case DataType::kFloat16:
      return scalar(uint16_t{}, [&](uint16_t a, uint16_t b) {
        return refFloatToHalf(refFloat(s, refHalfToFloat(a), refHalfToFloat(b)));
      });
    case DataType::kBFloat16:
      return scalar(uint16_t{}, [&](uint16_t a, uint16_t b) {
        return refFloatToBf16(refFloat(s, refBf16ToFloat(a), refBf16ToFloat(b)));
      });
    case DataType::kInt8:
      return scalar(int8_t{}, [&](int8_t a, int8_t b) { return refInt(s, a, b); });
    case DataType::kUint8:
      return scalar(uint8_t{}, [&](uint8_t a, uint8_t b) { return refInt(s, a, b); });
    case DataType::kInt16:
      return scalar(int16_t{}, [&](int16_t a, int16_t b) { return refInt(s, a, b); });
    case DataType::kInt32:
      return scalar(int32_t{}, [&](int32_t a, int32_t b) { return refInt(s, a, b); });
    case DataType::kInt64:
      return scalar(int64_t{}, [&](int64_t a, int64_t b) { return refInt(s, a, b); });
    case DataType::kBool: {  // as ProcessGroupNCCL: sum is or, product is and, on bytes 0 and 1
      const ReduceOp base = baseOp(s.op);
      Step u8 = s;
      u8.op = base == ReduceOp::kSum ? ReduceOp::kBor : base == ReduceOp::kProd ? ReduceOp::kBand : base;
      return scalar(uint8_t{}, [&](uint8_t a, uint8_t b) { return refInt(u8, a, b); });
    }
    case DataType::kComplex64:  // each part alike
      referenceElement(DataType::kFloat32, s, x, y, out);
      return referenceElement(DataType::kFloat32, s, x + 4, y + 4, out + 4);
    case DataType::kComplex128:
      referenceElement(DataType::kFloat64, s, x, y, out);
      return referenceElement(DataType::kFloat64, s, x + 8, y + 8, out + 8);
    default:
      ADD_FAILURE() << "no reference for " << dataTypeName(dt);
  }
}

// ---- Test values ------------------------------------------------------------------------------------------

std::vector<uint64_t> specialBits(DataType dt) {
  switch (dt) {
    case DataType::kFloat32:
    case DataType::kComplex64:
      return {0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x3FC00000, 0x40400000, 0x3DCCCCCD,
              0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x00000001, 0x80000001, 0x007FFFFF, 0x7F800000,
              0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC01234, 0x7F800001, 0xFFA00005, 0x477FE000,
              0x477FF000, 0x33000000, 0x33000001, 0x3F808000};
    case DataType::kFloat64:
    case DataType::kComplex128:
      return {0x0000000000000000, 0x8000000000000000, 0x3FF0000000000000, 0xBFF0000000000000,
              0x3FF8000000000000, 0x3FB999999999999A, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF,
              0x0010000000000000, 0x0000000000000001, 0x800FFFFFFFFFFFFF, 0x7FF0000000000000,
              0xFFF0000000000000, 0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000001234,
              0x7FF0000000000001, 0x3FF0000000000001};
    case DataType::kFloat16:
      // +-0, +-1, 1 + ulp, 2^-11 and just above (the ties of 1 + y), the largest finite, +-Inf, the
      // smallest and largest subnormals, the smallest normal, quiet and signalling NaNs with payloads, 1/3.
      return {0x0000, 0x8000, 0x3C00, 0xBC00, 0x3C01, 0x1000, 0x1001, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x0001,
              0x8001, 0x03FF, 0x0400, 0x7E00, 0xFE00, 0x7E55, 0x7C01, 0xFD2A, 0x3555, 0x4200, 0x5BFF};
    case DataType::kBFloat16:
      return {0x0000, 0x8000, 0x3F80, 0xBF80, 0x3F81, 0x3B80, 0x3B81, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
              0x0001, 0x8001, 0x007F, 0x0080, 0x7FC0, 0xFFC0, 0x7FD5, 0x7F81, 0xFFAA, 0x3EAB, 0x4040};
    case DataType::kInt8:
    case DataType::kUint8:
      return {0x00, 0x01, 0xFF, 0x7F, 0x80, 0x81, 0x64, 0x9C, 0x07, 0xF9, 0x55, 0xAA};
    case DataType::kInt16:
      return {0x0000, 0x0001, 0xFFFF, 0x7FFF, 0x8000, 0x8001, 0x7530, 0x012C, 0xFFF9, 0x5555};
    case DataType::kInt32:
      return {0x00000000, 0x00000001, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000,
              0x80000001, 0x00010000, 0x7FFFFFD0, 0xFFFFFFF9, 0x12345678};
    case DataType::kInt64:
      return {0x0,
              0x1,
              0xFFFFFFFFFFFFFFFF,
              0x7FFFFFFFFFFFFFFF,
              0x8000000000000000,
              0x8000000000000001,
              0x0000010000000000,
              0xFFFFFFFFFFFFFFF9,
              0x0123456789ABCDEF};
    case DataType::kBool:
      return {0, 1};
    default:
      return {};
  }
}

// Pairs (x, y) of dtype elements as bytes: every pair of special values (for complex: as real and
// imaginary parts, crossed), then random bit patterns.
struct Operands {
  std::vector<uint8_t> x, y;
  size_t count = 0;
};

Operands operandsFor(DataType dt) {
  const size_t size = dataTypeSize(dt);
  const size_t part = isComplexType(dt) ? size / 2 : size;
  const std::vector<uint64_t> special = specialBits(dt);
  Operands o;
  auto push = [&](std::vector<uint8_t>& v, uint64_t re, uint64_t im) {
    uint8_t b[16] = {};
    std::memcpy(b, &re, part);
    if (isComplexType(dt)) std::memcpy(b + part, &im, part);
    v.insert(v.end(), b, b + size);
  };
  for (size_t i = 0; i < special.size(); ++i) {
    for (size_t j = 0; j < special.size(); ++j) {
      push(o.x, special[i], special[j]);
      push(o.y, special[j], special[(i + j) % special.size()]);
      ++o.count;
    }
  }
  std::mt19937_64 rng(0x5EED0000 + static_cast<int>(dt));
  for (int k = 0; k < 4000; ++k) {
    uint64_t r[4] = {rng(), rng(), rng(), rng()};
    if (dt == DataType::kBool) {
      for (uint64_t& v : r) v &= 1;
    }
    push(o.x, r[0], r[1]);
    push(o.y, r[2], r[3]);
    ++o.count;
  }
  return o;
}

std::vector<Step> stepsFor(DataType dt, ReduceOp op) {
  std::vector<Step> steps;
  if (baseOp(op) == ReduceOp::kPremulSum) {
    for (bool first : {false, true})
      steps.push_back({op, false, first, 2, premulScalar(dt, premulFactor(op))});
  } else if (baseOp(op) == ReduceOp::kAvg) {
    steps.push_back({op, false, false, 2, 0});
    for (int n : {1, 2, 3, 7, 256, 257}) steps.push_back({op, true, false, n, 0});
  } else {
    steps.push_back({op, false, false, 2, 0});
    steps.push_back({op, true, true, 5, 0});  // finalStep and firstStep change nothing here
  }
  return steps;
}

std::vector<ReduceOp> opsFor(DataType dt) {
  std::vector<ReduceOp> ops;
  for (ReduceOp op : kAllReduceOps) {
    if (baseOp(op) == ReduceOp::kPremulSum) continue;  // below, with factors
    if (reduceSupported(dt, op)) ops.push_back(op);
  }
  for (double factor : {0.5, 0.1, 3.0, -2.75}) {
    ReduceOp op = ReduceOp::kSum;
    if (makePremulSum(factor, &op).isOk() && reduceSupported(dt, op)) ops.push_back(op);
  }
  return ops;
}

std::string describe(DataType dt, const Step& s) {
  return std::string(dataTypeName(dt)) + " " + reduceOpName(s.op) + " factor " +
         std::to_string(premulFactor(s.op)) + (s.finalStep ? " final" : "") + (s.firstStep ? " first" : "") +
         " nranks " + std::to_string(s.nranks);
}

// The shared operations, element by element as the kernels apply them: dispatchReduce's choice, on
// reduceLayout's elements, with the kernels' OpArg.
std::vector<uint8_t> sharedResult(DataType dt, const Step& s, const Operands& o) {
  std::vector<uint8_t> out(o.x.size(), 0xEE);
  const element_ops::ReduceLayout layout = element_ops::reduceLayout(dt, s.op);
  const size_t n = o.count * layout.perElement;
  const element_ops::OpArg arg{s.nranks, premulScalar(dt, premulFactor(s.op))};
  const Status st = element_ops::dispatchReduce(dt, s.op, s.finalStep, s.firstStep, [&](auto tag) {
    using Op = typename decltype(tag)::type;
    using E = typename Op::Elem;
    EXPECT_EQ(sizeof(E), layout.elemBytes);
    for (size_t i = 0; i < n; ++i) {
      E a, b;
      std::memcpy(&a, o.x.data() + i * sizeof(E), sizeof(E));
      std::memcpy(&b, o.y.data() + i * sizeof(E), sizeof(E));
      const E r = Op::element(a, b, arg);
      std::memcpy(out.data() + i * sizeof(E), &r, sizeof(E));
    }
    return Status::ok();
  });
  EXPECT_TRUE(st.isOk()) << st.message();
  return out;
}

// Whether the part of real type dt at p is a NaN.
bool isNanPart(DataType dt, const uint8_t* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, dataTypeSize(dt));
  switch (dt) {
    case DataType::kFloat32:
      return (v & 0x7FFFFFFFu) > 0x7F800000u;
    case DataType::kFloat64:
      return (v & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
    case DataType::kFloat16:
      return testing::isHalfNan(uint16_t(v));
    case DataType::kBFloat16:
      return testing::isBf16Nan(uint16_t(v));
    default:
      return false;
  }
}

// Bit for bit, with one exception: an IEEE operation on two NaNs returns one of them, and which one is the
// compiler's choice (x + y and y + x are the same expression to it), so there only NaN-ness must agree.
// min / max compute nothing and are compared bit for bit always.
bool sameElement(DataType dt, ReduceOp op, const uint8_t* x, const uint8_t* y, const uint8_t* got,
                 const uint8_t* want) {
  const size_t size = dataTypeSize(dt);
  if (std::memcmp(got, want, size) == 0) return true;
  const ReduceOp base = baseOp(op);
  if (base == ReduceOp::kMin || base == ReduceOp::kMax) return false;
  const DataType part = dt == DataType::kComplex64    ? DataType::kFloat32
                        : dt == DataType::kComplex128 ? DataType::kFloat64
                                                      : dt;
  const size_t partBytes = dataTypeSize(part);
  for (size_t k = 0; k < size; k += partBytes) {
    if (std::memcmp(got + k, want + k, partBytes) == 0) continue;
    if (!(isNanPart(part, x + k) && isNanPart(part, y + k) && isNanPart(part, got + k) &&
          isNanPart(part, want + k))) {
      return false;
    }
  }
  return true;
}

// The first element that differs, in words, or "".
std::string firstDifference(DataType dt, ReduceOp op, const Operands& o, const std::vector<uint8_t>& got,
                            const std::vector<uint8_t>& want) {
  const size_t size = dataTypeSize(dt);
  for (size_t i = 0; i < o.count; ++i) {
    const size_t at = i * size;
    if (sameElement(dt, op, &o.x[at], &o.y[at], &got[at], &want[at])) continue;
    auto hex = [&](const std::vector<uint8_t>& v) {
      std::string s = "0x";
      char b[4];
      for (size_t k = size; k-- > 0;) {
        std::snprintf(b, sizeof b, "%02x", v[at + k]);
        s += b;
      }
      return s;
    };
    return "element " + std::to_string(i) + ": x " + hex(o.x) + " y " + hex(o.y) + " got " + hex(got) +
           " want " + hex(want);
  }
  return "";
}

TEST(ElementOpsTest, EveryDtypeAndOpMatchesTheReferenceBitForBit) {
  int cases = 0;
  for (DataType dt : kAllDataTypes) {
    const std::vector<ReduceOp> ops = opsFor(dt);
    if (ops.empty()) continue;  // float8: copy-only
    const Operands o = operandsFor(dt);
    const size_t size = dataTypeSize(dt);
    for (ReduceOp op : ops) {
      for (const Step& s : stepsFor(dt, op)) {
        SCOPED_TRACE(describe(dt, s));
        std::vector<uint8_t> want(o.x.size());
        for (size_t i = 0; i < o.count; ++i) {
          referenceElement(dt, s, &o.x[i * size], &o.y[i * size], &want[i * size]);
        }
        const std::vector<uint8_t> shared = sharedResult(dt, s, o);
        ASSERT_EQ(firstDifference(dt, s.op, o, shared, want), "") << "the shared element operations";
        std::vector<uint8_t> host(o.x.size(), 0xEE);
        reduceHost(dt, s.op, host.data(), o.x.data(), o.y.data(), o.count, s.finalStep, s.nranks,
                   s.firstStep);
        ASSERT_EQ(firstDifference(dt, s.op, o, host, want), "") << "reduceHost";
        ++cases;
      }
    }
  }
  EXPECT_GE(cases, 100);
}

// The device's f16 conversions differ from the host's only in spelling (hardware instructions for finite
// values): on the host HalfConv is exactly floatToHalf / halfToFloat, and so the reference, over every half
// and the f32 values at and around every rounding tie.
TEST(ElementOpsTest, HalfAndBf16ConversionsMatchTheReference) {
  using element_ops::BFloatConv;
  using element_ops::HalfConv;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    ASSERT_EQ(bitsOf(HalfConv::load(uint16_t(h))), bitsOf(refHalfToFloat(uint16_t(h)))) << std::hex << h;
    ASSERT_EQ(bitsOf(BFloatConv::load(uint16_t(h))), bitsOf(refBf16ToFloat(uint16_t(h)))) << std::hex << h;
    // Round trips: a NaN comes back quieted with its payload, everything else unchanged.
    ASSERT_EQ(HalfConv::store(HalfConv::load(uint16_t(h))), refFloatToHalf(refHalfToFloat(uint16_t(h))));
    ASSERT_EQ(BFloatConv::store(BFloatConv::load(uint16_t(h))), refFloatToBf16(refBf16ToFloat(uint16_t(h))));
  }
  for (uint32_t h = 0; h < 0x7BFF; ++h) {  // every tie between adjacent finite halves, and its neighbours
    const float tie = float((halfValue(uint16_t(h)) + halfValue(uint16_t(h + 1))) / 2);
    for (float f : {tie, -tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1e9f)}) {
      ASSERT_EQ(HalfConv::store(f), refFloatToHalf(f)) << std::hex << bitsOf(f);
    }
  }
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const uint32_t tie = (b << 16) | 0x8000u;
    for (uint32_t x : {tie, tie | 0x80000000u, tie - 1, tie + 1}) {
      ASSERT_EQ(BFloatConv::store(floatOf(x)), refFloatToBf16(floatOf(x))) << std::hex << x;
    }
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 200000; ++i) {
    const float f = floatOf(uint32_t(rng()));
    ASSERT_EQ(HalfConv::store(f), refFloatToHalf(f)) << std::hex << bitsOf(f);
    ASSERT_EQ(BFloatConv::store(f), refFloatToBf16(f)) << std::hex << bitsOf(f);
  }
}

TEST(ElementOpsTest, WrapArithmeticIsModularAndAvgDividesByAnInt) {
  using element_ops::addWrap;
  using element_ops::divideByInt;
  using element_ops::mulWrap;
  EXPECT_EQ(addWrap<int8_t>(100, 100), int8_t(-56));
  EXPECT_EQ(mulWrap<int8_t>(-128, -1), int8_t(-128));
  EXPECT_EQ(mulWrap<uint16_t>(300, 300), uint16_t(24464));  // no promotion to int: no signed overflow
  EXPECT_EQ(mulWrap<int16_t>(-32768, -1), int16_t(-32768));
  EXPECT_EQ(addWrap<int32_t>(INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(mulWrap<int64_t>(INT64_MAX, 2), int64_t(-2));
  EXPECT_EQ(divideByInt<uint8_t>(200, 256), 0);  // the divisor stays an int (as u8 it would be 0)
  EXPECT_EQ(divideByInt<uint8_t>(255, 257), 0);
  EXPECT_EQ(divideByInt<int32_t>(-7, 2), -3);  // toward zero
  EXPECT_EQ(divideByInt<float>(1.0f, 3), 1.0f / 3.0f);
}

// ---- The trailer ------------------------------------------------------------------------------------------

SliceId sliceId(uint64_t seq, uint32_t step, uint16_t attempt) {
  SliceId id;
  id.seq = seq;
  id.step = step;
  id.slice = 7;
  id.column = 3;
  id.payloadBytes = 4096;
  id.attempt = attempt;
  return id;
}

// The device's body CRC: the same tables the kernels keep in constant memory.
struct WordsCrc {
  uint32_t operator()(const Trailer& t) const {
    static const trailer_check::WordCrcTables tables = trailer_check::makeWordCrcTables();
    return trailer_check::trailerWordsCrc(t, tables);
  }
};

TEST(TrailerCheckTest, WordTablesAreTheStandardCrc32) {
  constexpr trailer_check::WordCrcTables kTables = trailer_check::makeWordCrcTables();
  static_assert(kTables.t[0][1] == 0x77073096u, "the standard CRC-32 byte table");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 20000; ++i) {
    Trailer t;
    uint8_t bytes[sizeof(Trailer)];
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    std::memcpy(&t, bytes, sizeof t);
    ASSERT_EQ(WordsCrc{}(t), crc32(&t, offsetof(Trailer, trailerCrc))) << "trailer " << i;
  }
}

// Built and checked with the device's CRC, every outcome is the host's (core/trailer.cc).
TEST(TrailerCheckTest, WordCrcBuildAndCheckEqualTheHost) {
  const SliceId id = sliceId(0x0123456789ABCDEFull, 5, 2);
  for (uint16_t flags : {uint16_t(0), kTrailerPoisoned}) {
    const Trailer device = trailer_check::makeTrailer(id, 0xCAFEF00Du, flags, WordsCrc{});
    const Trailer host = makeTrailer(id, 0xCAFEF00Du, flags);
    ASSERT_EQ(std::memcmp(&device, &host, sizeof host), 0);
  }
  // One trailer per outcome, then every single-bit flip of a sealed one.
  std::vector<std::pair<Trailer, SliceId>> cases;
  const Trailer good = makeTrailer(id, 0x1234u, 0);
  cases.push_back({good, id});
  cases.push_back({makeTrailer(id, 0x1234u, kTrailerPoisoned), id});
  cases.push_back({makeTrailer(sliceId(id.seq + 1, 5, 2), 0x1234u, 0), id});  // stale
  cases.push_back({makeTrailer(sliceId(id.seq, 5, 3), 0x1234u, 0), id});      // another attempt
  SliceId other = id;
  other.payloadBytes = 8;
  cases.push_back({good, other});  // size mismatch
  Trailer skew = good;
  skew.magic = (kTrailerMagic & 0x00FFFFFFu) | (uint32_t('2') << 24);
  sealTrailer(&skew);
  cases.push_back({skew, id});
  Trailer badFlags = good;
  badFlags.flags = 4;
  sealTrailer(&badFlags);
  cases.push_back({badFlags, id});
  for (size_t bit = 0; bit < 8 * sizeof(Trailer); ++bit) {
    Trailer t = good;
    reinterpret_cast<uint8_t*>(&t)[bit / 8] ^= uint8_t(1u << (bit % 8));
    cases.push_back({t, id});
  }
  std::vector<int> seen(int(kLastSliceCheck) + 1, 0);
  for (const auto& [t, expected] : cases) {
    for (uint32_t crc : {0x1234u, 0x1235u}) {
      const SliceCheck want = checkSlice(t, expected, crc);
      ASSERT_EQ(trailer_check::checkSlice(t, expected, crc, WordsCrc{}), want);
      ++seen[int(want)];
    }
    ASSERT_EQ(trailer_check::isVersionSkew(t, WordsCrc{}), isTrailerVersionSkew(t));
  }
  for (int c = 0; c <= int(kLastSliceCheck); ++c) {
    EXPECT_GT(seen[c], 0) << "no case gave " << sliceCheckName(SliceCheck(c));
  }
}

}  // namespace
}  // namespace ringguard
