#pragma once
// Device memory for buffers that outlive one call (the gradient aggregator's buckets), from a stream-ordered
// pool of ringguard's own on one device: counted by ringguard.memory_stats() and trimmed by empty_cache()
// like every pool of the CUDA layer. Streams are cudaStream_t passed as void*: no CUDA header here.
// Implemented by the CUDA layer (src/cuda/device_buffer_pool.cc, ringguard::cuda).
#include <cstddef>
#include <memory>

#include "ringguard/core/status.h"

namespace ringguard {

// The CUDA layer's stream-ordered pool (src/cuda/memory_pool.h): internal, so only named here.
class DevicePool;

namespace cuda {

class DeviceBufferPool {
 public:
  // A pool of its own on `device` (the default release threshold).
  static Status create(int device, std::shared_ptr<DeviceBufferPool>* out);
  ~DeviceBufferPool();
  DeviceBufferPool(const DeviceBufferPool&) = delete;
  DeviceBufferPool& operator=(const DeviceBufferPool&) = delete;

  int device() const;
  // `bytes` set to zero, both in `stream`'s order: its later work may use them at once, other streams once
  // ordered after it. bytes == 0 gives *ptr == nullptr.
  Status allocateZeroed(size_t bytes, void* stream, void** ptr);
  // Returns `ptr` (from allocateZeroed) in `stream`'s order, on the pool's device whatever the current one
  // is. Never throws, for tensor deleters: a failure is dropped.
  void release(void* ptr, void* stream) noexcept;

 private:
  explicit DeviceBufferPool(std::unique_ptr<DevicePool> pool);
  std::unique_ptr<DevicePool> pool_;
};

// Waits until `stream` (a cudaStream_t) has finished its work.
Status synchronizeStream(void* stream);

}  // namespace cuda
}  // namespace ringguard
