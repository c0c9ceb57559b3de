#include "ringguard/core/types.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace ringguard {

namespace {

// premul_sum ops are handles kPremulFirst + i into a process-wide table of factors, interned by their
// bits: an op handed to another thread (the progress thread, a kernel launch) resolves without a lock,
// since an entry is written before its handle is published and never changes afterwards.
constexpr int kPremulFirst = 128;
constexpr int kPremulCapacity = 256 - kPremulFirst;
double gPremulFactors[kPremulCapacity];
std::atomic<int> gPremulCount{0};
std::mutex gPremulMutex;

int premulIndex(ReduceOp op) {
  const int i = int(static_cast<uint8_t>(op)) - kPremulFirst;
  return (i >= 0 && i < gPremulCount.load(std::memory_order_acquire)) ? i : -1;
}

}  // namespace

size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kFloat16:
      return 2;
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
    case DataType::kInt64:
      return 8;
    case DataType::kUint8:
      return 1;
    case DataType::kInt8:
      return 1;
    case DataType::kInt16:
      return 2;
    case DataType::kBool:
      return 1;
    case DataType::kFloat8E4M3:
      return 1;
    case DataType::kFloat8E5M2:
      return 1;
    case DataType::kComplex64:
      return 8;
    case DataType::kComplex128:
      return 16;
  }
  // Callers check isValid() first; 0 makes a forgotten check fail loudly (zero-sized slices) rather than
  // silently mis-stride.
  return 0;
}

const char* dataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return "f32";
    case DataType::kFloat64:
      return "f64";
    case DataType::kFloat16:
      return "f16";
    case DataType::kBFloat16:
      return "bf16";
    case DataType::kInt32:
      return "i32";
    case DataType::kInt64:
      return "i64";
    case DataType::kUint8:
      return "u8";
    case DataType::kInt8:
      return "i8";
    case DataType::kInt16:
      return "i16";
    case DataType::kBool:
      return "bool";
    case DataType::kFloat8E4M3:
      return "f8e4m3";
    case DataType::kFloat8E5M2:
      return "f8e5m2";
    case DataType::kComplex64:
      return "c64";
    case DataType::kComplex128:
      return "c128";
  }
  return "invalid";
}

const char* reduceOpName(ReduceOp op) {
  switch (baseOp(op)) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kBand:
      return "band";
    case ReduceOp::kBor:
      return "bor";
    case ReduceOp::kBxor:
      return "bxor";
    case ReduceOp::kPremulSum:
      return "premul_sum";
  }
  return "invalid";
}

bool isValid(DataType t) { return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DataType::kComplex128); }

bool isValid(ReduceOp op) {
  return static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::kBxor) || premulIndex(op) >= 0;
}

bool parseDataType(const std::string& s, DataType* out) {
  for (DataType t : kAllDataTypes) {
    if (s == dataTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

bool parseReduceOp(const std::string& s, ReduceOp* out) {
  for (ReduceOp op : kAllReduceOps) {
    if (s == reduceOpName(op)) {
      *out = op;
      return true;
    }
  }
  return false;
}

Status makePremulSum(double factor, ReduceOp* out) {
  if (!std::isfinite(factor)) {
    return Status(StatusCode::kInvalidArgument, "premul_sum factor must be finite");
  }
  std::lock_guard<std::mutex> lock(gPremulMutex);
  const int n = gPremulCount.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    if (std::memcmp(&gPremulFactors[i], &factor, sizeof factor) == 0) {
      *out = static_cast<ReduceOp>(kPremulFirst + i);
      return Status::ok();
    }
  }
  if (n == kPremulCapacity) {
    return Status(StatusCode::kInvalidArgument, "premul_sum: more than " + std::to_string(kPremulCapacity) +
                                                    " distinct factors in one process");
  }
  gPremulFactors[n] = factor;
  gPremulCount.store(n + 1, std::memory_order_release);
  *out = static_cast<ReduceOp>(kPremulFirst + n);
  return Status::ok();
}

bool isPremulSum(ReduceOp op) { return premulIndex(op) >= 0; }

double premulFactor(ReduceOp op) {
  const int i = premulIndex(op);
  return i < 0 ? 1.0 : gPremulFactors[i];
}

ReduceOp baseOp(ReduceOp op) { return isPremulSum(op) ? ReduceOp::kPremulSum : op; }

bool isFloatingType(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

bool isIntegerType(DataType t) {
  return t == DataType::kInt8 || t == DataType::kInt16 || t == DataType::kInt32 || t == DataType::kInt64 ||
         t == DataType::kUint8;
}

bool isComplexType(DataType t) { return t == DataType::kComplex64 || t == DataType::kComplex128; }

bool isFloat8Type(DataType t) { return t == DataType::kFloat8E4M3 || t == DataType::kFloat8E5M2; }

bool reduceSupported(DataType dtype, ReduceOp op) {
  if (!isValid(dtype) || !isValid(op)) return false;
  switch (baseOp(op)) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return isFloatingType(dtype) || isIntegerType(dtype) || isComplexType(dtype) ||
             (dtype == DataType::kBool && baseOp(op) == ReduceOp::kSum);
    case ReduceOp::kProd:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return isFloatingType(dtype) || isIntegerType(dtype) || dtype == DataType::kBool;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      return isIntegerType(dtype) || dtype == DataType::kBool;
    case ReduceOp::kPremulSum:
      return isFloatingType(dtype) || isComplexType(dtype);
  }
  return false;
}

}  // namespace ringguard
