#include "runtime/device/one_rank_path.h"

#include <cuda_runtime_api.h>

#include <string>

#include "algorithms/collectives.h"
#include "cuda/cuda_check.h"

namespace ringguard {
namespace cuda {
namespace {

class OneRankPath final : public DirectPath {
 public:
  explicit OneRankPath(int device) : device_(device) {}
  const char* name() const override { return "one-rank"; }
  bool namedByTransport() const override { return true; }
  bool reportsLater() const override { return false; }

  bool acceptsAllreduce(size_t, DataType, ReduceOp) const override { return true; }
  Status allreduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp, uint32_t,
                   void* stream) override {
    return copy("allreduce", recv, send, count * dataTypeSize(dtype), stream);
  }
  bool acceptsAllgather(size_t, DataType) const override { return true; }
  Status allgather(const void* send, void* recv, size_t sendCount, DataType dtype, uint32_t,
                   void* stream) override {
    return copy("allgather", recv, send, sendCount * dataTypeSize(dtype), stream);
  }
  bool acceptsBroadcast(size_t, DataType) const override { return true; }
  Status broadcast(const void* send, void* recv, size_t count, DataType dtype, int, uint32_t,
                   void* stream) override {
    return copy("broadcast", recv, send, count * dataTypeSize(dtype), stream);
  }
  bool acceptsReduceScatter(size_t, DataType, ReduceOp) const override { return true; }
  Status reduceScatter(const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp, uint32_t,
                       void* stream) override {
    return copy("reduce_scatter", recv, send, recvCount * dataTypeSize(dtype), stream);
  }
  bool acceptsAlltoall(size_t, DataType, bool) const override { return true; }
  // The communicator checked the layout (one entry each, the receive count equal to the send count).
  Status alltoall(const void* send, void* recv, const AlltoallLayout& layout, DataType dtype, bool, uint32_t,
                  void* stream) override {
    const size_t e = dataTypeSize(dtype);
    return copy("alltoall", static_cast<unsigned char*>(recv) + layout.recvDispls.at(0) * e,
                static_cast<const unsigned char*>(send) + layout.sendDispls.at(0) * e,
                layout.sendCounts.at(0) * e, stream);
  }

  // A call whose arguments failed this rank's checks: no peer waits for it, so nothing to do (the caller
  // gets its own error; the communicator stays usable, as after the pipeline's refusal).
  Status decline(CollectiveKind, uint32_t, void*) override { return Status::ok(); }

  Status poll() override { return Status::ok(); }
  void faultCounts(uint64_t* detected, uint64_t* injected) override { *detected = *injected = 0; }
  void abort() override {}
  // No link, no chunk read: nothing to inject into (the pipeline at one rank injects nothing either).
  void setFault(const FaultOptions&) override {}

 private:
  // Launch errors are returned (and poison the communicator, as a kernel's would); a copy reports nothing
  // later. On the communicator's device, as the pipeline's work (a null stream is that device's legacy one).
  Status copy(const char* what, void* to, const void* from, size_t bytes, void* stream) const {
    if (to == from || bytes == 0) return Status::ok();
    const cuda_detail::DeviceGuard onDevice(device_);
    cudaError_t e = onDevice.error();
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(stream));
    if (e == cudaSuccess) return Status::ok();
    return Status(StatusCode::kInternal, std::string(what) + " at one rank: cudaMemcpyAsync of " +
                                             std::to_string(bytes) +
                                             " bytes failed: " + cudaGetErrorString(e));
  }

  const int device_;
};

}  // namespace

std::unique_ptr<DirectPath> makeOneRankPath(int device) { return std::make_unique<OneRankPath>(device); }

}  // namespace cuda
}  // namespace ringguard
