#pragma once
// Private to the CUDA layer: the host planning of the verify + apply launches, CUDA-free and compiled into
// a host target (ringguard_cuda_plan) so that tests/unit/test_apply_plan.cc checks it on CI without a GPU.
// Everything the launchers decide before a kernel runs is here: the argument checks, and the vector width,
// head and vector count of the data path (the kernels in src/cuda/verify_apply.cu run what this plans).
// Which launcher an executor's ApplyTask takes is the executor's (executor/device/device_apply_plan.h).
#include <cstddef>
#include <cstdint>

#include "core/element_ops.h"
#include "core/trailer.h"
#include "cuda/verify_reduce.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

// The widest vector of the data path; the fused apply + CRC kernel runs only at this width (one CRC piece).
constexpr int kMaxVectorBytes = 16;

// What one launch of the data path moves. Elements [0, head) and [head + vectors * (vecBytes / elem),
// count) are single elements; in between lie `vectors` vectors of vecBytes, aligned in dst, local and slot
// alike. vecBytes equal to the element size means single elements throughout (head 0, vectors = count).
struct ApplyParams {
  void* dst;
  const void* local;
  const void* slot;
  uint64_t count;
  uint64_t head;
  uint64_t vectors;
  int vecBytes;
  element_ops::OpArg arg;
};

// Vector width and head / vector count for `count` elements of `elemBytes` at dst / local / slot (local
// null for a copy): the widest of 16, 8 and 4 bytes at which the three pointers are equally misaligned,
// else single elements. All three pointers are element aligned.
ApplyParams planVectors(void* dst, const void* local, const void* slot, size_t count, size_t elemBytes,
                        element_ops::OpArg arg);

// The data path of `a` (checked with checkDeviceApply): a reduction on its operation's elements
// (reduceLayout), a copy as bytes.
ApplyParams planApply(const DeviceApply& a);
// The data path of reduceDevice.
ApplyParams planReduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                       int nranks);

// Nothing is forwarded into step 0: its slot holds the sender's input (premul_sum scales it too).
inline bool firstStepOf(const DeviceApply& a) { return a.expected.step == 0; }

// Argument checks of the launchers; `what` names the caller in the message.
Status checkOperands(const char* what, DataType dtype, ReduceOp op, bool reduce, const void* dst,
                     const void* local, const void* slot, size_t count, int nranks);
Status checkDeviceApply(const char* what, const DeviceApply& a);

}  // namespace ringguard
