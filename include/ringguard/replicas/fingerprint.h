#pragma once
// Replica fingerprints (docs/REPLICAS.md): the CRC-32 of every tensor the replicas of a data-parallel job
// must hold bit-identical after an optimizer step (parameters, optimizer state, buffers), and the backend
// that computes them over host or device memory. Framework-free: no torch, no CUDA types here.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

// One tensor of a replica's state: a named, typed, contiguous byte range in host or device memory. The
// checker never owns the memory.
struct ReplicaTensor {
  std::string name;  // "param:fc1.weight", "optim:fc1.weight.exp_avg", "buffer:bn.running_mean"
  void* data = nullptr;
  size_t bytes = 0;
  DataType dtype = DataType::kFloat32;
  MemoryKind kind = MemoryKind::kHost;

  size_t count() const { return bytes / dataTypeSize(dtype); }
};

// Tensors of one memory kind that one backend call fingerprints (on the device: one launch, one wait).
struct FingerprintBucket {
  MemoryKind kind = MemoryKind::kHost;
  std::vector<size_t> indices;  // into the checked list, ascending
  uint64_t bytes = 0;
};

// Groups `tensors` by memory kind (host first), at most `maxTensors` per bucket (>= 1), keeping the order
// within a kind: the host and device tensors of a model interleave (Adam's `step` stays on the CPU beside
// CUDA moments), and a bucket per run of one kind would cost a device wait per run. Every tensor is in
// exactly one bucket.
std::vector<FingerprintBucket> planFingerprintBuckets(const std::vector<ReplicaTensor>& tensors,
                                                      size_t maxTensors);

// CRC-32 of the names, dtypes and sizes of `tensors`: two replicas that list different tensors (or the
// same ones in another order) differ here, so their per-tensor CRCs are never compared index by index.
uint32_t replicaLayoutHash(const std::vector<ReplicaTensor>& tensors);

// Fingerprints and fault writes over one memory kind. `stream` is opaque: the CUDA backend's
// cudaStream_t, ignored by the host backend.
class ReplicaBackend {
 public:
  virtual ~ReplicaBackend() = default;
  virtual MemoryKind kind() const = 0;
  // crcs[k] = crc32 of tensors[indices[k]]'s bytes (core's crc32, bit-identical on the device). Returns
  // when the values are in host memory (the device backend's one host wait per call, counted by
  // hostWaits()).
  virtual Status fingerprint(const std::vector<ReplicaTensor>& tensors, const std::vector<size_t>& indices,
                             void* stream, uint32_t* crcs) = 0;
  // XORs `mask` into byte `byteOffset` of `tensor` (fault injection), ordered on `stream`.
  virtual Status flipBits(const ReplicaTensor& tensor, size_t byteOffset, uint8_t mask, void* stream) = 0;
  virtual uint64_t hostWaits() const = 0;
  // Makes now what fingerprinting up to `tensors` tensors per call would allocate at its first use (the
  // device backend's pinned memory: a page-locked allocation waits for the device's legacy default stream,
  // which the replica check's gate may hold when the verdict thread first fingerprints).
  virtual Status prepare(size_t tensors) {
    (void)tensors;
    return Status::ok();
  }
};

// The host backend: core's crc32 (ISA-L) inline on the calling thread.
std::unique_ptr<ReplicaBackend> makeHostReplicaBackend();

}  // namespace ringguard
