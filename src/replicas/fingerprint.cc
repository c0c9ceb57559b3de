// Fingerprint planning and the host backend (docs/REPLICAS.md).
#include "ringguard/replicas/fingerprint.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ringguard/core/crc32.h"

namespace ringguard {

std::vector<FingerprintBucket> planFingerprintBuckets(const std::vector<ReplicaTensor>& tensors,
                                                      size_t maxTensors) {
  RINGGUARD_ENFORCE(maxTensors >= 1, "planFingerprintBuckets: maxTensors must be at least 1");
  std::vector<FingerprintBucket> buckets;
  for (MemoryKind kind : {MemoryKind::kHost, MemoryKind::kDevice}) {
    const size_t firstOfKind = buckets.size();
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].kind != kind) continue;
      if (buckets.size() == firstOfKind || buckets.back().indices.size() == maxTensors) {
        buckets.emplace_back();
        buckets.back().kind = kind;
      }
      buckets.back().indices.push_back(i);
      buckets.back().bytes += tensors[i].bytes;
    }
  }
  return buckets;
}

uint32_t replicaLayoutHash(const std::vector<ReplicaTensor>& tensors) {
  // Each tensor's name with its terminator (so "ab"+"c" and "a"+"bc" differ), then its dtype and size, laid
  // end to end and CRC'd in one call: the CRC of the concatenation, as the three calls per tensor this
  // replaced chained (a few hundred tensors cost ~10 us of library calls every check).
  thread_local std::vector<unsigned char> layout;
  layout.clear();
  for (const ReplicaTensor& t : tensors) {
    const auto* name = reinterpret_cast<const unsigned char*>(t.name.c_str());
    layout.insert(layout.end(), name, name + t.name.size() + 1);
    layout.push_back(static_cast<uint8_t>(t.dtype));
    const uint64_t bytes = t.bytes;
    const auto* b = reinterpret_cast<const unsigned char*>(&bytes);
    layout.insert(layout.end(), b, b + sizeof(bytes));
  }
  return crc32(layout.data(), layout.size());
}

namespace {

class HostReplicaBackend final : public ReplicaBackend {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }

  Status fingerprint(const std::vector<ReplicaTensor>& tensors, const std::vector<size_t>& indices, void*,
                     uint32_t* crcs) override {
    for (size_t k = 0; k < indices.size(); ++k) {
      const ReplicaTensor& t = tensors[indices[k]];
      if (t.data == nullptr && t.bytes != 0) {
        return Status(StatusCode::kInvalidArgument, "replica check: tensor '" + t.name + "' has no data");
      }
      crcs[k] = crc32(t.data, t.bytes);
    }
    return Status::ok();
  }

  Status flipBits(const ReplicaTensor& tensor, size_t byteOffset, uint8_t mask, void*) override {
    RINGGUARD_ENFORCE(byteOffset < tensor.bytes, "replica fault past the end of its tensor");
    static_cast<unsigned char*>(tensor.data)[byteOffset] ^= mask;
    return Status::ok();
  }

  uint64_t hostWaits() const override { return 0; }
};

}  // namespace

std::unique_ptr<ReplicaBackend> makeHostReplicaBackend() { return std::make_unique<HostReplicaBackend>(); }

}  // namespace ringguard
