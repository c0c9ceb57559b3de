#include "executor/device/device_executor.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "core/logging.h"
#include "cuda/apply_plan.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/memory_pool.h"
#include "cuda/verify_reduce.h"
#include "executor/device/device_apply_plan.h"

namespace ringguard {

namespace {

constexpr size_t kSlotAlignment = 256;  // slot starts: every vector width, any element type
constexpr size_t kWorkAlignment = 256;

size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

using cuda_detail::DeviceGuard;

#define RINGGUARD_DEVICE_GUARD(device)  \
  DeviceGuard _rg_device_guard(device); \
  RINGGUARD_CUDA_CHECK(_rg_device_guard.error())

// Orders one collective against the caller's stream with two events (see makeFence in the header).
class DeviceFence final : public Executor::Fence {
 public:
  DeviceFence(int device, cudaStream_t comm, cudaStream_t caller)
      : device_(device), comm_(comm), caller_(caller) {}
  ~DeviceFence() override {
    DeviceGuard guard(device_);
    // Safe while still pending: the driver releases an event once its work completes.
    if (ready_ != nullptr) (void)cudaEventDestroy(ready_);
    if (done_ != nullptr) (void)cudaEventDestroy(done_);
  }

  // Caller's thread, at enqueue: marks what the caller's stream holds so far as the collective's input.
  Status init() {
    RINGGUARD_DEVICE_GUARD(device_);
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    RINGGUARD_CUDA_CHECK(cudaEventRecord(ready_, caller_));
    return Status::ok();
  }
  Status beforeCollective() override {
    // The progress thread never joins a user's stream capture: in relaxed mode its CUDA calls cannot
    // invalidate a capture that another thread of the application is making.
    thread_local bool relaxed = false;
    if (!relaxed) {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      RINGGUARD_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      relaxed = true;
    }
    RINGGUARD_DEVICE_GUARD(device_);
    RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(comm_, ready_, 0));
    return Status::ok();
  }
  Status afterCollective() override {
    RINGGUARD_DEVICE_GUARD(device_);
    RINGGUARD_CUDA_CHECK(cudaEventRecord(done_, comm_));
    recorded_ = true;
    return Status::ok();
  }
  Status orderCaller() override {
    if (!recorded_) return Status(StatusCode::kInternal, "fence: orderCaller before afterCollective");
    RINGGUARD_DEVICE_GUARD(device_);
    RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(caller_, done_, 0));
    return Status::ok();
  }

 private:
  const int device_;
  const cudaStream_t comm_;
  const cudaStream_t caller_;
  cudaEvent_t ready_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool recorded_ = false;
};

}  // namespace

DeviceExecutor::DeviceExecutor(DevicePool* pool, PinnedHostPool* pinned, cudaStream_t stream)
    : DeviceExecutor(pool->device(), pool, pinned, stream) {}

DeviceExecutor::DeviceExecutor(int device, DevicePool* pool, PinnedHostPool* pinned, cudaStream_t stream)
    : device_(device), pool_(pool), pinned_(pinned), stream_(stream) {}

DeviceExecutor::~DeviceExecutor() {
  const Status st = freeAll();
  if (!st.isOk()) logWarn(Subsys::kCuda, "DeviceExecutor: releasing its memory failed: {}", st.toString());
}

Status DeviceExecutor::freeAll() {
  RINGGUARD_DEVICE_GUARD(device_);
  Status first = Status::ok();
  auto note = [&first](Status s) {
    if (first.isOk() && !s.isOk()) first = std::move(s);
  };
  note(pool_->free(trailers_, stream_));
  note(pool_->free(slots_, stream_));
  note(pool_->free(slotTrailers_, stream_));
  note(pool_->free(work_, stream_));
  note(pool_->free(scratch_, stream_));
  note(pool_->free(scansDevice_, stream_));
  scansDevice_ = nullptr;
  scansDeviceCap_ = 0;
  trailers_ = nullptr;
  slots_ = nullptr;
  slotTrailers_ = nullptr;
  work_ = nullptr;
  scratch_ = nullptr;
  trailersCap_ = slotsCap_ = slotTrailersCap_ = workCap_ = scratchCap_ = 0;
  // The pinned blocks are reusable as soon as they are freed: only after the stream has passed every use.
  const cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess) {
    note(cuda_detail::cudaErrorStatus(err, "cudaStreamSynchronize(stream_)", __FILE__, __LINE__));
  } else {
    note(pinned_->free(verdicts_));
    if (scansHost_ != nullptr) note(pinned_->free(scansHost_));
    scansHost_ = nullptr;
    scansHostCap_ = 0;
    for (void* p : retiredPinned_) note(pinned_->free(p));
    retiredPinned_.clear();
    verdicts_ = verdictsDevice_ = nullptr;
    verdictsCap_ = 0;
  }
  if (syncEvent_ != nullptr) {
    (void)cudaEventDestroy(syncEvent_);
    syncEvent_ = nullptr;
  }
  return first;
}

Status DeviceExecutor::growDevice(void** ptr, size_t* capacity, size_t bytes) {
  if (bytes <= *capacity) return Status::ok();
  // Stream-ordered: the old block is reused only after the work already enqueued on it.
  RINGGUARD_RETURN_IF_ERROR(pool_->free(*ptr, stream_));
  *ptr = nullptr;
  *capacity = 0;
  RINGGUARD_RETURN_IF_ERROR(pool_->allocate(bytes, stream_, ptr));
  *capacity = bytes;
  return Status::ok();
}

Status DeviceExecutor::growWork(size_t areas, size_t scratchBytes) {
  scratchBytes = std::max(scratchBytes, workScratchBytes_);
  const size_t stride = roundUp(sizeof(WorkArea) + scratchBytes, kWorkAlignment);
  void* p = work_;
  RINGGUARD_RETURN_IF_ERROR(growDevice(&p, &workCap_, areas * stride));
  work_ = static_cast<uint8_t*>(p);
  workStride_ = stride;
  workAreas_ = workCap_ / stride;
  workScratchBytes_ = stride - sizeof(WorkArea);
  return Status::ok();
}

DeviceExecutor::WorkArea* DeviceExecutor::work(size_t area) const {
  return reinterpret_cast<WorkArea*>(work_ + area * workStride_);
}

void* DeviceExecutor::workScratch(size_t area) const { return work_ + area * workStride_ + sizeof(WorkArea); }

Status DeviceExecutor::releaseRetired() {
  Status first = Status::ok();
  for (void* p : retiredPinned_) {
    Status s = pinned_->free(p);
    if (first.isOk() && !s.isOk()) first = std::move(s);
  }
  retiredPinned_.clear();
  return first;
}

Status DeviceExecutor::prepare(size_t items, int slots, size_t slotBytes) {
  if (slots < 0) return Status(StatusCode::kInvalidArgument, "DeviceExecutor::prepare: negative slot count");
  RINGGUARD_DEVICE_GUARD(device_);
  const size_t nslots = static_cast<size_t>(slots);

  void* p = trailers_;
  RINGGUARD_RETURN_IF_ERROR(growDevice(&p, &trailersCap_, items * sizeof(Trailer)));
  trailers_ = static_cast<Trailer*>(p);

  const size_t stride = roundUp(std::max<size_t>(slotBytes, 1), kSlotAlignment);
  if (nslots != 0 && stride > SIZE_MAX / nslots) {
    return Status(StatusCode::kInvalidArgument, "DeviceExecutor::prepare: " + std::to_string(nslots) +
                                                    " slots of " + std::to_string(slotBytes) +
                                                    " bytes overflow size_t");
  }
  p = slots_;
  RINGGUARD_RETURN_IF_ERROR(growDevice(&p, &slotsCap_, nslots * stride));
  slots_ = static_cast<uint8_t*>(p);
  slotStride_ = stride;

  p = slotTrailers_;
  RINGGUARD_RETURN_IF_ERROR(growDevice(&p, &slotTrailersCap_, nslots * sizeof(Trailer)));
  slotTrailers_ = static_cast<Trailer*>(p);

  // One area per slot (its payload and dst are at most a slot's size) and one for sealFirst.
  const size_t scratch = crc32DeviceScratchBytes(stride);
  if (work_ == nullptr || workAreas_ < nslots + 1 || workScratchBytes_ < scratch) {
    RINGGUARD_RETURN_IF_ERROR(growWork(nslots + 1, scratch));
  }

  if (items > verdictsCap_) {
    // The old block may still be written by work of an earlier collective that failed: free it only once
    // the stream has passed that (syncTest, sync, destructor).
    if (verdicts_ != nullptr) retiredPinned_.push_back(verdicts_);
    verdicts_ = verdictsDevice_ = nullptr;
    verdictsCap_ = 0;
    void* host = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pinned_->allocate(items, &host));
    // The kernels write the verdicts through the device's view of the pinned block. Under unified
    // addressing (every 64-bit platform we support) every cudaHostAlloc block is mapped and this is the
    // host pointer itself.
    void* dev = nullptr;
    cudaError_t err = cudaHostGetDevicePointer(&dev, host, 0);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      int unified = 0;
      if (cudaDeviceGetAttribute(&unified, cudaDevAttrUnifiedAddressing, device_) == cudaSuccess && unified) {
        dev = host;
        err = cudaSuccess;
      }
    }
    if (err != cudaSuccess) {
      (void)pinned_->free(host);
      return cuda_detail::cudaErrorStatus(err, "cudaHostGetDevicePointer(&dev, host, 0)", __FILE__, __LINE__);
    }
    verdicts_ = static_cast<uint8_t*>(host);
    verdictsDevice_ = static_cast<uint8_t*>(dev);
    verdictsCap_ = items;
  }

  // As HostExecutor::prepare: zeroed trailers, verdicts kOk (0).
  if (items != 0) {
    RINGGUARD_CUDA_CHECK(cudaMemsetAsync(trailers_, 0, items * sizeof(Trailer), stream_));
    std::memset(verdicts_, 0, items);
  }
  if (nslots != 0) RINGGUARD_CUDA_CHECK(cudaMemsetAsync(slotTrailers_, 0, nslots * sizeof(Trailer), stream_));
  items_ = items;
  numSlots_ = nslots;
  ++enqueued_;
  return Status::ok();
}

Status DeviceExecutor::sealFirst(size_t item, const void* data, const SliceId& id) {
  if (item >= items_)
    return Status(StatusCode::kInvalidArgument, "DeviceExecutor::sealFirst: item out of range");
  RINGGUARD_DEVICE_GUARD(device_);
  const size_t scratch = crc32DeviceScratchBytes(id.payloadBytes);
  if (scratch > workScratchBytes_) RINGGUARD_RETURN_IF_ERROR(growWork(numSlots_ + 1, scratch));
  const size_t area = numSlots_;
  WorkArea* w = work(area);
  RINGGUARD_RETURN_IF_ERROR(
      crc32Device(data, id.payloadBytes, &w->payloadCrc, workScratch(area), workScratchBytes_, stream_));
  RINGGUARD_RETURN_IF_ERROR(sealTrailerDevice(id, &w->payloadCrc, nullptr, trailers_ + item, stream_));
  ++enqueued_;
  return Status::ok();
}

Status DeviceExecutor::retag(size_t item, uint16_t attempt) {
  if (item >= items_) return Status(StatusCode::kInvalidArgument, "DeviceExecutor::retag: item out of range");
  RINGGUARD_DEVICE_GUARD(device_);
  RINGGUARD_RETURN_IF_ERROR(retagTrailerDevice(trailers_ + item, attempt, stream_));
  ++enqueued_;
  return Status::ok();
}

Status DeviceExecutor::corruptReceived(int index, void* payload, size_t bytes, const CorruptionPlan& plan) {
  if (index < 0 || size_t(index) >= numSlots_ || (payload == nullptr && bytes > slotStride_) ||
      !corruptionPlanFits(plan, bytes)) {
    return Status(StatusCode::kInvalidArgument, "DeviceExecutor::corruptReceived: slot " +
                                                    std::to_string(index) + " / " + std::to_string(bytes) +
                                                    " bytes out of range, or a plan that does not fit");
  }
  if (!plan.damages()) return Status::ok();
  RINGGUARD_DEVICE_GUARD(device_);
  RINGGUARD_RETURN_IF_ERROR(
      corruptDevice(plan, payload != nullptr ? payload : slot(index), bytes, slotTrailer(index), stream_));
  ++enqueued_;
  return Status::ok();
}

Status DeviceExecutor::verifyAndApply(const ApplyTask& task, int index, size_t item, size_t nextItem) {
  if (!isValid(task.dtype))
    return Status(StatusCode::kInvalidArgument, "DeviceExecutor::verifyAndApply: invalid dtype");
  if (task.inPlace && task.reduce) {
    return Status(StatusCode::kInvalidArgument,
                  "DeviceExecutor::verifyAndApply: an in-place receive cannot be a reduction");
  }
  const size_t bytes = task.count * dataTypeSize(task.dtype);
  // In place the payload lies in dst, not in the slot: only the work area's CRC scratch bounds it.
  const bool fitsSlot = task.inPlace || (task.count <= slotStride_ && bytes <= slotStride_);
  if (index < 0 || size_t(index) >= numSlots_ || item >= items_ || (task.forwarded && nextItem >= items_) ||
      !fitsSlot) {
    return Status(StatusCode::kInvalidArgument,
                  "DeviceExecutor::verifyAndApply: slot " + std::to_string(index) + ", item " +
                      std::to_string(item) + ", next item " + std::to_string(nextItem) + " or " +
                      std::to_string(bytes) + " bytes out of range (" + std::to_string(numSlots_) +
                      " slots of " + std::to_string(slotStride_) + " bytes, " + std::to_string(items_) +
                      " items)");
  }
  RINGGUARD_DEVICE_GUARD(device_);
  if (task.inPlace) {
    const size_t need = crc32DeviceScratchBytes(bytes);
    if (need > workScratchBytes_) RINGGUARD_RETURN_IF_ERROR(growWork(numSlots_ + 1, need));
  }
  WorkArea* w = work(size_t(index));
  void* scratch = workScratch(size_t(index));
  ApplySlot memory;
  memory.trailer = slotTrailer(index);
  memory.payload = slot(index);
  memory.payloadCrc = &w->payloadCrc;
  memory.verdictByte = verdictsDevice_ + item;
  memory.verdictWord = &w->verdict;
  memory.nextTrailer = task.forwarded ? trailers_ + nextItem : nullptr;
  const DeviceApplyPlan plan = planDeviceApply(task, memory);

  RINGGUARD_RETURN_IF_ERROR(
      crc32Device(plan.received, plan.bytes, &w->payloadCrc, scratch, workScratchBytes_, stream_));
  switch (plan.launch) {
    case ApplyLaunch::kVerifyInPlace:
      RINGGUARD_RETURN_IF_ERROR(verifyInPlaceDevice(plan.verify, stream_));
      break;
    case ApplyLaunch::kApply:
      RINGGUARD_RETURN_IF_ERROR(verifyApplyDevice(plan.apply, stream_));
      break;
    case ApplyLaunch::kApplyCrc:
      RINGGUARD_RETURN_IF_ERROR(
          verifyApplyCrcDevice(plan.apply, &w->dstCrc, scratch, workScratchBytes_, stream_));
      break;
    case ApplyLaunch::kCopyCrc:
      RINGGUARD_RETURN_IF_ERROR(
          verifyCopyCrcDevice(plan.apply, &w->dstCrc, scratch, workScratchBytes_, stream_));
      break;
  }
  if (plan.sealsNext) {
    RINGGUARD_RETURN_IF_ERROR(
        sealTrailerDevice(task.next, &w->dstCrc, &w->verdict, memory.nextTrailer, stream_));
  }
  ++enqueued_;
  return Status::ok();
}

Status DeviceExecutor::waitFor(void* streamEvent) {
  if (streamEvent == nullptr) return Status::ok();
  RINGGUARD_DEVICE_GUARD(device_);
  RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(streamEvent), 0));
  ++enqueued_;
  return Status::ok();
}

Status DeviceExecutor::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status::ok();
  RINGGUARD_DEVICE_GUARD(device_);
  RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  ++enqueued_;
  return Status::ok();
}

Status DeviceExecutor::scratch(size_t bytes, void** out) {
  *out = nullptr;
  RINGGUARD_DEVICE_GUARD(device_);
  RINGGUARD_RETURN_IF_ERROR(growDevice(&scratch_, &scratchCap_, bytes));
  *out = scratch_;
  return Status::ok();
}

Status DeviceExecutor::scanNonFinite(const std::vector<ScanSpan>& spans, DataType dtype) {
  RINGGUARD_DEVICE_GUARD(device_);
  scans_ = 0;
  const size_t bytes = spans.size() * sizeof(NanScanResult);
  RINGGUARD_RETURN_IF_ERROR(growDevice(&scansDevice_, &scansDeviceCap_, bytes));
  if (spans.size() > scansHostCap_) {
    // An earlier scan's copy may still be in flight (a failed collective): retire the block, as verdicts.
    if (scansHost_ != nullptr) retiredPinned_.push_back(scansHost_);
    scansHost_ = nullptr;
    scansHostCap_ = 0;
    RINGGUARD_RETURN_IF_ERROR(pinned_->allocate(bytes, &scansHost_));
    scansHostCap_ = spans.size();
  }
  auto* dev = static_cast<NanScanResult*>(scansDevice_);
  for (size_t i = 0; i < spans.size(); ++i) {
    RINGGUARD_RETURN_IF_ERROR(nanScanDevice(spans[i].data, spans[i].count, dtype, dev + i, stream_));
  }
  if (!spans.empty()) {
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(scansHost_, scansDevice_, bytes, cudaMemcpyDeviceToHost, stream_));
  }
  scans_ = spans.size();
  ++enqueued_;
  return Status::ok();
}

std::vector<NonFiniteCount> DeviceExecutor::nonFiniteCounts() const {
  // Read after syncTest reported completion (the copy above is on the stream).
  std::vector<NonFiniteCount> out(scans_);
  const auto* host = static_cast<const volatile NanScanResult*>(scansHost_);
  for (size_t i = 0; i < scans_; ++i) {
    out[i].count = host[i].count;
    out[i].firstIndex = host[i].firstIndex;
  }
  return out;
}

Status DeviceExecutor::syncTest(bool* done) {
  *done = false;
  RINGGUARD_DEVICE_GUARD(device_);
  if (syncEvent_ == nullptr)
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&syncEvent_, cudaEventDisableTiming));
  if (!syncPending_) {
    RINGGUARD_CUDA_CHECK(cudaEventRecord(syncEvent_, stream_));
    recordedAt_ = enqueued_;
    syncPending_ = true;
  }
  const cudaError_t err = cudaEventQuery(syncEvent_);
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: keep it from surfacing at the next launch check
    return Status::ok();
  }
  syncPending_ = false;
  RINGGUARD_CUDA_CHECK(err);
  if (recordedAt_ != enqueued_) return Status::ok();  // work enqueued since: the next call records again
  *done = true;
  return releaseRetired();
}

Status DeviceExecutor::sync() {
  RINGGUARD_DEVICE_GUARD(device_);
  RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return releaseRetired();
}

SliceCheck DeviceExecutor::verdict(size_t item) const {
  RINGGUARD_ENFORCE(item < items_, "DeviceExecutor::verdict: item " + std::to_string(item) + " of " +
                                       std::to_string(items_));
  // Written by the device through the mapped pointer; read after syncTest / sync reported completion.
  return static_cast<SliceCheck>(static_cast<const volatile uint8_t*>(verdicts_)[item]);
}

// The staged transport creates events and copies on the executor's stream from the progress thread; with
// ranks on GPU 1.. a thread left on GPU 0 gets cudaErrorInvalidResourceHandle.
void DeviceExecutor::bindThread() { (void)cudaSetDevice(device_); }

Status DeviceExecutor::makeFence(void* callerStream, std::unique_ptr<Fence>* out) {
  out->reset();
  RINGGUARD_DEVICE_GUARD(device_);
  cudaStream_t caller = static_cast<cudaStream_t>(callerStream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  RINGGUARD_CUDA_CHECK(cudaStreamIsCapturing(caller, &capture));
  if (capture != cudaStreamCaptureStatusNone) {
    return Status(
        StatusCode::kInvalidArgument,
        "the caller's stream is being captured into a CUDA graph, which ringguard does not support");
  }
  auto fence = std::make_unique<DeviceFence>(device_, stream_, caller);
  RINGGUARD_RETURN_IF_ERROR(fence->init());
  *out = std::move(fence);
  return Status::ok();
}

}  // namespace ringguard
