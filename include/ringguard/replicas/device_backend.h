#pragma once
// The ReplicaBackend over device memory (docs/REPLICAS.md). Implemented over the CUDA layer's kernels
// (src/replicas/device/replica_backend.cc, compiled into ringguard::cuda: builds with RINGGUARD_WITH_CUDA);
// no CUDA type here.
#include <memory>

#include "ringguard/core/status.h"
#include "ringguard/replicas/fingerprint.h"

namespace ringguard {

struct DeviceReplicaBackendOptions {
  int device = 0;
};

// Fingerprints are a Crc32ManyPlan on the caller's stream (ringguard/cuda/crc32_many.h: the work table kept
// while the tensors stay where they are), copied into pinned memory and waited for with one event (the
// sync=True check's one host wait). Fault flips are a rare-path read-modify-write of one byte. Not
// thread-safe (a checker is used by one thread at a time).
Status makeDeviceReplicaBackend(const DeviceReplicaBackendOptions& options,
                                std::unique_ptr<ReplicaBackend>* out);

}  // namespace ringguard
