#pragma once
// Host reduction kernels used by the host executor and as the reference for the device kernels.
#include <cstddef>
#include <cstdint>

#include "ringguard/core/float16.h"
#include "ringguard/core/types.h"

namespace ringguard {

// dst[i] = a[i] op b[i] for `count` elements; dst may alias a or b. f16/bf16 are computed in f32 and
// rounded to nearest even. With `finalStep`, avg divides the sum by `nranks` (integer types: truncating
// division); other ops ignore both arguments.
void reduceHost(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                bool finalStep, int nranks);

// avg with a single rank, or any final division applied to a finished sum in place.
void divideHost(DataType dtype, void* data, size_t count, int divisor);

}  // namespace ringguard
