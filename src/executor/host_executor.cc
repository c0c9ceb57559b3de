#include "executor/host_executor.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "core/copy_bytes.h"
#include "core/reduce.h"
#include "core/stream_copy.h"
#include "ringguard/core/crc32.h"

namespace ringguard {

namespace {
// Small enough that the block just reduced is still in L1/L2 when it is checksummed.
constexpr size_t kBlockBytes = 32 * 1024;

Status outOfMemory(const char* what, size_t bytes) {
  return Status(StatusCode::kInternal,
                std::string("HostExecutor: cannot allocate ") + std::to_string(bytes) + " bytes for " + what);
}

}  // namespace

// Slots keep the size of the largest collective so far (no reallocation per call) but never more: the
// plan asks for the largest slice this collective has, not for Options::sliceBytes.
Status HostExecutor::prepare(size_t items, int slots, size_t slotBytes) {
  try {
    trailers_.assign(items, Trailer{});
    verdicts_.assign(items, SliceCheck::kOk);
    slots_.resize(size_t(slots));
    for (auto& s : slots_) {
      if (s.size() < slotBytes) s.resize(slotBytes);
    }
    slotTrailers_.assign(size_t(slots), Trailer{});
  } catch (const std::bad_alloc&) {
    return outOfMemory("receive slots and trailers", size_t(slots) * slotBytes + items * sizeof(Trailer));
  } catch (const std::length_error&) {
    return outOfMemory("receive slots and trailers", size_t(slots) * slotBytes + items * sizeof(Trailer));
  }
  return Status::ok();
}

Status HostExecutor::sealFirst(size_t item, const void* data, const SliceId& id) {
  trailers_[item] = makeTrailer(id, crc32(data, id.payloadBytes), 0);
  return Status::ok();
}

Status HostExecutor::retag(size_t item, uint16_t attempt) {
  trailers_[item].attempt = attempt;
  sealTrailer(&trailers_[item]);
  return Status::ok();
}

Status HostExecutor::copy(void* dst, const void* src, size_t bytes) {
  copyBytes(dst, src, bytes);
  return Status::ok();
}

Status HostExecutor::copyCold(void* dst, const void* src, size_t bytes) {
  streamCopy(dst, src, bytes);
  return Status::ok();
}

Status HostExecutor::scratch(size_t bytes, void** out) {
  try {
    if (scratch_.size() < bytes) scratch_.resize(bytes);
  } catch (const std::bad_alloc&) {
    return outOfMemory("scratch", bytes);
  } catch (const std::length_error&) {
    return outOfMemory("scratch", bytes);
  }
  *out = scratch_.data();
  return Status::ok();
}

Status HostExecutor::corruptReceived(int index, void* payload, size_t bytes, const CorruptionPlan& plan) {
  if (index < 0 || size_t(index) >= slots_.size() || !corruptionPlanFits(plan, bytes) ||
      (payload == nullptr && bytes > slots_[size_t(index)].size())) {
    return Status(StatusCode::kInvalidArgument, "HostExecutor::corruptReceived: slot " +
                                                    std::to_string(index) + " / " + std::to_string(bytes) +
                                                    " bytes out of range, or a plan that does not fit");
  }
  applyCorruptionPlan(plan, payload ? static_cast<uint8_t*>(payload) : slots_[size_t(index)].data(),
                      &slotTrailers_[size_t(index)]);
  return Status::ok();
}

Status HostExecutor::verifyAndApply(const ApplyTask& task, int index, size_t item, size_t nextItem) {
  const size_t esize = dataTypeSize(task.dtype);
  const size_t bytes = task.count * esize;
  // In place: the payload already lies in dst (verified there, never copied).
  const uint8_t* slot = task.inPlace ? static_cast<const uint8_t*>(task.dst) : slots_[index].data();
  const Trailer& trailer = slotTrailers_[index];
  // The trailer alone first: a damaged or stale trailer is rejected without reading the payload.
  SliceCheck check = checkTrailer(trailer, task.expected);
  if (check == SliceCheck::kOk) check = checkSlice(trailer, task.expected, crc32(slot, bytes));
  verdicts_[item] = check;

  auto* dst = static_cast<uint8_t*>(task.dst);
  uint32_t outCrc = 0;
  if (check != SliceCheck::kOk) {
    // Not applied: dst keeps what it had and goes on poisoned, with the CRC of what is really sent.
    if (task.forwarded) trailers_[nextItem] = makeTrailer(task.next, crc32(dst, bytes), kTrailerPoisoned);
    return Status::ok();
  }
  if (!task.reduce) {
    if (!task.inPlace) copyBytes(dst, slot, bytes);
    outCrc = trailer.payloadCrc;  // the bytes just verified, unchanged
  } else {
    const size_t blockElems = std::max<size_t>(1, kBlockBytes / esize);
    auto* local = static_cast<const uint8_t*>(task.local);
    for (size_t i = 0; i < task.count; i += blockElems) {
      size_t n = std::min(blockElems, task.count - i);
      size_t off = i * esize;
      // Nothing is forwarded into step 0: its slot holds the sender's input (premul_sum scales it too).
      reduceHost(task.dtype, task.op, dst + off, local + off, slot + off, n, task.finalStep, task.nranks,
                 task.expected.step == 0);
      if (task.forwarded) outCrc = crc32(dst + off, n * esize, outCrc);
    }
  }
  if (task.forwarded) trailers_[nextItem] = makeTrailer(task.next, outCrc, 0);
  return Status::ok();
}

}  // namespace ringguard
