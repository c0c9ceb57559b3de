#pragma once
// The staged collectives' copies over device memory (ringguard/runtime/host_stager.h): cudaMemcpyAsync
// between device buffers and pinned host blocks on the caller's stream, an event per slot and direction.
// Defined in ringguard::device (builds with CUDA); no CUDA type here: the stream is a cudaStream_t as void*.
#include <memory>

#include "ringguard/core/status.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {
namespace cuda {

class DeviceStager : public HostStager {
 public:
  // The stream the next copies are enqueued on (the caller's; nullptr: the legacy default stream). The
  // first copy to the host is ordered after the work already on it, and the copies back are on it too, so
  // work enqueued on it later sees the result. Set it before each staged call (stagedAllgather,
  // stagedAllreduce), which must run with the stager's device current (the stream's).
  virtual void setStream(void* stream) = 0;
};

// A stager for GPU `device` whose pinned blocks come from a PinnedHostPool of its own (among the process's
// pools, ringguard.memory_stats()["pinned"]), cached across calls: keep one stager per communicator.
Status makeDeviceStager(int device, std::unique_ptr<DeviceStager>* out);

}  // namespace cuda
}  // namespace ringguard
