#pragma once
// What a copy collective (broadcast, all-gather, all-to-all, gather, scatter) moves of a tensor: the tensor
// as its own dtype where the engine has it, so that the fingerprint compares dtypes across ranks and
// RINGGUARD_NAN_CHECK scans floating inputs; else as bytes.
#include <ATen/ATen.h>

#include <cstddef>

#include "ringguard/core/types.h"

namespace ringguard {

// The tensor's bytes as a flat uint8 tensor (the same storage when it is contiguous, else a copy: reshape
// alone may give a strided view, of a column say).
at::Tensor bytesOf(const at::Tensor& t);

struct CopyView {
  at::Tensor flat;  // the same storage when the tensor is contiguous, else a copy (inputs only)
  DataType dtype = DataType::kUint8;
  size_t count = 0;
};
CopyView copyViewOf(const at::Tensor& t);

}  // namespace ringguard
