// ReplicaBackend over device memory: the multi-tensor CRC kernel on the caller's stream (its work table kept
// between checks), one event wait for the fingerprints (docs/REPLICAS.md).
#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"
#include "cuda/memory_pool.h"
#include "ringguard/replicas/device_backend.h"

namespace ringguard {
namespace {

class DeviceReplicaBackend final : public ReplicaBackend {
 public:
  ~DeviceReplicaBackend() override {
    if (done_ != nullptr) (void)cudaEventDestroy(done_);
    if (pinned_ != nullptr) (void)pinnedPool_.free(pinned_);
  }

  Status init(const DeviceReplicaBackendOptions& options) {
    device_ = options.device;
    int previous = 0;
    RINGGUARD_CUDA_CHECK(cudaGetDevice(&previous));
    RINGGUARD_CUDA_CHECK(cudaSetDevice(device_));
    Status st = Status::ok();
    if (cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess) {
      st = Status(StatusCode::kInternal, "replica check: cudaEventCreate failed");
    }
    RINGGUARD_CUDA_CHECK(cudaSetDevice(previous));
    return st;
  }

  MemoryKind kind() const override { return MemoryKind::kDevice; }

  Status fingerprint(const std::vector<ReplicaTensor>& tensors, const std::vector<size_t>& indices,
                     void* stream, uint32_t* crcs) override {
    const size_t count = indices.size();
    if (count == 0) return Status::ok();
    auto s = static_cast<cudaStream_t>(stream);
    cuda_detail::DeviceGuard onDevice(device_);
    RINGGUARD_CUDA_CHECK(onDevice.error());
    std::vector<Crc32Span> spans(count);
    for (size_t i = 0; i < count; ++i)
      spans[i] = Crc32Span{tensors[indices[i]].data, tensors[indices[i]].bytes};
    const uint32_t* out = nullptr;
    RINGGUARD_RETURN_IF_ERROR(plan_.run(spans.data(), count, s, &out));
    RINGGUARD_RETURN_IF_ERROR(ensurePinned(count * sizeof(uint32_t)));
    if (cudaMemcpyAsync(pinned_, out, count * sizeof(uint32_t), cudaMemcpyDeviceToHost, s) != cudaSuccess)
      return Status(StatusCode::kInternal, "replica check: copy of the fingerprints failed");
    RINGGUARD_CUDA_CHECK(cudaEventRecord(done_, s));
    RINGGUARD_CUDA_CHECK(cudaEventSynchronize(done_));  // the check's one host wait
    ++hostWaits_;
    for (size_t i = 0; i < count; ++i) crcs[i] = static_cast<const uint32_t*>(pinned_)[i];
    return Status::ok();
  }

  Status flipBits(const ReplicaTensor& tensor, size_t byteOffset, uint8_t mask, void* stream) override {
    auto s = static_cast<cudaStream_t>(stream);
    RINGGUARD_RETURN_IF_ERROR(ensurePinned(1));
    auto* byte = static_cast<unsigned char*>(tensor.data) + byteOffset;
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(pinned_, byte, 1, cudaMemcpyDeviceToHost, s));
    RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(s));
    *static_cast<unsigned char*>(pinned_) ^= mask;
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(byte, pinned_, 1, cudaMemcpyHostToDevice, s));
    RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(s));  // rare path: the pinned byte is reused
    return Status::ok();
  }

  uint64_t hostWaits() const override { return hostWaits_; }

  Status prepare(size_t tensors) override {
    cuda_detail::DeviceGuard onDevice(device_);
    RINGGUARD_CUDA_CHECK(onDevice.error());
    return ensurePinned(tensors * sizeof(uint32_t));
  }

 private:
  Status ensurePinned(size_t bytes) {
    if (bytes <= pinnedBytes_) return Status::ok();
    if (pinned_ != nullptr) RINGGUARD_RETURN_IF_ERROR(pinnedPool_.free(pinned_));
    pinned_ = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pinnedPool_.allocate(bytes, &pinned_));
    pinnedBytes_ = bytes;
    return Status::ok();
  }

  int device_ = 0;
  Crc32ManyPlan plan_;
  PinnedHostPool pinnedPool_;
  void* pinned_ = nullptr;
  size_t pinnedBytes_ = 0;
  cudaEvent_t done_ = nullptr;
  uint64_t hostWaits_ = 0;
};

}  // namespace

Status makeDeviceReplicaBackend(const DeviceReplicaBackendOptions& options,
                                std::unique_ptr<ReplicaBackend>* out) {
  auto backend = std::make_unique<DeviceReplicaBackend>();
  RINGGUARD_RETURN_IF_ERROR(backend->init(options));
  *out = std::move(backend);
  return Status::ok();
}

}  // namespace ringguard
