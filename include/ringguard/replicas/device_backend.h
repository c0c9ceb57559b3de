#pragma once
// The ReplicaBackend over device memory (docs/REPLICAS.md). Implemented over the CUDA layer's kernels
// (src/replicas/device/replica_backend.cc, compiled into ringguard::cuda: builds with RINGGUARD_WITH_CUDA);
// no CUDA type here.
#include <memory>

#include "ringguard/core/status.h"
#include "ringguard/replicas/fingerprint.h"

namespace ringguard {

class DevicePool;  // the CUDA layer's stream-ordered pool (src/cuda/memory_pool.h)

struct DeviceReplicaBackendOptions {
  int device = 0;
  DevicePool* pool = nullptr;  // scratch and results from this pool; null: the backend makes its own
};

// Fingerprints are crc32ManyDevice on the caller's stream into pool memory, copied into pinned memory and
// waited for with one event (the sync=True check's one host wait). Fault flips are a rare-path
// read-modify-write of one byte. Not thread-safe (a checker is used by one thread at a time).
Status makeDeviceReplicaBackend(const DeviceReplicaBackendOptions& options,
                                std::unique_ptr<ReplicaBackend>* out);

}  // namespace ringguard
