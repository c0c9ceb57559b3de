// cuda::readPoolUsage, cuda::trimPools (ringguard/cuda/pool_usage.h): the pool registry behind the CUDA
// layer's public face.
#include "ringguard/cuda/pool_usage.h"

#include "cuda/pool_registry.h"

namespace ringguard {
namespace cuda {

Status readPoolUsage(int device, ProcessPoolUsage* out) {
  ProcessPoolStats s;
  RINGGUARD_RETURN_IF_ERROR(processPoolStats(device, &s));
  out->device = PoolUsage{s.device.reservedBytes,   s.device.usedBytes,          s.device.highWaterBytes,
                          s.device.allocationCount, s.device.allocationFailures, s.devicePools};
  out->pinned = PoolUsage{s.pinned.reservedBytes,   s.pinned.usedBytes,          s.pinned.highWaterBytes,
                          s.pinned.allocationCount, s.pinned.allocationFailures, s.pinnedPools};
  return Status::ok();
}

Status trimPools(int device) { return trimProcessPools(device); }

}  // namespace cuda
}  // namespace ringguard
