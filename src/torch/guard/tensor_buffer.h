#pragma once
// The torch adapter of the guard: a tensor as a GuardBuffer (its storage bytes, dtype, host or device).
#include <ATen/ATen.h>

#include <string>

#include "ringguard/core/status.h"
#include "ringguard/guard/backend.h"

namespace ringguard {

// kInvalidArgument, naming the tensor, when it cannot be snapshotted or scanned as one byte range: not
// contiguous (a view with gaps or overlapping strides), a dtype without a guard type (complex, int16), or
// memory that is neither CPU nor CUDA. bool / int8 / uint8 tensors are snapshotted as bytes and scan clean.
Status tensorBuffer(const at::Tensor& t, const std::string& name, GuardBuffer* out);

}  // namespace ringguard
