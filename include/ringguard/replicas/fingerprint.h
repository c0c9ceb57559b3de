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

// A run of consecutive tensors of one memory kind that one fingerprint launch covers.
struct FingerprintBucket {
  size_t first = 0;  // index of the bucket's first tensor
  size_t count = 0;  // tensors in the bucket
  MemoryKind kind = MemoryKind::kHost;
  uint64_t bytes = 0;
};

// Splits `tensors` into buckets of consecutive tensors of one memory kind, at most `maxTensors` each (the
// device kernel's table of spans; >= 1). Every tensor is in exactly one bucket, in order.
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
  // crcs[i] = crc32 of tensors[i]'s bytes (core's crc32, bit-identical on the device), for each i in
  // [first, first + count). Returns when the values are in host memory (the device backend's one host
  // wait per call, counted by hostWaits()).
  virtual Status fingerprint(const std::vector<ReplicaTensor>& tensors, size_t first, size_t count,
                             void* stream, uint32_t* crcs) = 0;
  // XORs `mask` into byte `byteOffset` of `tensor` (fault injection), ordered on `stream`.
  virtual Status flipBits(const ReplicaTensor& tensor, size_t byteOffset, uint8_t mask, void* stream) = 0;
  virtual uint64_t hostWaits() const = 0;
};

// The host backend: core's crc32 (ISA-L) inline on the calling thread.
std::unique_ptr<ReplicaBackend> makeHostReplicaBackend();

}  // namespace ringguard
