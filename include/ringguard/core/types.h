#pragma once
// Element types and reduction operations understood by every collective.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ringguard {

enum class DataType : uint8_t { kFloat32 = 0, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kUint8 };
enum class ReduceOp : uint8_t { kSum = 0, kProd, kMin, kMax, kAvg };

inline constexpr DataType kAllDataTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                             DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                                             DataType::kUint8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                             ReduceOp::kAvg};

size_t dataTypeSize(DataType t);
const char* dataTypeName(DataType t);   // "f32", "f64", "f16", "bf16", "i32", "i64", "u8"
const char* reduceOpName(ReduceOp op);  // "sum", "prod", "min", "max", "avg"
bool isValid(DataType t);
bool isValid(ReduceOp op);
// Parse the names above; return false on an unknown name.
bool parseDataType(const std::string& s, DataType* out);
bool parseReduceOp(const std::string& s, ReduceOp* out);

}  // namespace ringguard
