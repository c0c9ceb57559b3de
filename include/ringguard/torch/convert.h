#pragma once
// torch <-> ringguard type mapping, shared by the c10d backend and the GradientAggregator.
#include <c10/core/ScalarType.h>

#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "ringguard/core/types.h"

namespace ringguard {

// The ringguard element type of a torch dtype; false for dtypes no collective moves. Every dtype here
// goes through the copy collectives; which reductions take it is reduceSupported's answer.
inline bool toDataType(c10::ScalarType t, DataType* out) {
  switch (t) {
    case c10::kFloat:
      *out = DataType::kFloat32;
      return true;
    case c10::kDouble:
      *out = DataType::kFloat64;
      return true;
    case c10::kHalf:
      *out = DataType::kFloat16;
      return true;
    case c10::kBFloat16:
      *out = DataType::kBFloat16;
      return true;
    case c10::kInt:
      *out = DataType::kInt32;
      return true;
    case c10::kLong:
      *out = DataType::kInt64;
      return true;
    case c10::kByte:
      *out = DataType::kUint8;
      return true;
    case c10::kChar:
      *out = DataType::kInt8;
      return true;
    case c10::kShort:
      *out = DataType::kInt16;
      return true;
    case c10::kBool:
      *out = DataType::kBool;
      return true;
    case c10::ScalarType::Float8_e4m3fn:
      *out = DataType::kFloat8E4M3;
      return true;
    case c10::ScalarType::Float8_e5m2:
      *out = DataType::kFloat8E5M2;
      return true;
    case c10::kComplexFloat:
      *out = DataType::kComplex64;
      return true;
    case c10::kComplexDouble:
      *out = DataType::kComplex128;
      return true;
    default:
      return false;
  }
}

// The name c10d gives an op ("SUM", ..., "PREMUL_SUM").
inline const char* c10dReduceOpName(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "this reduce op";
  }
}

// The ringguard op of a c10d op. PREMUL_SUM takes its factor from the NCCLPreMulSumSupplement torch
// attaches (torch.distributed._make_nccl_premul_sum): a double, or a one-element tensor read once on the
// host (a device sync for a CUDA tensor), as ProcessGroupNCCL reads it before ncclRedOpCreatePreMulSum.
// False, with *why, for ops ringguard does not have.
inline bool toReduceOp(const c10d::ReduceOp& op, ReduceOp* out, std::string* why) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      *out = ReduceOp::kSum;
      return true;
    case c10d::ReduceOp::AVG:
      *out = ReduceOp::kAvg;
      return true;
    case c10d::ReduceOp::PRODUCT:
      *out = ReduceOp::kProd;
      return true;
    case c10d::ReduceOp::MIN:
      *out = ReduceOp::kMin;
      return true;
    case c10d::ReduceOp::MAX:
      *out = ReduceOp::kMax;
      return true;
    case c10d::ReduceOp::BAND:
      *out = ReduceOp::kBand;
      return true;
    case c10d::ReduceOp::BOR:
      *out = ReduceOp::kBor;
      return true;
    case c10d::ReduceOp::BXOR:
      *out = ReduceOp::kBxor;
      return true;
    case c10d::ReduceOp::PREMUL_SUM: {
      const auto* s = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      if (s == nullptr) {
        *why = "PREMUL_SUM without a factor (make it with torch.distributed._make_nccl_premul_sum)";
        return false;
      }
      const double factor = s->tensor_factor.defined() ? s->tensor_factor.item<double>() : s->double_factor;
      const Status st = makePremulSum(factor, out);
      if (!st.isOk()) *why = st.message();
      return st.isOk();
    }
    default:
      *why = std::string(c10dReduceOpName(op)) + " is not a ringguard op";
      return false;
  }
}

}  // namespace ringguard
