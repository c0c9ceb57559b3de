// GuardBackend over device memory: snapshots on a side stream ordered by events, scans into pool slots,
// one verdict summary in mapped pinned memory per batch (docs/GUARD.md, "The device path").
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/element_bits.h"
#include "core/float16.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/memory_pool.h"
#include "cuda/snapshot.h"
#include "guard/device/injected_value.h"
#include "ringguard/guard/device_backend.h"

namespace ringguard {
namespace {

// Scan result slots per chunk: a step of a few hundred guarded tensors fits one chunk (one verdict
// launch); more take further chunks, summarised by accumulating launches.
constexpr size_t kSlotsPerChunk = 4096;
// Pinned bytes for the verdict and the rare-path reads (one element, one CRC).
constexpr size_t kPinnedBytes = 4096;

class DeviceGuardBackend final : public GuardBackend {
 public:
  ~DeviceGuardBackend() override {
    // Best effort: the chunks go back to the pool once the side stream passes this point.
    if (side_ != nullptr) {
      for (void* c : chunks_) (void)pool_->free(c, side_);
      if (verdictScratch_ != nullptr) (void)pool_->free(verdictScratch_, side_);
      (void)cudaStreamSynchronize(side_);
      (void)cudaStreamDestroy(side_);
    }
    if (before_ != nullptr) (void)cudaEventDestroy(before_);
    if (after_ != nullptr) (void)cudaEventDestroy(after_);
    if (verdictEvent_ != nullptr) (void)cudaEventDestroy(verdictEvent_);
    if (pinnedHost_ != nullptr) (void)pinned_.free(pinnedHost_);
  }

  Status init(const DeviceGuardBackendOptions& options) {
    device_ = options.device;
    batchSnapshots_ = options.batchSnapshots;
    // Streams and events belong to the current device: switch for the set-up only, then switch back.
    int previous = 0;
    RINGGUARD_CUDA_CHECK(cudaGetDevice(&previous));
    RINGGUARD_CUDA_CHECK(cudaSetDevice(device_));
    const Status st = initOnDevice(options);
    RINGGUARD_CUDA_CHECK(cudaSetDevice(previous));
    return st;
  }

  Status initOnDevice(const DeviceGuardBackendOptions& options) {
    if (options.pool != nullptr) {
      pool_ = options.pool;
    } else {
      RINGGUARD_RETURN_IF_ERROR(DevicePool::create(device_, &ownedPool_));
      pool_ = ownedPool_.get();
    }
    RINGGUARD_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&before_, cudaEventDisableTiming));
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&after_, cudaEventDisableTiming));
    RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&verdictEvent_, cudaEventDisableTiming));
    RINGGUARD_RETURN_IF_ERROR(pinned_.allocate(kPinnedBytes, &pinnedHost_));
    void* mapped = nullptr;
    RINGGUARD_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, pinnedHost_, 0));
    verdictHost_ = static_cast<GuardVerdict*>(pinnedHost_);
    verdictDevice_ = static_cast<GuardVerdict*>(mapped);
    scratchHost_ = static_cast<unsigned char*>(pinnedHost_) + 64;
    void* scratch = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pool_->allocate(sizeof(GuardVerdict), side_, &scratch));
    verdictScratch_ = static_cast<GuardVerdict*>(scratch);
    return addChunk();  // synchronises the side stream: both allocations are usable from any stream
  }

  MemoryKind kind() const override { return MemoryKind::kDevice; }

  Status snapshot(const GuardBuffer& buffer, void* stream, SnapshotHandle* out) override {
    out->bytes = buffer.bytes;
    out->data = nullptr;
    if (buffer.bytes == 0) return Status::ok();
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    // The side stream copies the state as the caller's stream left it; the caller's stream (the op) waits
    // for the copy before it writes the state. Events only: nothing here waits on the host.
    RINGGUARD_CUDA_CHECK(cudaEventRecord(before_, s));
    RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(side_, before_, 0));
    RINGGUARD_RETURN_IF_ERROR(pool_->allocate(buffer.bytes, side_, &out->data));
    RINGGUARD_CUDA_CHECK(
        cudaMemcpyAsync(out->data, buffer.data, buffer.bytes, cudaMemcpyDeviceToDevice, side_));
    RINGGUARD_CUDA_CHECK(cudaEventRecord(after_, side_));
    RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(s, after_, 0));
    return Status::ok();
  }

  // One event pair and one batched copy for every buffer: a guarded call with many small state tensors (a
  // layer's parameters and optimizer slots) pays the launch costs once.
  Status snapshotMany(const std::vector<const GuardBuffer*>& buffers, void* stream,
                      std::vector<SnapshotHandle>* out) override {
    if (!batchSnapshots_ || buffers.size() < 2) return GuardBackend::snapshotMany(buffers, stream, out);
    out->clear();
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    RINGGUARD_CUDA_CHECK(cudaEventRecord(before_, s));
    RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(side_, before_, 0));
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    for (const GuardBuffer* b : buffers) {
      SnapshotHandle h{nullptr, b->bytes};
      if (b->bytes != 0) {
        RINGGUARD_RETURN_IF_ERROR(pool_->allocate(b->bytes, side_, &h.data));
        dsts.push_back(h.data);
        srcs.push_back(b->data);
        sizes.push_back(b->bytes);
      }
      out->push_back(h);
    }
    if (!dsts.empty()) {
      cudaMemcpyAttributes attr = {};
      attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;  // the copies read what the stream left
      size_t attrIndex = 0;
      RINGGUARD_CUDA_CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), dsts.size(), &attr,
                                                &attrIndex, 1, side_));
    }
    RINGGUARD_CUDA_CHECK(cudaEventRecord(after_, side_));
    RINGGUARD_CUDA_CHECK(cudaStreamWaitEvent(s, after_, 0));
    return Status::ok();
  }

  Status restore(const GuardBuffer& buffer, const SnapshotHandle& saved, void* stream) override {
    if (buffer.bytes == 0) return Status::ok();
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(buffer.data, saved.data, buffer.bytes, cudaMemcpyDeviceToDevice,
                                         static_cast<cudaStream_t>(stream)));
    return Status::ok();
  }

  Status release(const SnapshotHandle& saved, void* stream) override {
    // Freed on the caller's stream, which the snapshot's copy is ordered before (snapshot()'s event).
    return pool_->free(saved.data, static_cast<cudaStream_t>(stream));
  }

  Status scan(const GuardBuffer& buffer, void* stream) override {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    NanScanResult* slot = nullptr;
    RINGGUARD_RETURN_IF_ERROR(nextSlot(s, &slot));
    const bool check = element_bits::holdsNonFinite(buffer.dtype);
    // Integer buffers get a clean slot: the launcher with count 0 only initialises it.
    return nanScanDevice(check ? buffer.data : nullptr, check ? buffer.count() : 0,
                         check ? buffer.dtype : DataType::kFloat32, slot, s);
  }

  Status scanMany(const std::vector<const GuardBuffer*>& buffers, void* stream) override {
    std::vector<NanScanSpan> spans;
    spans.reserve(buffers.size());
    for (const GuardBuffer* b : buffers) {
      NanScanResult* slot = nullptr;
      RINGGUARD_RETURN_IF_ERROR(nextSlot(static_cast<cudaStream_t>(stream), &slot));
      const bool check = element_bits::holdsNonFinite(b->dtype);
      // Integer buffers get a clean slot, as in scan().
      spans.push_back(NanScanSpan{check ? b->data : nullptr, check ? b->count() : 0,
                                  check ? b->dtype : DataType::kFloat32, slot});
    }
    return nanScanManyDevice(spans.data(), spans.size(), static_cast<cudaStream_t>(stream));
  }

  Status readScans(void* stream, std::vector<ScanResult>* results) override {
    results->clear();
    if (pending_ == 0) return Status::ok();
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const size_t used = pending_;
    pending_ = 0;
    for (size_t c = 0; c * kSlotsPerChunk < used; ++c) {
      const size_t n = std::min(kSlotsPerChunk, used - c * kSlotsPerChunk);
      RINGGUARD_RETURN_IF_ERROR(guardVerdictDevice(static_cast<const NanScanResult*>(chunks_[c]), n,
                                                   c * kSlotsPerChunk, c != 0, verdictDevice_, s));
    }
    RINGGUARD_CUDA_CHECK(cudaEventRecord(verdictEvent_, s));
    RINGGUARD_CUDA_CHECK(cudaEventSynchronize(verdictEvent_));
    ++waits_;
    const volatile GuardVerdict* v = verdictHost_;
    results->assign(used, ScanResult{});
    if (v->badScans == 0) return Status::ok();
    // Rare path: bring every slot back to name the tensors and indices.
    std::vector<NanScanResult> all(used);
    for (size_t c = 0; c * kSlotsPerChunk < used; ++c) {
      const size_t n = std::min(kSlotsPerChunk, used - c * kSlotsPerChunk);
      RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(all.data() + c * kSlotsPerChunk, chunks_[c],
                                           n * sizeof(NanScanResult), cudaMemcpyDeviceToHost, s));
    }
    RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(s));
    ++waits_;
    for (size_t i = 0; i < used; ++i) (*results)[i] = ScanResult{all[i].count, all[i].firstIndex};
    return Status::ok();
  }

  Status verdictFlag(void* stream, float* flag) override {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const size_t used = pending_;
    pending_ = 0;
    // Summarised into device memory this time: nothing on the host reads it.
    RINGGUARD_RETURN_IF_ERROR(
        guardVerdictDevice(used == 0 ? nullptr : static_cast<const NanScanResult*>(chunks_[0]),
                           std::min(kSlotsPerChunk, used), 0, false, verdictScratch_, s));
    for (size_t c = 1; c * kSlotsPerChunk < used; ++c) {
      const size_t n = std::min(kSlotsPerChunk, used - c * kSlotsPerChunk);
      RINGGUARD_RETURN_IF_ERROR(guardVerdictDevice(static_cast<const NanScanResult*>(chunks_[c]), n,
                                                   c * kSlotsPerChunk, true, verdictScratch_, s));
    }
    return guardVerdictFlagDevice(verdictScratch_, flag, s);
  }

  Status sanitize(const GuardBuffer& buffer, SanitizeMode mode, void* stream) override {
    DataType part;
    int parts = 0;
    if (!element_bits::scanParts(buffer.dtype, &part, &parts)) return Status::ok();
    return guardSanitizeDevice(buffer.data, buffer.count() * size_t(parts), part,
                               mode == SanitizeMode::kClamp, static_cast<cudaStream_t>(stream));
  }

  Status inject(const GuardBuffer& buffer, size_t index, FaultValue value, void* stream) override {
    DataType part;
    int parts = 0;
    if (!element_bits::scanParts(buffer.dtype, &part, &parts)) {
      return Status(StatusCode::kInvalidArgument,
                    "guard: cannot inject a non-finite value into integer buffer '" + buffer.name + "'");
    }
    if (index >= buffer.count()) {
      return Status(StatusCode::kInvalidArgument, "guard: injection index " + std::to_string(index) +
                                                      " is past the end of '" + buffer.name + "'");
    }
    // A complex element gets the value in its real part.
    return guardInjectDevice(buffer.data, index * size_t(parts), part, injectedValueOf(value),
                             static_cast<cudaStream_t>(stream));
  }

  Status readElement(const GuardBuffer& buffer, size_t index, void* stream, double* value) override {
    if (index >= buffer.count())
      return Status(StatusCode::kInvalidArgument, "guard: element index past the end");
    const size_t width = dataTypeSize(buffer.dtype);
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(scratchHost_,
                                         static_cast<const unsigned char*>(buffer.data) + index * width,
                                         width, cudaMemcpyDeviceToHost, s));
    RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(s));
    ++waits_;
    *value = element_bits::elementAsDouble(scratchHost_, buffer.dtype);
    return Status::ok();
  }

  Status checksum(const GuardBuffer& buffer, void* stream, uint32_t* crc) override {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    const size_t scratchBytes = crc32DeviceScratchBytes(buffer.bytes);
    void* work = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pool_->allocate(scratchBytes + 16, s, &work));
    uint32_t* word = reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(work) + scratchBytes);
    Status st = crc32Device(buffer.data, buffer.bytes, word, scratchBytes ? work : nullptr, scratchBytes, s);
    if (st.isOk()) {
      const cudaError_t e = cudaMemcpyAsync(scratchHost_, word, 4, cudaMemcpyDeviceToHost, s);
      if (e != cudaSuccess) st = cuda_detail::cudaErrorStatus(e, "cudaMemcpyAsync", __FILE__, __LINE__);
    }
    const Status freed = pool_->free(work, s);
    RINGGUARD_RETURN_IF_ERROR(st);
    RINGGUARD_RETURN_IF_ERROR(freed);
    RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(s));
    ++waits_;
    std::memcpy(crc, scratchHost_, 4);
    return Status::ok();
  }

  uint64_t hostWaits() const override { return waits_; }

 private:
  // Result slots live for the backend's life. They are allocated on the side stream and synchronised
  // once, so any caller stream may use them: the first chunk at creation, further ones only when a batch
  // holds more than kSlotsPerChunk scans (a one-time host wait, counted).
  Status addChunk() {
    void* p = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pool_->allocate(kSlotsPerChunk * sizeof(NanScanResult), side_, &p));
    chunks_.push_back(p);
    RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(side_));
    return Status::ok();
  }

  // The slot of the next scan.
  Status nextSlot(cudaStream_t, NanScanResult** slot) {
    const size_t chunk = pending_ / kSlotsPerChunk;
    if (chunk == chunks_.size()) {
      RINGGUARD_RETURN_IF_ERROR(addChunk());
      ++waits_;
    }
    *slot = static_cast<NanScanResult*>(chunks_[chunk]) + pending_ % kSlotsPerChunk;
    ++pending_;
    return Status::ok();
  }

  int device_ = 0;
  bool batchSnapshots_ = true;
  std::unique_ptr<DevicePool> ownedPool_;
  DevicePool* pool_ = nullptr;
  PinnedHostPool pinned_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t before_ = nullptr;
  cudaEvent_t after_ = nullptr;
  cudaEvent_t verdictEvent_ = nullptr;
  void* pinnedHost_ = nullptr;
  GuardVerdict* verdictHost_ = nullptr;
  GuardVerdict* verdictDevice_ = nullptr;
  GuardVerdict* verdictScratch_ = nullptr;  // device memory: runStepToFlag's summary
  unsigned char* scratchHost_ = nullptr;
  std::vector<void*> chunks_;
  size_t pending_ = 0;
  uint64_t waits_ = 0;
};

}  // namespace

Status makeDeviceGuardBackend(const DeviceGuardBackendOptions& options, std::unique_ptr<GuardBackend>* out) {
  auto backend = std::make_unique<DeviceGuardBackend>();
  RINGGUARD_RETURN_IF_ERROR(backend->init(options));
  *out = std::move(backend);
  return Status::ok();
}

}  // namespace ringguard
