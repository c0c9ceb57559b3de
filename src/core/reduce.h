#pragma once
// The host reduction of the host executor: a loop over the element operations the device kernels run too
// (core/element_ops.h, chosen by core/reduce_dispatch.h).
#include <cstddef>
#include <cstdint>

#include "core/float16.h"
#include "ringguard/core/types.h"

namespace ringguard {

// dst[i] = a[i] op b[i] for `count` elements; dst may alias a or b; reduceSupported(dtype, op) must hold.
// f16/bf16 are computed in f32 and rounded to nearest even. With `finalStep`, avg divides the sum by
// `nranks` (integer types: truncating division); other ops ignore both arguments. Bool: sum is logical or,
// prod logical and (the max / min of 0 and 1). Complex: element-wise on the (real, imaginary) pairs.
// premul_sum: a is this rank's input and b a partial sum of inputs already multiplied by the factor, so
// dst = a * s + b, except with `firstStep`, where b is the sending rank's input too: dst = a * s + b * s.
// s is premulScalar(dtype, premulFactor(op)); every product and sum is rounded in the compute type.
void reduceHost(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                bool finalStep, int nranks, bool firstStep = false);

// The factor of a premul_sum as the kernels multiply by it: rounded to the element type (f16 and bf16 via
// f32, as ProcessGroupNCCL builds the scalar in the tensor's dtype), then held exactly as a double.
double premulScalar(DataType dtype, double factor);

// avg with a single rank, or any final division applied to a finished sum in place (floating, integer and
// complex dtypes).
void divideHost(DataType dtype, void* data, size_t count, int divisor);

}  // namespace ringguard
