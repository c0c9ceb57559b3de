#pragma once
// The torch adapter of the guard: a tensor as a GuardBuffer (its storage bytes, dtype, host or device).
#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/guard/backend.h"

namespace ringguard {

// kInvalidArgument, naming the tensor, when it cannot be snapshotted or scanned as one byte range: not
// dense, not contiguous (a view with gaps or overlapping strides), a dtype without a ringguard type, or
// memory that is neither CPU nor CUDA. Integer and bool tensors are snapshotted and scan clean; complex ones
// are scanned by part; float8 ones as bytes (e4m3fn's only non-finite value is its NaN).
Status tensorBuffer(const at::Tensor& t, const std::string& name, GuardBuffer* out);

// The same without the name (a GuardBuffer copies it): the replica check's listing, which reads hundreds of
// tensors every step and keeps each name where it already is.
struct TensorRange {
  void* data = nullptr;
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  MemoryKind kind = MemoryKind::kHost;
};
Status tensorRange(const at::Tensor& t, const std::string& name, TensorRange* out);

// tensorBuffer of each (name, tensor) pair, in order, appended to `out`; the first error stops it.
Status tensorBuffers(const std::vector<std::pair<std::string, at::Tensor>>& list,
                     std::vector<GuardBuffer>* out);

}  // namespace ringguard
