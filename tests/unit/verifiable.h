#pragma once
// Verifiable inputs (nccl-tests style) without MPI: small integer values, so every partial sum and product
// is exact in every dtype and the result does not depend on the reduction order. The mpirun suites use
// them too (tests/mpi/test_util.h), and the fault soak (tests/soak). Also the suites' random test data
// (randomBytes), for tests that compare two implementations rather than a closed form.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/reduce.h"
#include "ringguard/core/types.h"

namespace ringguard {
namespace testing {

// splitmix64: fast, so 256 MiB of test data (the GPU suites') costs well under a second.
inline uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// `n` bytes of splitmix64 output from `seed`: the same on every run and platform.
inline std::vector<uint8_t> randomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t state = seed;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = splitmix64(&state);
    std::memcpy(&v[i], &r, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(splitmix64(&state));
  return v;
}

inline bool isIntegral(DataType t) { return isIntegerType(t) || t == DataType::kBool; }

// Scalars stored per element: complex dtypes hold (re, im), each an input of its own.
inline size_t scalarsPerElement(DataType t) { return isComplexType(t) ? 2 : 1; }

// Input i of `rank` (i counts scalars: a complex element holds two).
inline int64_t inputValue(DataType t, ReduceOp op, int rank, size_t i) {
  if (t == DataType::kBool) return int64_t((i * 5 + size_t(rank) * 3) % 7 < 3);  // 0 or 1
  if (isFloat8Type(t)) return int64_t((i * 7 + size_t(rank) * 29) % 251);        // copy-only: any bit pattern
  const bool unsignedType = t == DataType::kUint8;
  switch (baseOp(op)) {
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor: {
      int64_t v = int64_t((i * 37 + size_t(rank) * 11) % 64);
      return unsignedType ? v : v - 32;  // negative values: the sign bits take part
    }
    case ReduceOp::kPremulSum:  // summed after scaling by a power of two: exact
      return int64_t((i * 7 + size_t(rank) * 3) % 11) - 5;
    case ReduceOp::kSum:
    case ReduceOp::kAvg: {
      int64_t v = int64_t((i * 7 + size_t(rank) * 3) % 11);
      return unsignedType ? v : v - 5;
    }
    case ReduceOp::kProd: {
      static const int64_t kSigned[] = {1, 2, -1, 1};
      return unsignedType ? 1 + int64_t((i + rank) % 2) : kSigned[(i + rank) % 4];
    }
    case ReduceOp::kMin:
    case ReduceOp::kMax: {
      int64_t v = int64_t((i * 13 + size_t(rank) * 5) % 17);
      return unsignedType ? v : v - 8;
    }
  }
  return 0;
}

// Stores the value `v` (a double holding an exactly representable number) as dtype t at index i.
inline void store(DataType t, void* buf, size_t i, double v) {
  switch (t) {
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = float(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToHalf(float(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = floatToBf16(float(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(buf)[i] = int32_t(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(buf)[i] = int64_t(v);
      break;
    case DataType::kUint8:
    case DataType::kBool:
    case DataType::kFloat8E4M3:  // copy-only: the value is a bit pattern
    case DataType::kFloat8E5M2:
      static_cast<uint8_t*>(buf)[i] = uint8_t(v);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(buf)[i] = int8_t(v);
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(buf)[i] = int16_t(v);
      break;
    case DataType::kComplex64:  // i counts scalars
      static_cast<float*>(buf)[i] = float(v);
      break;
    case DataType::kComplex128:
      static_cast<double*>(buf)[i] = v;
      break;
  }
}

inline std::vector<uint8_t> makeInput(DataType t, ReduceOp op, int rank, size_t count) {
  std::vector<uint8_t> buf(count * dataTypeSize(t) + 1);  // +1: never a zero-sized allocation
  for (size_t i = 0; i < count * scalarsPerElement(t); ++i) {
    store(t, buf.data(), i, double(inputValue(t, op, rank, i)));
  }
  buf.resize(count * dataTypeSize(t));
  return buf;
}

// The closed-form result over `nranks` ranks.
inline std::vector<uint8_t> expectedResult(DataType t, ReduceOp op, int nranks, size_t count) {
  std::vector<uint8_t> buf(count * dataTypeSize(t));
  const double factor = premulFactor(op);
  for (size_t i = 0; i < count * scalarsPerElement(t); ++i) {
    int64_t acc = inputValue(t, op, 0, i);
    for (int r = 1; r < nranks; ++r) {
      int64_t v = inputValue(t, op, r, i);
      if (t == DataType::kBool && (op == ReduceOp::kSum || op == ReduceOp::kProd)) {
        acc = op == ReduceOp::kSum ? (acc | v) : (acc & v);  // or, and
        continue;
      }
      switch (baseOp(op)) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg:
          acc += v;
          break;
        case ReduceOp::kProd:
          acc *= v;
          break;
        case ReduceOp::kMin:
          acc = std::min(acc, v);
          break;
        case ReduceOp::kMax:
          acc = std::max(acc, v);
          break;
        case ReduceOp::kBand:
          acc &= v;
          break;
        case ReduceOp::kBor:
          acc |= v;
          break;
        case ReduceOp::kBxor:
          acc ^= v;
          break;
        case ReduceOp::kPremulSum:
          acc += v;
          break;
      }
    }
    double out = double(acc);
    if (isPremulSum(op)) out = double(acc) * factor;  // exact for power-of-two factors and small sums
    if (op == ReduceOp::kAvg) {
      if (isIntegral(t)) {
        out = double(acc / nranks);  // exact sum, truncating division
      } else if (t == DataType::kFloat64 || t == DataType::kComplex128) {
        out = double(acc) / double(nranks);
      } else {
        out = double(float(acc) / float(nranks));  // f32/f16/bf16 divide in f32, then round once
      }
    }
    store(t, buf.data(), i, out);
  }
  return buf;
}

// Rank `source`'s distinct pattern for a copy collective (allgather, broadcast, alltoall, send/recv): the
// sum inputs of a "rank" that differs per source, so a block that lands in the wrong place is seen.
inline std::vector<uint8_t> pattern(DataType t, int source, size_t count) {
  return makeInput(t, ReduceOp::kSum, source * 5 + 3, count);
}

// memcmp that accepts the null pointers of empty buffers.
inline bool sameBytes(const void* a, const void* b, size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

}  // namespace testing
}  // namespace ringguard
