#include "ringguard/core/types.h"

#include <cstdint>

namespace ringguard {

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
  }
  return "invalid";
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
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
  }
  return "invalid";
}

bool isValid(DataType t) { return static_cast<uint8_t>(t) <= static_cast<uint8_t>(DataType::kUint8); }

bool isValid(ReduceOp op) { return static_cast<uint8_t>(op) <= static_cast<uint8_t>(ReduceOp::kAvg); }

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

}  // namespace ringguard
