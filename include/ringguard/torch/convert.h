#pragma once
// torch <-> ringguard type mapping, shared by the c10d backend and the GradientAggregator.
#include <c10/core/ScalarType.h>

#include "ringguard/core/types.h"

namespace ringguard {

// The ringguard element type of a torch dtype; false for dtypes the verified reductions do not support.
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
    default:
      return false;
  }
}

}  // namespace ringguard
