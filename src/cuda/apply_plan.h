#pragma once
// Private to the CUDA layer: the host planning of the verify + apply launches, CUDA-free and compiled into
// a host target (ringguard_cuda_plan) so that tests/unit/test_apply_plan.cc checks it on CI without a GPU.
// Everything the launchers decide before a kernel runs is here: which launcher an ApplyTask takes and with
// which arguments (DeviceExecutor::verifyAndApply), the argument checks, and the vector width, head and
// vector count of the data path (the kernels in src/cuda/verify_apply.cu run what this plans).
#include <cstddef>
#include <cstdint>

#include "algorithms/executor.h"
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

// ---- DeviceExecutor::verifyAndApply -----------------------------------------------------------------------

// The executor's memory for one received slot.
struct ApplySlot {
  const Trailer* trailer = nullptr;  // device: the trailer that arrived
  void* payload = nullptr;           // device: the slot's payload (unused in place)
  uint32_t* payloadCrc = nullptr;    // device word: the CRC of what arrived
  uint8_t* verdictByte = nullptr;    // mapped pinned byte of the item's verdict
  uint32_t* verdictWord = nullptr;   // device word: the verdict for later kernels
  Trailer* nextTrailer = nullptr;    // device: the forwarded slice's trailer (null unless forwarded)
};

// What DeviceExecutor::verifyAndApply enqueues for a task, in order:
//   1. crc32Device(received, bytes) into slot.payloadCrc: the CRC of what arrived, where it lies;
//   2. the launch:
//        kVerifyInPlace  verifyInPlaceDevice(verify): received in place into dst, nothing applied; the
//                        verdict and, when forwarded, the outgoing trailer (one tiny kernel);
//        kApply          verifyApplyDevice(apply): not forwarded;
//        kApplyCrc       verifyApplyCrcDevice(apply): a forwarded reduction, with the CRC of dst afterwards;
//        kCopyCrc        verifyCopyCrcDevice(apply): a forwarded copy, with the CRC it carries on;
//   3. when sealsNext, sealTrailerDevice(task.next, that CRC, the verdict word, slot.nextTrailer).
enum class ApplyLaunch { kVerifyInPlace, kApply, kApplyCrc, kCopyCrc };

struct DeviceApplyPlan {
  const void* received = nullptr;  // device: where the payload lies (dst in place, else the slot)
  size_t bytes = 0;                // of the payload
  ApplyLaunch launch = ApplyLaunch::kApply;
  DeviceApply apply;    // all but kVerifyInPlace
  DeviceVerify verify;  // kVerifyInPlace
  bool sealsNext = false;
};

// The plan of `task` over `slot` (the executor checked the task's ranges).
DeviceApplyPlan planDeviceApply(const ApplyTask& task, const ApplySlot& slot);

}  // namespace ringguard
