#include "cuda/apply_plan.h"

#include <algorithm>
#include <string>

#include "core/reduce.h"
#include "core/reduce_dispatch.h"

namespace ringguard {

ApplyParams planVectors(void* dst, const void* local, const void* slot, size_t count, size_t elemBytes,
                        element_ops::OpArg arg) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t l = reinterpret_cast<uintptr_t>(local);
  const uintptr_t s = reinterpret_cast<uintptr_t>(slot);
  // 2-byte vectors would only serve u8, and only in that odd case: not worth an instantiation.
  size_t v = kMaxVectorBytes;
  while (v >= 4 && v > elemBytes && ((d % v) != (s % v) || (local != nullptr && (d % v) != (l % v)))) v /= 2;
  if (v < 4 || v <= elemBytes) v = elemBytes;
  ApplyParams p{};
  p.dst = dst;
  p.local = local;
  p.slot = slot;
  p.count = count;
  p.vecBytes = static_cast<int>(v);
  p.arg = arg;
  p.head = std::min<uint64_t>(((v - d % v) % v) / elemBytes, count);
  p.vectors = (count - p.head) / (v / elemBytes);
  return p;
}

ApplyParams planApply(const DeviceApply& a) {
  const element_ops::OpArg arg{a.nranks, premulScalar(a.dtype, premulFactor(a.op))};
  if (!a.reduce)
    return planVectors(a.dst, nullptr, a.slot, a.count * dataTypeSize(a.dtype), 1, arg);  // bytes
  const element_ops::ReduceLayout l = element_ops::reduceLayout(a.dtype, a.op);
  return planVectors(a.dst, a.local, a.slot, a.count * l.perElement, l.elemBytes, arg);
}

ApplyParams planReduce(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t count,
                       int nranks) {
  const element_ops::ReduceLayout l = element_ops::reduceLayout(dtype, op);
  return planVectors(dst, a, b, count * l.perElement, l.elemBytes,
                     element_ops::OpArg{nranks, premulScalar(dtype, premulFactor(op))});
}

Status checkOperands(const char* what, DataType dtype, ReduceOp op, bool reduce, const void* dst,
                     const void* local, const void* slot, size_t count, int nranks) {
  if (!isValid(dtype)) return Status(StatusCode::kInvalidArgument, std::string(what) + ": invalid dtype");
  if (reduce && !isValid(op)) return Status(StatusCode::kInvalidArgument, std::string(what) + ": invalid op");
  if (reduce && !reduceSupported(dtype, op)) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": op " + reduceOpName(op) +
                                                    " does not reduce dtype " + dataTypeName(dtype));
  }
  if (reduce && nranks < 1) {
    return Status(StatusCode::kInvalidArgument,
                  std::string(what) + ": nranks must be >= 1, got " + std::to_string(nranks));
  }
  const size_t elemBytes = dataTypeSize(dtype);
  if (count > (~size_t(0)) / elemBytes) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": element count overflows");
  }
  if (count != 0 && (dst == nullptr || slot == nullptr || (reduce && local == nullptr))) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": null buffer");
  }
  // A reduction reads its layout's elements (complex: one part); a copy moves whole elements.
  const size_t alignBytes = reduce ? element_ops::reduceLayout(dtype, op).elemBytes : elemBytes;
  const auto misaligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % alignBytes != 0; };
  if (misaligned(dst) || misaligned(slot) || (reduce && misaligned(local))) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": buffers must be aligned to their " +
                                                    "element size (" + std::to_string(alignBytes) +
                                                    " bytes)");
  }
  return Status::ok();
}

Status checkDeviceApply(const char* what, const DeviceApply& a) {
  if (a.slotTrailer == nullptr || a.payloadCrc == nullptr) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + ": null trailer or payload CRC pointer");
  }
  return checkOperands(what, a.dtype, a.op, a.reduce, a.dst, a.local, a.slot, a.count, a.nranks);
}

bool verifyApplyCrcFuses(const DeviceApply& a) { return planApply(a).vecBytes == kMaxVectorBytes; }

}  // namespace ringguard
