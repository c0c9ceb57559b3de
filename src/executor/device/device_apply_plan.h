#pragma once
// The device executor's host planning: which verify + apply launch of the CUDA layer an ApplyTask takes, and
// with which arguments (DeviceExecutor::verifyAndApply enqueues what this plans). CUDA-free and compiled into
// ringguard_cuda_plan with the launchers' own planning, so tests/unit/test_apply_plan.cc checks it on CI
// without a GPU. Here rather than in src/cuda/ because it reads the Executor's ApplyTask: the kernels' layer
// knows nothing of executors.
#include <cstddef>
#include <cstdint>

#include "core/trailer.h"
#include "cuda/verify_reduce.h"
#include "executor/executor.h"

namespace ringguard {

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
