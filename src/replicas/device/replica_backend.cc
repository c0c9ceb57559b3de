// ReplicaBackend over device memory: the multi-tensor CRC kernel on the caller's stream, one event wait
// for the fingerprints (docs/REPLICAS.md).
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
    if (options.pool != nullptr) {
      pool_ = options.pool;
    } else {
      st = DevicePool::create(device_, &ownedPool_);
      pool_ = ownedPool_.get();
    }
    if (st.isOk() && cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess) {
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
    std::vector<Crc32Span> spans(count);
    for (size_t i = 0; i < count; ++i)
      spans[i] = Crc32Span{tensors[indices[i]].data, tensors[indices[i]].bytes};
    const size_t scratchBytes = crc32ManyDeviceScratchBytes(spans.data(), count);
    const size_t outOffset = (scratchBytes + 15) / 16 * 16;
    void* mem = nullptr;
    RINGGUARD_RETURN_IF_ERROR(pool_->allocate(outOffset + count * sizeof(uint32_t), s, &mem));
    auto* out = reinterpret_cast<uint32_t*>(static_cast<unsigned char*>(mem) + outOffset);
    Status st = crc32ManyDevice(spans.data(), count, out, mem, scratchBytes, s);
    if (st.isOk()) st = ensurePinned(count * sizeof(uint32_t));
    if (st.isOk() &&
        cudaMemcpyAsync(pinned_, out, count * sizeof(uint32_t), cudaMemcpyDeviceToHost, s) != cudaSuccess)
      st = Status(StatusCode::kInternal, "replica check: copy of the fingerprints failed");
    const Status freed = pool_->free(mem, s);
    if (st.isOk()) st = freed;
    RINGGUARD_RETURN_IF_ERROR(st);
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
  std::unique_ptr<DevicePool> ownedPool_;
  DevicePool* pool_ = nullptr;
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
