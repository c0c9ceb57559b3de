// cuda::DeviceBufferPool (ringguard/cuda/device_buffer_pool.h): a DevicePool behind the CUDA layer's public
// face, so the torch layer allocates from it without the CUDA layer's private headers.
#include "ringguard/cuda/device_buffer_pool.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/memory_pool.h"

namespace ringguard {
namespace cuda {

DeviceBufferPool::DeviceBufferPool(std::unique_ptr<DevicePool> pool) : pool_(std::move(pool)) {}

DeviceBufferPool::~DeviceBufferPool() = default;

Status DeviceBufferPool::create(int device, std::shared_ptr<DeviceBufferPool>* out) {
  std::unique_ptr<DevicePool> pool;
  RINGGUARD_RETURN_IF_ERROR(DevicePool::create(device, &pool));
  out->reset(new DeviceBufferPool(std::move(pool)));
  return Status::ok();
}

int DeviceBufferPool::device() const { return pool_->device(); }

Status DeviceBufferPool::allocateZeroed(size_t bytes, void* stream, void** ptr) {
  const auto s = static_cast<cudaStream_t>(stream);
  RINGGUARD_RETURN_IF_ERROR(pool_->allocate(bytes, s, ptr));
  if (bytes > 0) RINGGUARD_CUDA_CHECK(cudaMemsetAsync(*ptr, 0, bytes, s));
  return Status::ok();
}

void DeviceBufferPool::release(void* ptr, void* stream) noexcept {
  cuda_detail::DeviceGuard guard(pool_->device());
  (void)pool_->free(ptr, static_cast<cudaStream_t>(stream));
}

Status synchronizeStream(void* stream) {
  RINGGUARD_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  return Status::ok();
}

}  // namespace cuda
}  // namespace ringguard
