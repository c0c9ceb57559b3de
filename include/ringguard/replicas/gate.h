#pragma once
// The replica check's gate (docs/REPLICAS.md, "The gate"): sync=True's guarantee (no step runs on a replica
// the check found odd, a repair leaves no trace) without the host's wait for the verdict. After a check's
// all-gather on the training stream, a kernel holds that stream while the gathered fingerprints differ, until
// the checker's verdict thread has decided (and repaired) and releases the check's epoch; clean, it passes
// at once. Implemented over the CUDA layer (src/replicas/device/replica_gate.cc, compiled into
// ringguard::device); no CUDA type here.
#include <cstdint>
#include <memory>

#include "ringguard/core/status.h"

namespace ringguard {

class ReplicaPending;  // ringguard/replicas/replica_check.h

class ReplicaGate {
 public:
  static constexpr uint64_t kOpenAll = ~uint64_t(0);
  virtual ~ReplicaGate() = default;
  // Queues on `stream`, behind the all-gather that wrote `words` (device memory, `ranks` blocks of
  // `wordsPerRank`): their copy into host memory, then the gate of check `epoch` (1, 2, ...). The pending's
  // take() waits for that copy: the verdict thread's wait, never the caller's. Waits (on the host) only when
  // 64 earlier checks' words are still untaken (the device gate's slots).
  virtual Status hold(const uint32_t* words, size_t wordsPerRank, int ranks, uint64_t epoch, void* stream,
                      std::unique_ptr<ReplicaPending>* out) = 0;
  // Opens the gates of every epoch <= `epoch` (kOpenAll: every gate, now and later). Thread-safe.
  virtual void release(uint64_t epoch) = 0;
  // The highest epoch whose gate passed its deadline before it was released (0: none). Thread-safe.
  virtual uint64_t expired() const = 0;
  // Called once on the checker's verdict thread before its first use of the gate or of the backends (the
  // device gate makes its device the thread's current one).
  virtual void bindThread() {}
  // The checker is stopping: a pending's take() still waiting for its words gives up (an error) after the
  // gate's timeout instead of waiting for good (its stream may never get there). Thread-safe.
  virtual void abandon() {}
  // Whether the training thread waits at the gate before it changes host tensors too. The device gate holds
  // a stream only: the checker then keeps a copy of the host tensors (Adam's `step`) for the verdict thread,
  // and raises a difference in one instead of repairing it (the training thread has moved it on).
  virtual bool holdsHostTensors() const { return false; }
};

struct DeviceReplicaGateOptions {
  int device = 0;
  uint64_t timeoutNs = 60ull * 1000 * 1000 * 1000;  // a closed gate's deadline (RINGGUARD_TIMEOUT_MS)
};

// The gate over the CUDA layer's kernel (cuda/replica_gate.cu): the release and deadline words in mapped
// pinned memory, the gathered words written by the kernel into pinned slots with their check's epoch.
Status makeDeviceReplicaGate(const DeviceReplicaGateOptions& options, std::unique_ptr<ReplicaGate>* out);

}  // namespace ringguard
