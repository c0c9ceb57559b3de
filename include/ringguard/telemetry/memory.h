#pragma once
// Memory telemetry, fed from outside: ringguard's own pools (the CUDA layer reads their statistics) and
// PyTorch's caching allocator (the torch layer reads torch.cuda.memory_stats). Nothing here needs CUDA or
// torch; a source that was never fed reports its signals missing. docs/DOWNGRADE.md defines the measures.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ringguard/telemetry/source.h"

namespace ringguard {

// Statistics of one stream-ordered pool (a cudaMemPool_t: ringguard's DevicePool, or PyTorch's allocator
// under backend:cudaMallocAsync), or of a caching pool without split information (the pinned host pool).
struct PoolStatsSample {
  uint64_t reservedBytes = 0;                  // memory the pool holds
  uint64_t usedBytes = 0;                      // of which handed out
  uint64_t highWaterBytes = 0;                 // peak usedBytes (0 when the pool does not track it)
  std::optional<uint64_t> allocationFailures;  // failed allocations since creation, when counted
};

// Fragmentation of a pool that exposes no largest free block. A cudaMemPool_t reports only reserved and
// used bytes; idle bytes (reserved - used) are either reusable or stranded, and the two cannot be told
// apart from one reading. They can from two: when the pool grew although its idle bytes covered the growth
// in use (or an allocation failed while it held idle bytes), those idle bytes could not serve the
// requests, i.e. they were fragmented. The estimate is then idle / reserved at that reading, and it only
// decays afterwards (it never exceeds the current idle fraction): stranded bytes go away when use grows
// into them or the pool is trimmed, not by themselves.
class StreamOrderedFragmentation {
 public:
  // Returns the fragmentation after this reading, in [0, 1].
  double update(const PoolStatsSample& s);
  double value() const { return value_; }
  static double idleFraction(const PoolStatsSample& s);
  uint64_t strandedEvents() const { return events_; }  // readings that showed stranded idle bytes

 private:
  bool primed_ = false;
  PoolStatsSample last_;
  double value_ = 0.0;
  uint64_t events_ = 0;
};

// Signals "pool.<name>.{reserved_bytes,used_bytes,high_water_bytes,idle_fraction,fragmentation,
// allocation_failures}".
class PoolSource : public TelemetrySource {
 public:
  explicit PoolSource(std::string name);  // "device", "pinned"
  const char* name() const override { return source_.c_str(); }
  void sample(int64_t nowNs, std::vector<Signal>* out) override;
  // Thread-safe; the measure advances once per feed, not per sample.
  void feed(const PoolStatsSample& s);

 private:
  const std::string source_;  // "pool.<name>"
  std::mutex mu_;
  bool fed_ = false;                    // guarded by mu_
  PoolStatsSample last_;                // guarded by mu_
  StreamOrderedFragmentation measure_;  // guarded by mu_
  double fragmentation_ = 0.0;          // guarded by mu_
};

// What the torch layer reads from torch.cuda.memory_stats(device) (keys "*.all.current" unless noted).
struct TorchAllocatorStats {
  uint64_t reservedBytes = 0;       // reserved_bytes.all.current
  uint64_t allocatedBytes = 0;      // allocated_bytes.all.current
  uint64_t inactiveSplitBytes = 0;  // inactive_split_bytes.all.current
  uint64_t numAllocRetries = 0;     // num_alloc_retries
  uint64_t numOoms = 0;             // num_ooms
  // backend:cudaMallocAsync (torch.cuda.get_allocator_backend() == "cudaMallocAsync"): the split and retry
  // statistics are not tracked there and read zero.
  bool asyncBackend = false;
};

// Whether an allocator configuration string (PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF syntax:
// comma-separated key:value) selects backend:cudaMallocAsync.
bool allocConfSelectsAsync(const std::string& conf);
// allocConfSelectsAsync over PYTORCH_ALLOC_CONF, then PYTORCH_CUDA_ALLOC_CONF (torch reads both).
bool asyncAllocatorFromEnv();

// Signals "torch.{reserved_bytes,allocated_bytes,inactive_split_bytes,num_alloc_retries,num_ooms,
// async_backend,fragmentation}". Native allocator: fragmentation = inactive_split / reserved (bytes cached in
// split blocks that no request could use). cudaMallocAsync: inactive_split_bytes and num_alloc_retries are
// reported missing (not tracked, never a fake zero) and fragmentation is the stream-ordered pool measure
// over reserved / allocated with num_ooms as the failure count.
class TorchAllocatorSource : public TelemetrySource {
 public:
  const char* name() const override { return "torch"; }
  void sample(int64_t nowNs, std::vector<Signal>* out) override;
  void feed(const TorchAllocatorStats& s);  // thread-safe

  // The measure for one reading (stateful for the async backend), exposed for tests and the Python layer.
  static double nativeFragmentation(const TorchAllocatorStats& s);

 private:
  std::mutex mu_;
  bool fed_ = false;                  // guarded by mu_
  TorchAllocatorStats last_;          // guarded by mu_
  StreamOrderedFragmentation async_;  // guarded by mu_
  double fragmentation_ = 0.0;        // guarded by mu_
};

}  // namespace ringguard
