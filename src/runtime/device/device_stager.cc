// The staged collectives' device copies: device <-> pinned host on the caller's stream. One stream keeps
// the copies in order (to host of chunk c+1, back of chunk c-1); the overlap that matters is theirs with
// the host collective of chunk c, which runs on the calling thread while the copy engine works.
#include "ringguard/runtime/device_stager.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/memory_pool.h"

namespace ringguard {
namespace cuda {

namespace {

class CudaStager final : public DeviceStager {
 public:
  CudaStager() = default;
  ~CudaStager() override {
    for (cudaEvent_t e : {to_[0], to_[1], from_[0], from_[1]}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }

  Status init() {
    for (int s = 0; s < 2; ++s) {
      RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&to_[s], cudaEventDisableTiming));
      RINGGUARD_CUDA_CHECK(cudaEventCreateWithFlags(&from_[s], cudaEventDisableTiming));
    }
    return Status::ok();
  }

  void setStream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }

  Status allocateHost(size_t bytes, void** ptr) override { return pinned_.allocate(bytes, ptr); }
  Status freeHost(void* ptr) override { return pinned_.free(ptr); }

  Status toHost(void* dst, const void* src, size_t bytes, int slot) override {
    return copy(dst, src, bytes, cudaMemcpyDeviceToHost, to_[slot]);
  }
  Status fromHost(void* dst, const void* src, size_t bytes, int slot) override {
    return copy(dst, src, bytes, cudaMemcpyHostToDevice, from_[slot]);
  }
  // An event never recorded is complete, so a slot without copies costs nothing.
  Status waitToHost(int slot) override { return wait(to_[slot]); }
  Status waitFromHost(int slot) override { return wait(from_[slot]); }

 private:
  Status copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaEvent_t done) {
    RINGGUARD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
    RINGGUARD_CUDA_CHECK(cudaEventRecord(done, stream_));
    return Status::ok();
  }
  static Status wait(cudaEvent_t e) {
    RINGGUARD_CUDA_CHECK(cudaEventSynchronize(e));
    return Status::ok();
  }

  cudaStream_t stream_ = nullptr;
  cudaEvent_t to_[2] = {nullptr, nullptr};
  cudaEvent_t from_[2] = {nullptr, nullptr};
  PinnedHostPool pinned_;
};

}  // namespace

Status makeDeviceStager(int device, std::unique_ptr<DeviceStager>* out) {
  int count = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return Status(StatusCode::kInvalidArgument, "device stager: device " + std::to_string(device) +
                                                    " is outside [0, " + std::to_string(count) + ")");
  }
  // The events belong to `device` (events and streams must share one); the caller's current device is
  // restored.
  int current = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDevice(&current));
  RINGGUARD_CUDA_CHECK(cudaSetDevice(device));
  auto s = std::make_unique<CudaStager>();
  Status st = s->init();
  RINGGUARD_CUDA_CHECK(cudaSetDevice(current));
  RINGGUARD_RETURN_IF_ERROR(st);
  *out = std::move(s);
  return Status::ok();
}

}  // namespace cuda
}  // namespace ringguard
