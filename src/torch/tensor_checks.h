#pragma once
// The checks every override of the c10d backend makes on the tensors it is given, and the errors they
// raise: each names the op, the dtype and the device, so a user sees what was refused and why.
#include <ATen/ATen.h>

#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "ringguard/core/types.h"

namespace ringguard {

// "<dtype> tensor on <device>", the way every error names a tensor.
std::string describe(const at::Tensor& t);

// Throws the error of an op (or a form of it) the backend does not support, naming `what` and listing
// what it supports.
[[noreturn]] void unsupported(const char* op, const std::string& what);

// `describe` of the first tensor, or "no tensors".
std::string firstTensor(const std::vector<at::Tensor>& t);

// The first tensor, or an undefined one.
at::Tensor firstOf(const std::vector<at::Tensor>& tensors);

// The ringguard op of a reduction of `t` (dtype `dt`), or the error naming the collective, the op, the dtype
// and the device (toReduceOp, reduceSupported: include/ringguard/torch/convert.h, core/types.h).
ReduceOp reduceOpFor(const char* name, const c10d::ReduceOp& rop, const at::Tensor& t, DataType dt);

// One dense tensor, of any strides (torch/strided.h), on the CPU or a CUDA device.
void checkTensor(const char* op, const at::Tensor& t);

// Exactly one tensor, as checkTensor wants it.
void checkSingle(const char* op, const std::vector<at::Tensor>& tensors);

}  // namespace ringguard
