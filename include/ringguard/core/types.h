#pragma once
// Element types and reduction operations understood by every collective.
#include <cstddef>
#include <cstdint>
#include <string>

#include "ringguard/core/status.h"

namespace ringguard {

// f8e4m3 is torch's float8_e4m3fn, f8e5m2 its float8_e5m2 (copy-only: no reduction is defined on them);
// c64 / c128 are complex numbers as pairs of f32 / f64 (real, imaginary).
enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUint8,
  kInt8,
  kInt16,
  kBool,
  kFloat8E4M3,
  kFloat8E5M2,
  kComplex64,
  kComplex128,
};

// Where buffers live: host memory or device memory (a communicator's collectives: host for MPI, loopback
// and c10d, device for NCCL and host-staged; a guarded op's tensors).
enum class MemoryKind : uint8_t { kHost = 0, kDevice };

// kPremulSum names the kind only: a usable premul_sum op carries its factor and is made by makePremulSum
// (as ncclRedOpCreatePreMulSum makes an NCCL op), so the factor travels wherever the op does.
enum class ReduceOp : uint8_t { kSum = 0, kProd, kMin, kMax, kAvg, kBand, kBor, kBxor, kPremulSum };

// The collectives of a Communicator (the fingerprint's kind; Communicator::rejectedAsync names one).
enum class CollectiveKind : uint8_t {
  kAllreduce = 0,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kSendRecv,
};

inline constexpr DataType kAllDataTypes[] = {
    DataType::kFloat32,   DataType::kFloat64,   DataType::kFloat16,    DataType::kBFloat16,
    DataType::kInt32,     DataType::kInt64,     DataType::kUint8,      DataType::kInt8,
    DataType::kInt16,     DataType::kBool,      DataType::kFloat8E4M3, DataType::kFloat8E5M2,
    DataType::kComplex64, DataType::kComplex128};
// Every op that needs no factor (premul_sum ops come from makePremulSum).
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                                             ReduceOp::kMax, ReduceOp::kAvg,  ReduceOp::kBand,
                                             ReduceOp::kBor, ReduceOp::kBxor};

size_t dataTypeSize(DataType t);
// "f32", "f64", "f16", "bf16", "i32", "i64", "u8", "i8", "i16", "bool", "f8e4m3", "f8e5m2", "c64", "c128"
const char* dataTypeName(DataType t);
// "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"; "premul_sum" for every premul_sum op.
const char* reduceOpName(ReduceOp op);
bool isValid(DataType t);
// Every op of kAllReduceOps and every op makePremulSum returned; not the bare kind kPremulSum.
bool isValid(ReduceOp op);
// Parse the names above; return false on an unknown name (and for "premul_sum", which needs a factor).
bool parseDataType(const std::string& s, DataType* out);
bool parseReduceOp(const std::string& s, ReduceOp* out);

// premul_sum: every rank's input multiplied by `factor`, then summed (ncclRedOpCreatePreMulSum). The op
// returned is the same for the same factor (bit for bit) in every thread of the process; at most 128
// distinct factors per process (kInvalidArgument beyond, and for a factor that is not finite).
Status makePremulSum(double factor, ReduceOp* out);
bool isPremulSum(ReduceOp op);
// The factor of a premul_sum op (1 for any other op).
double premulFactor(ReduceOp op);
// The kind of an op: kPremulSum for every premul_sum op, the op itself otherwise.
ReduceOp baseOp(ReduceOp op);

// Dtype families.
bool isFloatingType(DataType t);  // f32, f64, f16, bf16 (not f8: copy-only)
bool isIntegerType(DataType t);   // i8, i16, i32, i64, u8 (not bool)
bool isComplexType(DataType t);
bool isFloat8Type(DataType t);

// Whether `op` reduces `dtype`: floats take sum, prod, min, max, avg, premul_sum; integers sum, prod, min,
// max, avg, band, bor, bxor; bool sum (logical or, as ProcessGroupNCCL does it), prod (and), min, max,
// band, bor, bxor; complex (as pairs of reals) sum, avg, premul_sum; float8 nothing. Both must be valid.
bool reduceSupported(DataType dtype, ReduceOp op);

}  // namespace ringguard
