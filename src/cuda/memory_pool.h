#pragma once
// Memory pools of the CUDA layer. Every byte of device memory the layer uses comes from a DevicePool, and
// every pinned host staging buffer from a PinnedHostPool: there is no hidden cudaMalloc anywhere else.
//
// DevicePool owns its own cudaMemPool_t (never the device's default pool) so that memory it caches is not
// memory PyTorch's caching allocator could have used, and so that trimming it releases only our memory. The
// release threshold bounds what it keeps cached across synchronisations (256 MiB by default).
//
// Every pool of the process is listed in src/cuda/pool_registry.h (its memory beside PyTorch's).
//
// This header is the CUDA layer's own and includes the CUDA runtime API.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ringguard/core/status.h"

namespace ringguard {

struct DevicePoolStats {
  uint64_t reservedBytes = 0;       // device memory the pool holds now (cudaMemPoolAttrReservedMemCurrent)
  uint64_t usedBytes = 0;           // of which handed out (cudaMemPoolAttrUsedMemCurrent)
  uint64_t highWaterBytes = 0;      // peak usedBytes since creation or resetHighWater (UsedMemHigh)
  uint64_t allocationCount = 0;     // live allocations (allocated and not yet freed through this pool)
  uint64_t totalAllocations = 0;    // allocations since creation
  uint64_t allocationFailures = 0;  // allocate() calls the driver refused since creation (out of memory)
};

class DevicePool {
 public:
  static constexpr uint64_t kDefaultReleaseThreshold = 256ull << 20;

  // Creates a pool of device memory on `device`. `releaseThresholdBytes`: how much freed memory the pool
  // may keep cached when a stream, event or device synchronises; the rest goes back to the driver.
  static Status create(int device, uint64_t releaseThresholdBytes, std::unique_ptr<DevicePool>* out);
  static Status create(int device, std::unique_ptr<DevicePool>* out) {
    return create(device, kDefaultReleaseThreshold, out);
  }

  // Destroys the pool. Allocations still live are reclaimed by the driver once their frees complete; the
  // caller should have freed everything and synchronised.
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  // Stream-ordered allocation (cudaMallocFromPoolAsync): the memory may be used by work on `stream` right
  // away, and by other streams once they are ordered after it. bytes == 0 gives *ptr == nullptr.
  Status allocate(size_t bytes, cudaStream_t stream, void** ptr);
  // Stream-ordered free (cudaFreeAsync): the memory is reusable once `stream` passes this point. `ptr` must
  // come from allocate() on this pool (kInvalidArgument otherwise); nullptr is a no-op.
  Status free(void* ptr, cudaStream_t stream);

  Status setReleaseThreshold(uint64_t bytes);
  uint64_t releaseThreshold() const;
  // Releases cached memory until at most `minBytesToKeep` reserved bytes remain (cudaMemPoolTrimTo).
  Status trim(size_t minBytesToKeep = 0);
  Status stats(DevicePoolStats* out) const;
  // Restarts highWaterBytes from the current usage.
  Status resetHighWater();

  int device() const { return device_; }
  cudaMemPool_t handle() const { return pool_; }

 private:
  DevicePool(int device, cudaMemPool_t pool, uint64_t releaseThreshold)
      : device_(device), pool_(pool), releaseThreshold_(releaseThreshold) {}

  const int device_;
  const cudaMemPool_t pool_;
  mutable std::mutex mu_;
  uint64_t releaseThreshold_;               // guarded by mu_
  std::unordered_map<void*, size_t> live_;  // guarded by mu_
  uint64_t totalAllocations_ = 0;           // guarded by mu_
  uint64_t allocationFailures_ = 0;         // guarded by mu_
};

struct PinnedHostPoolStats {
  uint64_t reservedBytes = 0;       // pinned memory held: blocks handed out plus cached blocks
  uint64_t usedBytes = 0;           // block bytes handed out (size-class rounded)
  uint64_t cachedBytes = 0;         // block bytes cached in the free lists
  uint64_t highWaterBytes = 0;      // peak usedBytes
  uint64_t allocationCount = 0;     // live allocations
  uint64_t totalAllocations = 0;    // allocations since creation
  uint64_t allocationFailures = 0;  // allocate() calls the driver refused since creation (out of memory)
};

// Page-locked host blocks (cudaHostAlloc, portable to every device) cached by size class. Sizes are rounded
// up to a class (powers of two split into 4 steps, at least 4 KiB), so a freed block serves any later
// request of its class without another cudaHostAlloc, which is slow and serialises with the device.
class PinnedHostPool {
 public:
  // `maxCachedBytes`: freed blocks beyond this are returned to the driver at once instead of cached.
  explicit PinnedHostPool(uint64_t maxCachedBytes = 1ull << 30);
  // Frees the cached blocks. Live blocks are freed too (the caller must be done with them).
  ~PinnedHostPool();
  PinnedHostPool(const PinnedHostPool&) = delete;
  PinnedHostPool& operator=(const PinnedHostPool&) = delete;

  // bytes == 0 gives *ptr == nullptr.
  Status allocate(size_t bytes, void** ptr);
  // The block becomes reusable immediately: the caller must make sure no pending copy still uses it.
  // `ptr` must come from allocate() on this pool (kInvalidArgument otherwise); nullptr is a no-op.
  Status free(void* ptr);
  // Forgets a live block without freeing it: for a send the host transport may still be reading after a
  // failure (an MPI send cannot be cancelled). The block is leaked on purpose, never handed out again nor
  // freed under MPI's feet, not even by the destructor. Same errors as free().
  Status abandon(void* ptr);
  // Returns every cached block to the driver.
  Status trim();
  PinnedHostPoolStats stats() const;

  // The size class `bytes` is rounded up to.
  static size_t sizeClass(size_t bytes);

 private:
  const uint64_t maxCachedBytes_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cached_;  // size class -> free blocks; guarded by mu_
  std::unordered_map<void*, size_t> live_;       // block -> size class; guarded by mu_
  PinnedHostPoolStats stats_;                    // guarded by mu_
};

}  // namespace ringguard
