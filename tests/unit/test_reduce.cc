// Host reduction kernels and the f16/bf16 conversions (docs/design/protocol.md, "Ring schedule": f16 and
// bf16 are reduced in f32 and rounded to nearest even at every hop; avg divides at the final step).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/reduce.h"
#include "float_reference.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace {

using testing::bitsOf;
using testing::floatOf;
using testing::halfValue;
using testing::isBf16Nan;
using testing::isHalfNan;
using testing::referenceFloatToBf16;
using testing::referenceFloatToHalf;

// ---------------------------------------------------------------------------------------------------------
// reduceHost on hand-computed values

// Element type T stored in the buffers; values given as doubles (exactly representable in every type).
template <typename T>
std::vector<T> encode(const std::vector<double>& v) {
  std::vector<T> out;
  for (double d : v) out.push_back(static_cast<T>(d));
  return out;
}

std::vector<uint16_t> encodeHalf(const std::vector<double>& v) {
  std::vector<uint16_t> out;
  for (double d : v) out.push_back(floatToHalf(float(d)));
  return out;
}
std::vector<uint16_t> encodeBf16(const std::vector<double>& v) {
  std::vector<uint16_t> out;
  for (double d : v) out.push_back(floatToBf16(float(d)));
  return out;
}

struct OpCase {
  ReduceOp op;
  bool finalStep;
  int nranks;
  std::vector<double> expected;
};

// Floating values exactly representable in f16, bf16, f32 and f64, and so are all results below.
const std::vector<double> kFloatA = {1.5, -2, 3, 0.25, 0.75};
const std::vector<double> kFloatB = {2.5, 4, -0.5, 8, -1};
const std::vector<OpCase> kFloatCases = {
    {ReduceOp::kSum, false, 2, {4, 2, 2.5, 8.25, -0.25}},
    {ReduceOp::kProd, false, 2, {3.75, -8, -1.5, 2, -0.75}},
    {ReduceOp::kMin, false, 2, {1.5, -2, -0.5, 0.25, -1}},
    {ReduceOp::kMax, false, 2, {2.5, 4, 3, 8, 0.75}},
    {ReduceOp::kAvg, false, 4, {4, 2, 2.5, 8.25, -0.25}},  // not the final step: a plain sum
    {ReduceOp::kAvg, true, 2, {2, 1, 1.25, 4.125, -0.125}},
    {ReduceOp::kAvg, true, 4, {1, 0.5, 0.625, 2.0625, -0.0625}},
    {ReduceOp::kSum, true, 4, {4, 2, 2.5, 8.25, -0.25}},  // finalStep only matters for avg
    {ReduceOp::kMax, true, 4, {2.5, 4, 3, 8, 0.75}},
};

const std::vector<double> kIntA = {-7, 7, 3, -100, 0, 9};
const std::vector<double> kIntB = {0, 2, -5, 50, -1, 6};
const std::vector<OpCase> kIntCases = {
    {ReduceOp::kSum, false, 2, {-7, 9, -2, -50, -1, 15}},
    {ReduceOp::kProd, false, 2, {0, 14, -15, -5000, 0, 54}},
    {ReduceOp::kMin, false, 2, {-7, 2, -5, -100, -1, 6}},
    {ReduceOp::kMax, false, 2, {0, 7, 3, 50, 0, 9}},
    {ReduceOp::kAvg, false, 2, {-7, 9, -2, -50, -1, 15}},
    // Truncation toward zero: -7/2 == -3, -2/2 == -1, -1/2 == 0, 15/2 == 7.
    {ReduceOp::kAvg, true, 2, {-3, 4, -1, -25, 0, 7}},
    {ReduceOp::kAvg, true, 3, {-2, 3, 0, -16, 0, 5}},
    {ReduceOp::kAvg, true, 4, {-1, 2, 0, -12, 0, 3}},
};

const std::vector<double> kU8A = {200, 3, 0, 255, 10, 100};
const std::vector<double> kU8B = {100, 5, 7, 1, 10, 2};
const std::vector<OpCase> kU8Cases = {
    {ReduceOp::kSum, false, 2, {44, 8, 7, 0, 20, 102}},  // wraps modulo 256
    {ReduceOp::kProd, false, 2, {32, 15, 0, 255, 100, 200}},
    {ReduceOp::kMin, false, 2, {100, 3, 0, 1, 10, 2}},
    {ReduceOp::kMax, false, 2, {200, 5, 7, 255, 10, 100}},
    // The sum wraps modulo 256 before the division, as it does at every hop of the ring.
    {ReduceOp::kAvg, true, 2, {22, 4, 3, 0, 10, 51}},
    {ReduceOp::kAvg, true, 3, {14, 2, 2, 0, 6, 34}},
};

template <typename T>
void checkNative(DataType dt, const std::vector<double>& av, const std::vector<double>& bv,
                 const std::vector<OpCase>& cases) {
  const std::vector<T> a = encode<T>(av), b = encode<T>(bv);
  for (const OpCase& c : cases) {
    SCOPED_TRACE(std::string(dataTypeName(dt)) + " " + reduceOpName(c.op) + (c.finalStep ? " final" : "") +
                 " N=" + std::to_string(c.nranks));
    const std::vector<T> expected = encode<T>(c.expected);
    std::vector<T> dst(a.size(), T(99));
    reduceHost(dt, c.op, dst.data(), a.data(), b.data(), a.size(), c.finalStep, c.nranks);
    EXPECT_EQ(dst, expected);
    // In place, into either operand.
    std::vector<T> x = a;
    reduceHost(dt, c.op, x.data(), x.data(), b.data(), x.size(), c.finalStep, c.nranks);
    EXPECT_EQ(x, expected);
    std::vector<T> y = b;
    reduceHost(dt, c.op, y.data(), a.data(), y.data(), y.size(), c.finalStep, c.nranks);
    EXPECT_EQ(y, expected);
  }
}

void checkHalfLike(DataType dt, std::vector<uint16_t> (*enc)(const std::vector<double>&)) {
  const std::vector<uint16_t> a = enc(kFloatA), b = enc(kFloatB);
  for (const OpCase& c : kFloatCases) {
    SCOPED_TRACE(std::string(dataTypeName(dt)) + " " + reduceOpName(c.op) + (c.finalStep ? " final" : "") +
                 " N=" + std::to_string(c.nranks));
    const std::vector<uint16_t> expected = enc(c.expected);
    std::vector<uint16_t> dst(a.size(), 0x7777);
    reduceHost(dt, c.op, dst.data(), a.data(), b.data(), a.size(), c.finalStep, c.nranks);
    EXPECT_EQ(dst, expected);
    std::vector<uint16_t> x = a;
    reduceHost(dt, c.op, x.data(), x.data(), b.data(), x.size(), c.finalStep, c.nranks);
    EXPECT_EQ(x, expected);
    std::vector<uint16_t> y = b;
    reduceHost(dt, c.op, y.data(), a.data(), y.data(), y.size(), c.finalStep, c.nranks);
    EXPECT_EQ(y, expected);
  }
}

TEST(ReduceHostTest, Float32) { checkNative<float>(DataType::kFloat32, kFloatA, kFloatB, kFloatCases); }
TEST(ReduceHostTest, Float64) { checkNative<double>(DataType::kFloat64, kFloatA, kFloatB, kFloatCases); }
TEST(ReduceHostTest, Float16) { checkHalfLike(DataType::kFloat16, encodeHalf); }
TEST(ReduceHostTest, BFloat16) { checkHalfLike(DataType::kBFloat16, encodeBf16); }
TEST(ReduceHostTest, Int32) { checkNative<int32_t>(DataType::kInt32, kIntA, kIntB, kIntCases); }
TEST(ReduceHostTest, Int64) { checkNative<int64_t>(DataType::kInt64, kIntA, kIntB, kIntCases); }
TEST(ReduceHostTest, Uint8) { checkNative<uint8_t>(DataType::kUint8, kU8A, kU8B, kU8Cases); }

TEST(ReduceHostTest, Int64BeyondThirtyTwoBits) {
  const std::vector<int64_t> a = {int64_t(1) << 40, -(int64_t(1) << 50) - 1,
                                  std::numeric_limits<int64_t>::max()};
  const std::vector<int64_t> b = {3, 0, -1};
  std::vector<int64_t> d(3);
  reduceHost(DataType::kInt64, ReduceOp::kSum, d.data(), a.data(), b.data(), 3, false, 2);
  EXPECT_EQ(d, (std::vector<int64_t>{(int64_t(1) << 40) + 3, -(int64_t(1) << 50) - 1,
                                     std::numeric_limits<int64_t>::max() - 1}));
  reduceHost(DataType::kInt64, ReduceOp::kAvg, d.data(), a.data(), b.data(), 3, true, 2);
  EXPECT_EQ(d, (std::vector<int64_t>{((int64_t(1) << 40) + 3) / 2, -(int64_t(1) << 49),
                                     (std::numeric_limits<int64_t>::max() - 1) / 2}));
  reduceHost(DataType::kInt64, ReduceOp::kMin, d.data(), a.data(), b.data(), 3, false, 2);
  EXPECT_EQ(d, (std::vector<int64_t>{3, -(int64_t(1) << 50) - 1, -1}));
}

TEST(ReduceHostTest, Int32AvgTruncatesTowardZero) {
  const int32_t a[] = {-7, 7, -1, 1, -9, 2147483600};
  const int32_t b[] = {0, 0, 0, 0, 0, 40};
  int32_t d[6];
  reduceHost(DataType::kInt32, ReduceOp::kAvg, d, a, b, 6, true, 2);
  EXPECT_EQ(d[0], -3);
  EXPECT_EQ(d[1], 3);
  EXPECT_EQ(d[2], 0);
  EXPECT_EQ(d[3], 0);
  EXPECT_EQ(d[4], -4);
  EXPECT_EQ(d[5], 1073741820);
}

TEST(ReduceHostTest, ZeroCountWritesNothing) {
  for (DataType dt : kAllDataTypes) {
    for (ReduceOp op : kAllReduceOps) {
      if (!reduceSupported(dt, op)) continue;
      uint8_t dst[16], a[16], b[16];
      std::memset(dst, 0xCD, sizeof dst);
      std::memset(a, 1, sizeof a);
      std::memset(b, 2, sizeof b);
      reduceHost(dt, op, dst, a, b, 0, true, 2);
      for (uint8_t v : dst) ASSERT_EQ(v, 0xCD) << dataTypeName(dt) << " " << reduceOpName(op);
    }
  }
}

TEST(ReduceHostTest, OnlyCountElementsAreWritten) {
  for (DataType dt : kAllDataTypes) {
    if (!reduceSupported(dt, ReduceOp::kSum)) continue;  // float8: copy-only
    const size_t es = dataTypeSize(dt);
    std::vector<uint8_t> a(8 * es, 0), b(8 * es, 0), dst(8 * es, 0xEE);
    reduceHost(dt, ReduceOp::kSum, dst.data(), a.data(), b.data(), 5, false, 2);
    for (size_t i = 0; i < 5 * es; ++i) ASSERT_EQ(dst[i], 0) << dataTypeName(dt) << " byte " << i;
    for (size_t i = 5 * es; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xEE) << dataTypeName(dt) << " byte " << i;
  }
}

// Every hop rounds the f32 result to nearest even in the 16-bit type.
TEST(ReduceHostTest, HalfAndBf16RoundEveryHopToNearestEven) {
  // f16 ulp at 1 is 2^-10: 1 + 2^-11 is a tie -> 1 (even), (1 + 2^-10) + 2^-11 -> 1 + 2^-9 (even).
  const uint16_t ha[] = {0x3C00, 0x3C01, 0x3C00};
  const uint16_t hb[] = {0x1000 /* 2^-11 */, 0x1000, 0x1001 /* just above 2^-11 */};
  uint16_t hd[3];
  reduceHost(DataType::kFloat16, ReduceOp::kSum, hd, ha, hb, 3, false, 2);
  EXPECT_EQ(hd[0], 0x3C00);
  EXPECT_EQ(hd[1], 0x3C02);
  EXPECT_EQ(hd[2], 0x3C01);
  // bf16 ulp at 1 is 2^-7: 1 + 2^-8 is a tie -> 1, (1 + 2^-7) + 2^-8 -> 1 + 2^-6.
  const uint16_t ba[] = {0x3F80, 0x3F81, 0x3F80};
  const uint16_t bb[] = {0x3B80 /* 2^-8 */, 0x3B80, 0x3B81};
  uint16_t bd[3];
  reduceHost(DataType::kBFloat16, ReduceOp::kSum, bd, ba, bb, 3, false, 2);
  EXPECT_EQ(bd[0], 0x3F80);
  EXPECT_EQ(bd[1], 0x3F82);
  EXPECT_EQ(bd[2], 0x3F81);
  // f16 overflow: 65504 + 65504 -> inf; max stays finite.
  const uint16_t big[] = {0x7BFF};
  reduceHost(DataType::kFloat16, ReduceOp::kSum, hd, big, big, 1, false, 2);
  EXPECT_EQ(hd[0], 0x7C00);
  reduceHost(DataType::kFloat16, ReduceOp::kAvg, hd, big, big, 1, true, 2);
  EXPECT_EQ(hd[0], 0x7BFF) << "f16 avg is computed in f32, so the sum does not overflow before dividing";
}

// Integer sums and products wrap in two's complement (computed unsigned: no signed-overflow UB).
TEST(ReduceHostTest, SignedIntegerSumAndProdWrap) {
  const int32_t a[] = {INT32_MAX, INT32_MIN, 65536};
  const int32_t b[] = {1, -1, 65536};
  int32_t d[3];
  reduceHost(DataType::kInt32, ReduceOp::kSum, d, a, b, 2, false, 2);
  EXPECT_EQ(d[0], INT32_MIN);
  EXPECT_EQ(d[1], INT32_MAX);
  reduceHost(DataType::kInt32, ReduceOp::kProd, d + 2, a + 2, b + 2, 1, false, 2);
  EXPECT_EQ(d[2], 0);
  const int64_t x[] = {INT64_MAX};
  const int64_t y[] = {2};
  int64_t z[1];
  reduceHost(DataType::kInt64, ReduceOp::kProd, z, x, y, 1, false, 2);
  EXPECT_EQ(z[0], -2);
}

// Regression: the avg divisor once was converted to the element type, so for u8 it was the rank count
// modulo 256 (257 ranks divided by 1, 300 by 44). The sum of two u8 values divided by 257 or more ranks is 0.
TEST(ReduceHostTest, Uint8AvgWithMoreThan255Ranks) {
  const uint8_t a[] = {100, 255, 1};
  const uint8_t b[] = {100, 0, 1};
  uint8_t d[3];
  reduceHost(DataType::kUint8, ReduceOp::kAvg, d, a, b, 3, true, 257);
  EXPECT_EQ(std::vector<int>(d, d + 3), (std::vector<int>{0, 0, 0})) << "u8 avg over 257 ranks";
  reduceHost(DataType::kUint8, ReduceOp::kAvg, d, a, b, 3, true, 300);
  EXPECT_EQ(std::vector<int>(d, d + 3), (std::vector<int>{0, 0, 0})) << "u8 avg over 300 ranks";
  uint8_t v[] = {200, 255};
  divideHost(DataType::kUint8, v, 2, 257);
  EXPECT_EQ(std::vector<int>(v, v + 2), (std::vector<int>{0, 0})) << "u8 divided by 257";
}

// Regression, same cause: with exactly 256 ranks the u8 divisor was 0 and the process died with SIGFPE.
// Run in a child process so that a crash fails only this test.
TEST(ReduceHostDeathTest, Uint8AvgWith256RanksDoesNotCrash) {
  EXPECT_EXIT(
      {
        const uint8_t a[] = {100};
        const uint8_t b[] = {100};
        uint8_t d[] = {0xEE};
        reduceHost(DataType::kUint8, ReduceOp::kAvg, d, a, b, 1, true, 256);
        uint8_t v[] = {200};
        divideHost(DataType::kUint8, v, 1, 256);
        std::exit(d[0] == 0 && v[0] == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------------------------------------
// The ops and dtypes of issue 14: bitwise ops, i8 / i16, bool, complex, premul_sum

// reduceHost(dt, op) on a and b against `want`, out of place and aliased either way.
template <typename T>
void expectReduce(DataType dt, ReduceOp op, const std::vector<T>& a, const std::vector<T>& b,
                  const std::vector<T>& want, bool finalStep = false, int nranks = 2,
                  bool firstStep = false) {
  const size_t n = a.size();  // scalars: a complex element is two
  ASSERT_EQ(n * sizeof(T) % dataTypeSize(dt), 0u);
  const size_t count = n * sizeof(T) / dataTypeSize(dt);
  ASSERT_EQ(b.size(), n);
  ASSERT_EQ(want.size(), n);
  std::vector<T> dst(n);
  reduceHost(dt, op, dst.data(), a.data(), b.data(), count, finalStep, nranks, firstStep);
  EXPECT_EQ(0, std::memcmp(dst.data(), want.data(), n * sizeof(T)))
      << dataTypeName(dt) << " " << reduceOpName(op);
  std::vector<T> x = a;
  reduceHost(dt, op, x.data(), x.data(), b.data(), count, finalStep, nranks, firstStep);
  EXPECT_EQ(0, std::memcmp(x.data(), want.data(), n * sizeof(T))) << dataTypeName(dt) << " dst == a";
  std::vector<T> y = b;
  reduceHost(dt, op, y.data(), a.data(), y.data(), count, finalStep, nranks, firstStep);
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), n * sizeof(T))) << dataTypeName(dt) << " dst == b";
}

// Bitwise ops on every integer width, from the same bit patterns.
template <typename T>
void expectBitwise(DataType dt) {
  const std::vector<T> a = {T(0), T(-1), T(0x5A), T(0x0F), T(0x71), T(-128)};
  const std::vector<T> b = {T(0x33), T(0x3C), T(-1), T(0xF0), T(0x71), T(1)};
  std::vector<T> band, bor, bxor;
  for (size_t i = 0; i < a.size(); ++i) {
    band.push_back(T(a[i] & b[i]));
    bor.push_back(T(a[i] | b[i]));
    bxor.push_back(T(a[i] ^ b[i]));
  }
  expectReduce(dt, ReduceOp::kBand, a, b, band);
  expectReduce(dt, ReduceOp::kBor, a, b, bor);
  expectReduce(dt, ReduceOp::kBxor, a, b, bxor);
}

TEST(ReduceHostTest, BitwiseOpsOnEveryIntegerDtype) {
  expectBitwise<int8_t>(DataType::kInt8);
  expectBitwise<uint8_t>(DataType::kUint8);
  expectBitwise<int16_t>(DataType::kInt16);
  expectBitwise<int32_t>(DataType::kInt32);
  expectBitwise<int64_t>(DataType::kInt64);
  // Wider words: bits above the low byte take part.
  expectReduce<int32_t>(DataType::kInt32, ReduceOp::kBxor, {0x12345678}, {0x7F000001}, {0x6D345679});
  expectReduce<int64_t>(DataType::kInt64, ReduceOp::kBand, {int64_t(0x7FFF00000000FFFFll)},
                        {int64_t(0x0F0F0F0F0F0F0F0Fll)}, {int64_t(0x0F0F000000000F0Fll)});
}

TEST(ReduceHostTest, Int8AndInt16ArithmeticWrapsAndKeepsTheSign) {
  // i8: 100 + 100 wraps to -56; -128 * -1 wraps to -128; min / max read the sign; avg truncates to zero.
  expectReduce<int8_t>(DataType::kInt8, ReduceOp::kSum, {100, -5, 127}, {100, -7, 1}, {-56, -12, -128});
  expectReduce<int8_t>(DataType::kInt8, ReduceOp::kProd, {-128, 3, -4}, {-1, 5, 32}, {-128, 15, -128});
  expectReduce<int8_t>(DataType::kInt8, ReduceOp::kMin, {-3, 127, 0}, {2, -128, 0}, {-3, -128, 0});
  expectReduce<int8_t>(DataType::kInt8, ReduceOp::kMax, {-3, 127, -1}, {2, -128, -2}, {2, 127, -1});
  expectReduce<int8_t>(DataType::kInt8, ReduceOp::kAvg, {-3, 7, 100}, {0, 0, 100}, {-1, 3, -28}, true, 2);
  expectReduce<int16_t>(DataType::kInt16, ReduceOp::kSum, {30000, -2}, {10000, -3}, {-25536, -5});
  expectReduce<int16_t>(DataType::kInt16, ReduceOp::kProd, {300, -7}, {300, 9}, {24464, -63});
  expectReduce<int16_t>(DataType::kInt16, ReduceOp::kMin, {-300, 5}, {2, -32768}, {-300, -32768});
  expectReduce<int16_t>(DataType::kInt16, ReduceOp::kMax, {-300, 5}, {2, -32768}, {2, 5});
  expectReduce<int16_t>(DataType::kInt16, ReduceOp::kAvg, {-7, 9000}, {0, 0}, {-1, 2250}, true, 4);
}

TEST(ReduceHostTest, BoolSumIsOrAndProdIsAnd) {
  const std::vector<uint8_t> a = {0, 0, 1, 1}, b = {0, 1, 0, 1};
  expectReduce<uint8_t>(DataType::kBool, ReduceOp::kSum, a, b, {0, 1, 1, 1});
  expectReduce<uint8_t>(DataType::kBool, ReduceOp::kProd, a, b, {0, 0, 0, 1});
  expectReduce<uint8_t>(DataType::kBool, ReduceOp::kMin, a, b, {0, 0, 0, 1});
  expectReduce<uint8_t>(DataType::kBool, ReduceOp::kMax, a, b, {0, 1, 1, 1});
  expectReduce<uint8_t>(DataType::kBool, ReduceOp::kBand, a, b, {0, 0, 0, 1});
  expectReduce<uint8_t>(DataType::kBool, ReduceOp::kBor, a, b, {0, 1, 1, 1});
  expectReduce<uint8_t>(DataType::kBool, ReduceOp::kBxor, a, b, {0, 1, 1, 0});
}

TEST(ReduceHostTest, ComplexReducesItsParts) {
  // (re, im) pairs: 2 elements of c64 are 4 floats.
  expectReduce<float>(DataType::kComplex64, ReduceOp::kSum, {1, -2, 0.5f, 4}, {3, 5, 0.25f, -4},
                      {4, 3, 0.75f, 0});
  expectReduce<float>(DataType::kComplex64, ReduceOp::kAvg, {1, -2, 0.5f, 4}, {3, 5, 0.25f, -4},
                      {2, 1.5f, 0.375f, 0}, true, 2);
  expectReduce<double>(DataType::kComplex128, ReduceOp::kSum, {1e300, -1, 3, 7}, {1e300, 2, -3, 1},
                       {2e300, 1, 0, 8});
  expectReduce<double>(DataType::kComplex128, ReduceOp::kAvg, {6, -3, 9, 1}, {0, 0, 3, 2}, {2, -1, 4, 1},
                       true, 3);
  std::vector<float> v = {6, -3, 1, 2};
  divideHost(DataType::kComplex64, v.data(), 2, 2);
  EXPECT_EQ(v, (std::vector<float>{3, -1.5f, 0.5f, 1}));
}

TEST(ReduceHostTest, PremulSumScalesTheInputsOnly) {
  ReduceOp half = ReduceOp::kSum, four = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(0.5, &half).isOk());
  ASSERT_TRUE(makePremulSum(4.0, &four).isOk());
  // Later steps: b is a partial sum of scaled inputs, only a is scaled.
  expectReduce<float>(DataType::kFloat32, half, {2, -6, 1}, {10, 3, 0.25f}, {11, 0, 0.75f});
  expectReduce<double>(DataType::kFloat64, four, {2, -6, 0.5}, {10, 3, 1}, {18, -21, 3});
  // The first step: both are inputs.
  expectReduce<float>(DataType::kFloat32, half, {2, -6, 1}, {10, 3, 0.25f}, {6, -1.5f, 0.625f}, false, 2,
                      true);
  expectReduce<double>(DataType::kFloat64, four, {2, -6, 0.5}, {10, 3, 1}, {48, -12, 6}, false, 2, true);
  // final step and nranks change nothing (no division).
  expectReduce<float>(DataType::kFloat32, half, {2}, {1}, {2}, true, 7);
  expectReduce<uint16_t>(DataType::kFloat16, half, encodeHalf({2, -6, 1}), encodeHalf({10, 3, 0.25}),
                         encodeHalf({6, -1.5, 0.625}), false, 2, true);
  expectReduce<uint16_t>(DataType::kBFloat16, four, encodeBf16({2, -6, 0.5}), encodeBf16({10, 3, 1}),
                         encodeBf16({18, -21, 3}));
  // Complex: both parts scaled.
  expectReduce<float>(DataType::kComplex64, half, {2, -6}, {10, 3}, {6, -1.5f}, false, 2, true);
  expectReduce<double>(DataType::kComplex128, four, {2, -6}, {10, 3}, {18, -21});
  // Pre-scaling is why FSDP divides first: 60000 + 60000 overflows f16, 0.5 * each does not.
  expectReduce<uint16_t>(DataType::kFloat16, half, encodeHalf({60000}), encodeHalf({60000}),
                         encodeHalf({60000}), false, 2, true);
}

TEST(ReduceHostTest, PremulScalarIsRoundedToTheElementType) {
  const double tenth = 0.1;
  EXPECT_EQ(premulScalar(DataType::kFloat64, tenth), tenth);
  EXPECT_EQ(premulScalar(DataType::kComplex128, tenth), tenth);
  EXPECT_EQ(premulScalar(DataType::kFloat32, tenth), double(0.1f));
  EXPECT_EQ(premulScalar(DataType::kComplex64, tenth), double(0.1f));
  EXPECT_EQ(premulScalar(DataType::kFloat16, tenth), double(halfToFloat(floatToHalf(0.1f))));
  EXPECT_EQ(premulScalar(DataType::kBFloat16, tenth), double(bf16ToFloat(floatToBf16(0.1f))));
  EXPECT_NE(premulScalar(DataType::kFloat16, tenth), double(0.1f));  // f16 really rounds
  // And the f16 kernel multiplies by that rounded factor: 1 * s + 0 is s itself.
  ReduceOp op = ReduceOp::kSum;
  ASSERT_TRUE(makePremulSum(tenth, &op).isOk());
  expectReduce<uint16_t>(DataType::kFloat16, op, encodeHalf({1}), encodeHalf({0}),
                         {floatToHalf(float(premulScalar(DataType::kFloat16, tenth)))});
}

// ---------------------------------------------------------------------------------------------------------
// divideHost

TEST(ReduceHostTest, DivideHostEveryDtype) {
  {
    int32_t v[] = {-7, 7, 9, -9, 0, 1};
    divideHost(DataType::kInt32, v, 6, 2);
    EXPECT_EQ(std::vector<int32_t>(v, v + 6), (std::vector<int32_t>{-3, 3, 4, -4, 0, 0}));
  }
  {
    int64_t v[] = {-(int64_t(1) << 40) - 1, 10, -10};
    divideHost(DataType::kInt64, v, 3, 4);
    EXPECT_EQ(std::vector<int64_t>(v, v + 3), (std::vector<int64_t>{-(int64_t(1) << 38), 2, -2}));
  }
  {
    uint8_t v[] = {255, 7, 1, 0};
    divideHost(DataType::kUint8, v, 4, 2);
    EXPECT_EQ(std::vector<uint8_t>(v, v + 4), (std::vector<uint8_t>{127, 3, 0, 0}));
  }
  {
    float v[] = {1, 3, -6, 0.5f};
    divideHost(DataType::kFloat32, v, 4, 4);
    EXPECT_EQ(std::vector<float>(v, v + 4), (std::vector<float>{0.25f, 0.75f, -1.5f, 0.125f}));
    float t[] = {1};
    divideHost(DataType::kFloat32, t, 1, 3);
    EXPECT_EQ(t[0], 1.0f / 3.0f);
  }
  {
    double v[] = {1, -3};
    divideHost(DataType::kFloat64, v, 2, 8);
    EXPECT_EQ(std::vector<double>(v, v + 2), (std::vector<double>{0.125, -0.375}));
  }
  {
    uint16_t v[] = {0x4200 /* 3 */, 0xC400 /* -4 */, 0x3C00 /* 1 */};
    divideHost(DataType::kFloat16, v, 3, 2);
    EXPECT_EQ(v[0], 0x3E00);  // 1.5
    EXPECT_EQ(v[1], 0xC000);  // -2
    EXPECT_EQ(v[2], 0x3800);  // 0.5
    uint16_t third[] = {0x3C00};
    divideHost(DataType::kFloat16, third, 1, 3);
    EXPECT_EQ(third[0], 0x3555);  // 1/3 in f16
  }
  {
    uint16_t v[] = {0x4040 /* 3 */, 0xC080 /* -4 */};
    divideHost(DataType::kBFloat16, v, 2, 2);
    EXPECT_EQ(v[0], 0x3FC0);  // 1.5
    EXPECT_EQ(v[1], 0xC000);  // -2
    uint16_t third[] = {0x3F80};
    divideHost(DataType::kBFloat16, third, 1, 3);
    EXPECT_EQ(third[0], 0x3EAB);  // 1/3 = 0x3EAAAAAB rounds up
  }
  // Divisor 1 leaves everything unchanged; count 0 touches nothing.
  for (DataType dt : kAllDataTypes) {
    if (!reduceSupported(dt, ReduceOp::kAvg)) continue;  // bool, float8: nothing divides them
    std::vector<uint8_t> v(4 * dataTypeSize(dt));
    for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i * 13 + 1);
    if (dt == DataType::kFloat16 || dt == DataType::kBFloat16) {
      for (size_t i = 1; i < v.size(); i += 2) v[i] &= 0x3F;  // keep values finite (no NaN payloads)
    }
    const std::vector<uint8_t> before = v;
    divideHost(dt, v.data(), 4, 1);
    EXPECT_EQ(v, before) << dataTypeName(dt);
    divideHost(dt, v.data(), 0, 7);
    EXPECT_EQ(v, before) << dataTypeName(dt);
  }
}

// ---------------------------------------------------------------------------------------------------------
// f16 conversions

TEST(HalfFloatTest, HalfToFloatIsExactForAllFiniteHalves) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t x = uint16_t(h);
    const float f = halfToFloat(x);
    if (isHalfNan(x)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    } else if ((x & 0x7FFF) == 0x7C00) {
      ASSERT_TRUE(std::isinf(f)) << std::hex << h;
      ASSERT_EQ(f > 0, (h & 0x8000) == 0) << std::hex << h;
    } else {
      ASSERT_EQ(double(f), halfValue(x)) << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;  // -0 stays -0
    }
  }
}

TEST(HalfFloatTest, RoundTripOfAll65536Patterns) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t x = uint16_t(h);
    const uint16_t back = floatToHalf(halfToFloat(x));
    if (isHalfNan(x)) {
      ASSERT_TRUE(isHalfNan(back)) << std::hex << h << " -> " << back;
      ASSERT_EQ(back & 0x8000, x & 0x8000) << std::hex << h;
      ASSERT_EQ(back, x | 0x200) << std::hex << h << ": payload kept, NaN made quiet";
    } else {
      ASSERT_EQ(back, x) << std::hex << h;
    }
  }
}

TEST(HalfFloatTest, KnownValues) {
  EXPECT_EQ(floatToHalf(0.0f), 0x0000);
  EXPECT_EQ(floatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(floatToHalf(1.0f), 0x3C00);
  EXPECT_EQ(floatToHalf(-1.0f), 0xBC00);
  EXPECT_EQ(floatToHalf(2.0f), 0x4000);
  EXPECT_EQ(floatToHalf(0.5f), 0x3800);
  EXPECT_EQ(floatToHalf(0.1f), 0x2E66);
  EXPECT_EQ(floatToHalf(3.14159265f), 0x4248);
  EXPECT_EQ(floatToHalf(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(floatToHalf(-65504.0f), 0xFBFF);
  EXPECT_EQ(floatToHalf(std::nextafter(65520.0f, 0.0f)), 0x7BFF);  // just below the tie
  EXPECT_EQ(floatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(floatToHalf(65520.0f), 0x7C00);  // tie with 65536 rounds to even: inf
  EXPECT_EQ(floatToHalf(-65520.0f), 0xFC00);
  EXPECT_EQ(floatToHalf(1e10f), 0x7C00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(floatToHalf(-std::numeric_limits<float>::infinity()), 0xFC00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie with 0 -> even (0)
  EXPECT_EQ(floatToHalf(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);  // above the tie
  EXPECT_EQ(floatToHalf(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie between 1 and 2 -> 2
  EXPECT_EQ(floatToHalf(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 units -> 2
  EXPECT_EQ(floatToHalf(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(floatToHalf(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(floatToHalf(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1023.5f, -24)), 0x0400);  // tie -> even rounds up into the normals
  EXPECT_EQ(floatToHalf(std::ldexp(1022.5f, -24)), 0x03FE);  // tie -> even rounds down
  EXPECT_EQ(floatToHalf(std::nextafter(std::ldexp(1.0f, -14), 0.0f)), 0x0400);
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(halfToFloat(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(halfToFloat(0xC000), -2.0f);
  EXPECT_EQ(bitsOf(halfToFloat(0x8000)), 0x80000000u);
  EXPECT_EQ(halfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
}

TEST(HalfFloatTest, NormalTiesRoundToNearestEven) {
  // Between 1 (0x3C00) and 1 + 2^-10 (0x3C01) the tie is 1 + 2^-11.
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)), 0x3C00);
  // Carry of the rounding into the exponent: 2 - 2^-11 (tie between 0x3BFF and 2.0) -> 2.0 (even).
  EXPECT_EQ(floatToHalf(2.0f - std::ldexp(1.0f, -11)), 0x4000);
  EXPECT_EQ(floatToHalf(-(2.0f - std::ldexp(1.0f, -11))), 0xC000);
  // Every tie between two adjacent finite halves (subnormal or normal) goes to the even one.
  for (uint32_t h = 0; h < 0x7BFF; ++h) {
    const double mid = (halfValue(uint16_t(h)) + halfValue(uint16_t(h + 1))) / 2;  // exact in float
    const float f = float(mid);
    ASSERT_EQ(double(f), mid);
    const uint16_t even = (h & 1) ? uint16_t(h + 1) : uint16_t(h);
    ASSERT_EQ(floatToHalf(f), even) << std::hex << h;
    ASSERT_EQ(floatToHalf(-f), uint16_t(even | 0x8000)) << std::hex << h;
    ASSERT_EQ(floatToHalf(std::nextafter(f, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(floatToHalf(std::nextafter(f, 1e9f)), h + 1) << std::hex << h;
  }
}

TEST(HalfFloatTest, NanStaysNan) {
  const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu,
                           0x7F802000u, 0xFFC00000u, 0x7F801FFFu};
  for (uint32_t n : nans) {
    const uint16_t h = floatToHalf(floatOf(n));
    EXPECT_TRUE(isHalfNan(h)) << std::hex << n << " -> " << h;
    EXPECT_EQ((h & 0x8000) != 0, (n & 0x80000000u) != 0) << std::hex << n;
  }
  EXPECT_TRUE(isHalfNan(floatToHalf(std::numeric_limits<float>::quiet_NaN())));
}

TEST(HalfFloatTest, MatchesReferenceOnRandomFloats) {
  std::mt19937 rng(31337);
  // Half the draws: any bit pattern; the other half: magnitudes around the half range.
  std::uniform_int_distribution<int> exponent(-27, 17);
  for (int i = 0; i < 300000; ++i) {
    float f;
    if (i % 2 == 0) {
      f = floatOf(uint32_t(rng()));
    } else {
      f = std::ldexp(1.0f + float(rng() & 0x7FFFFF) * std::ldexp(1.0f, -23), exponent(rng));
      if (rng() & 1) f = -f;
    }
    const uint16_t got = floatToHalf(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(isHalfNan(got)) << std::hex << bitsOf(f);
    } else {
      ASSERT_EQ(got, referenceFloatToHalf(f)) << std::hex << "float bits " << bitsOf(f);
    }
  }
}

#if defined(__FLT16_MANT_DIG__)
uint16_t bitsOfFloat16(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

TEST(HalfFloatTest, MatchesCompilerFloat16OnMillionRandomFloats) {
  std::mt19937 rng(4242);
  std::uniform_int_distribution<int> exponent(-27, 17);
  for (int i = 0; i < 1000000; ++i) {
    float f;
    if (i % 2 == 0) {
      f = floatOf(uint32_t(rng()));
    } else {
      f = std::ldexp(1.0f + float(rng() & 0x7FFFFF) * std::ldexp(1.0f, -23), exponent(rng));
      if (rng() & 1) f = -f;
    }
    const uint16_t got = floatToHalf(f);
    const uint16_t want = bitsOfFloat16(static_cast<_Float16>(f));
    if (std::isnan(f)) {
      ASSERT_TRUE(isHalfNan(got) && isHalfNan(want)) << std::hex << bitsOf(f);
    } else {
      ASSERT_EQ(got, want) << std::hex << "float bits " << bitsOf(f);
    }
  }
}

TEST(HalfFloatTest, HalfToFloatMatchesCompilerFloat16) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    _Float16 x;
    const uint16_t u = uint16_t(h);
    std::memcpy(&x, &u, 2);
    const float want = static_cast<float>(x);
    const float got = halfToFloat(u);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << h;
    } else {
      ASSERT_EQ(bitsOf(got), bitsOf(want)) << std::hex << h;
    }
  }
}
#endif

// ---------------------------------------------------------------------------------------------------------
// bf16 conversions

TEST(BFloat16Test, KnownValues) {
  EXPECT_EQ(floatToBf16(0.0f), 0x0000);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(floatToBf16(1.0f), 0x3F80);
  EXPECT_EQ(floatToBf16(-2.0f), 0xC000);
  EXPECT_EQ(floatToBf16(3.0f), 0x4040);
  EXPECT_EQ(floatToBf16(0.1f), 0x3DCD);  // 0x3DCCCCCD rounds up
  EXPECT_EQ(floatToBf16(3.14159265f), 0x4049);
  EXPECT_EQ(floatToBf16(65504.0f), 0x4780);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(floatToBf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7F80);  // beyond the largest bf16 + half ulp
  EXPECT_EQ(floatToBf16(floatOf(0x7F7F7FFFu)), 0x7F7F);               // largest finite bf16
  EXPECT_EQ(floatToBf16(floatOf(0x7F7F8000u)), 0x7F80);               // tie, odd -> even (inf)
  EXPECT_EQ(floatToBf16(floatOf(0x00008000u)), 0x0000);               // subnormal tie -> even
  EXPECT_EQ(floatToBf16(floatOf(0x00018000u)), 0x0002);
  EXPECT_EQ(floatToBf16(floatOf(0x00000001u)), 0x0000);
  EXPECT_EQ(bf16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bf16ToFloat(0xC000), -2.0f);
  EXPECT_EQ(bf16ToFloat(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bitsOf(bf16ToFloat(0x8000)), 0x80000000u);
}

TEST(BFloat16Test, TiesRoundToNearestEven) {
  EXPECT_EQ(floatToBf16(floatOf(0x3F808000u)), 0x3F80);  // 1 + 2^-8: tie -> 1
  EXPECT_EQ(floatToBf16(floatOf(0x3F818000u)), 0x3F82);  // 1 + 3 * 2^-8: tie -> even 0x3F82
  EXPECT_EQ(floatToBf16(floatOf(0x3F808001u)), 0x3F81);  // just above the tie
  EXPECT_EQ(floatToBf16(floatOf(0x3F807FFFu)), 0x3F80);  // just below
  EXPECT_EQ(floatToBf16(floatOf(0xBF818000u)), 0xBF82);
  EXPECT_EQ(floatToBf16(floatOf(0x3FFF8000u)), 0x4000);  // carry into the exponent
  for (uint32_t b = 0; b < 0x7F80; ++b) {
    const uint32_t tie = (b << 16) | 0x8000u;
    const uint16_t even = (b & 1) ? uint16_t(b + 1) : uint16_t(b);
    ASSERT_EQ(floatToBf16(floatOf(tie)), even) << std::hex << b;
    ASSERT_EQ(floatToBf16(floatOf(tie | 0x80000000u)), uint16_t(even | 0x8000)) << std::hex << b;
    ASSERT_EQ(floatToBf16(floatOf(tie - 1)), b) << std::hex << b;
    ASSERT_EQ(floatToBf16(floatOf(tie + 1)), b + 1) << std::hex << b;
  }
}

TEST(BFloat16Test, NanStaysNanAndRoundTrip) {
  const uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0x7F80FFFFu, 0xFFFF0000u};
  for (uint32_t n : nans) {
    const uint16_t b = floatToBf16(floatOf(n));
    EXPECT_TRUE(isBf16Nan(b)) << std::hex << n << " -> " << b;
    EXPECT_EQ((b & 0x8000) != 0, (n & 0x80000000u) != 0) << std::hex << n;
  }
  for (uint32_t v = 0; v < 0x10000; ++v) {
    const uint16_t b = uint16_t(v);
    const uint16_t back = floatToBf16(bf16ToFloat(b));
    if (isBf16Nan(b)) {
      ASSERT_EQ(back, b | 0x40) << std::hex << v;
    } else {
      ASSERT_EQ(back, b) << std::hex << v;
      ASSERT_EQ(bitsOf(bf16ToFloat(b)), uint32_t(b) << 16) << std::hex << v;
    }
  }
}

TEST(BFloat16Test, MatchesReferenceOnRandomFloats) {
  std::mt19937 rng(777);
  for (int i = 0; i < 300000; ++i) {
    const float f = floatOf(uint32_t(rng()));
    const uint16_t got = floatToBf16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(isBf16Nan(got)) << std::hex << bitsOf(f);
    } else {
      ASSERT_EQ(got, referenceFloatToBf16(f)) << std::hex << "float bits " << bitsOf(f);
    }
  }
}

}  // namespace
}  // namespace ringguard
