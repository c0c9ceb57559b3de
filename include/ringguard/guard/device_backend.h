#pragma once
// The GuardBackend over device memory, for a Guard over CUDA buffers (docs/GUARD.md). Implemented over the
// CUDA layer's kernels (src/guard/device/guard_scan_backend.cc, compiled into ringguard::cuda: builds with
// RINGGUARD_WITH_CUDA); no CUDA type here.
#include <memory>

#include "ringguard/core/status.h"
#include "ringguard/guard/backend.h"

namespace ringguard {

// The CUDA layer's stream-ordered pool (src/cuda/memory_pool.h): internal, so only named here.
class DevicePool;

struct DeviceGuardBackendOptions {
  int device = 0;
  // Snapshot storage and the scans' result slots come from this pool; null: the backend creates its own
  // (DevicePool::create on `device`).
  DevicePool* pool = nullptr;
  // snapshotMany as one cudaMemcpyBatchAsync (false: one cudaMemcpyAsync per buffer, for comparison).
  bool batchSnapshots = true;
};

// The GuardBackend over device memory. Snapshots are cudaMemcpyAsync D2D on a side stream of its own,
// ordered with the caller's stream by events (no device synchronisation); scans are nanScanDevice into
// pool slots; readScans is one guardVerdictDevice + one event wait. Not thread-safe (a Guard is used by
// one thread at a time).
Status makeDeviceGuardBackend(const DeviceGuardBackendOptions& options, std::unique_ptr<GuardBackend>* out);

}  // namespace ringguard
