#include "executor/device/device_apply_plan.h"

#include "ringguard/core/types.h"

namespace ringguard {

DeviceApplyPlan planDeviceApply(const ApplyTask& task, const ApplySlot& slot) {
  DeviceApplyPlan plan;
  plan.bytes = task.count * dataTypeSize(task.dtype);
  if (task.inPlace) {
    // The CRC of dst where it lies is both the one to check and, verified or not, the one of what is sent
    // on: nothing is copied, and the verify kernel seals the outgoing trailer itself.
    plan.received = task.dst;
    plan.launch = ApplyLaunch::kVerifyInPlace;
    DeviceVerify& v = plan.verify;
    v.slotTrailer = slot.trailer;
    v.payloadCrc = slot.payloadCrc;
    v.expected = task.expected;
    v.verdictByte = slot.verdictByte;
    v.verdictWord = slot.verdictWord;
    v.next = task.next;
    v.sealOut = task.forwarded ? slot.nextTrailer : nullptr;
    return plan;
  }
  plan.received = slot.payload;
  DeviceApply& a = plan.apply;
  a.slotTrailer = slot.trailer;
  a.payloadCrc = slot.payloadCrc;
  a.expected = task.expected;
  a.verdictByte = slot.verdictByte;
  a.verdictWord = slot.verdictWord;
  a.dst = task.dst;
  a.local = task.local;
  a.slot = slot.payload;
  a.count = task.count;
  a.dtype = task.dtype;
  a.op = task.op;
  a.reduce = task.reduce;
  a.finalStep = task.finalStep;
  a.nranks = task.nranks;
  // Forwarded: the CRC the outgoing trailer carries. For a reduction, that of what dst really holds
  // afterwards, in the same pass where the pointers allow; for a copy, the verified payload CRC after kOk
  // (dst holds exactly those bytes) and the CRC of dst only after a bad verdict. Then the trailer, poisoned
  // unless the slice was applied.
  if (!task.forwarded) {
    plan.launch = ApplyLaunch::kApply;
  } else {
    plan.launch = task.reduce ? ApplyLaunch::kApplyCrc : ApplyLaunch::kCopyCrc;
    plan.sealsNext = true;
  }
  return plan;
}

}  // namespace ringguard
