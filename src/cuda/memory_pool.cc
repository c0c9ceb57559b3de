#include "cuda/memory_pool.h"

#include <algorithm>
#include <string>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/pool_registry.h"

namespace ringguard {

// ---- DevicePool ------------------------------------------------------------------------------------------

Status DevicePool::create(int device, uint64_t releaseThresholdBytes, std::unique_ptr<DevicePool>* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "DevicePool::create: null output");
  int count = 0;
  RINGGUARD_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device < 0 || device >= count) {
    return Status(StatusCode::kInvalidArgument, "DevicePool::create: no device " + std::to_string(device) +
                                                    " (" + std::to_string(count) + " visible)");
  }
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  RINGGUARD_CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
  std::unique_ptr<DevicePool> p(new DevicePool(device, pool, releaseThresholdBytes));
  RINGGUARD_RETURN_IF_ERROR(p->setReleaseThreshold(releaseThresholdBytes));
  pool_registry_detail::join(p.get());
  *out = std::move(p);
  return Status::ok();
}

DevicePool::~DevicePool() {
  pool_registry_detail::leave(this);  // a no-op for a pool that never joined (create failed)
  // Destruction is deferred by the driver until outstanding frees complete; nothing to report from here.
  (void)cudaMemPoolDestroy(pool_);
}

Status DevicePool::allocate(size_t bytes, cudaStream_t stream, void** ptr) {
  if (ptr == nullptr) return Status(StatusCode::kInvalidArgument, "DevicePool::allocate: null output");
  *ptr = nullptr;
  if (bytes == 0) return Status::ok();
  void* p = nullptr;
  const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, pool_, stream);
  if (e != cudaSuccess) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++allocationFailures_;  // the downgrade rules' signal (telemetry's <pool>.allocation_failures)
    }
    (void)cudaGetLastError();  // an out-of-memory is not sticky: clear it for the next call
    return cuda_detail::cudaErrorStatus(e, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    live_.emplace(p, bytes);
    ++totalAllocations_;
  }
  *ptr = p;
  return Status::ok();
}

Status DevicePool::free(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return Status::ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_.erase(ptr) == 0) {
      return Status(StatusCode::kInvalidArgument, "DevicePool::free: pointer was not allocated by this pool");
    }
  }
  RINGGUARD_CUDA_CHECK(cudaFreeAsync(ptr, stream));
  return Status::ok();
}

Status DevicePool::setReleaseThreshold(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t value = bytes;
  RINGGUARD_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &value));
  releaseThreshold_ = bytes;
  return Status::ok();
}

uint64_t DevicePool::releaseThreshold() const {
  std::lock_guard<std::mutex> lock(mu_);
  return releaseThreshold_;
}

Status DevicePool::trim(size_t minBytesToKeep) {
  RINGGUARD_CUDA_CHECK(cudaMemPoolTrimTo(pool_, minBytesToKeep));
  return Status::ok();
}

Status DevicePool::stats(DevicePoolStats* out) const {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "DevicePool::stats: null output");
  DevicePoolStats s;
  RINGGUARD_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &s.reservedBytes));
  RINGGUARD_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &s.usedBytes));
  RINGGUARD_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &s.highWaterBytes));
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.allocationCount = live_.size();
    s.totalAllocations = totalAllocations_;
    s.allocationFailures = allocationFailures_;
  }
  *out = s;
  return Status::ok();
}

Status DevicePool::resetHighWater() {
  uint64_t zero = 0;  // the only value the attribute accepts: restart from the current usage
  RINGGUARD_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
  return Status::ok();
}

// ---- PinnedHostPool --------------------------------------------------------------------------------------

size_t PinnedHostPool::sizeClass(size_t bytes) {
  constexpr size_t kMinClass = 4096;
  if (bytes <= kMinClass) return kMinClass;
  // Four classes per power of two: step = 2^(floor(log2(bytes - 1)) - 2), so at most 25% is wasted.
  int log2 = 0;
  for (size_t v = bytes - 1; v > 1; v >>= 1) ++log2;
  const size_t step = size_t(1) << (log2 - 2);
  return (bytes + step - 1) / step * step;
}

PinnedHostPool::PinnedHostPool(uint64_t maxCachedBytes) : maxCachedBytes_(maxCachedBytes) {
  pool_registry_detail::join(this);
}

PinnedHostPool::~PinnedHostPool() {
  pool_registry_detail::leave(this);
  for (auto& [cls, blocks] : cached_) {
    for (void* p : blocks) (void)cudaFreeHost(p);
  }
  for (auto& [p, cls] : live_) (void)cudaFreeHost(p);
}

Status PinnedHostPool::allocate(size_t bytes, void** ptr) {
  if (ptr == nullptr) return Status(StatusCode::kInvalidArgument, "PinnedHostPool::allocate: null output");
  *ptr = nullptr;
  if (bytes == 0) return Status::ok();
  const size_t cls = sizeClass(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cached_.find(cls);
    if (it != cached_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cachedBytes -= cls;
    }
  }
  if (p == nullptr) {
    // Outside the lock: cudaHostAlloc takes milliseconds for large blocks.
    RINGGUARD_CUDA_CHECK(cudaHostAlloc(&p, cls, cudaHostAllocPortable));
  }
  std::lock_guard<std::mutex> lock(mu_);
  live_.emplace(p, cls);
  stats_.usedBytes += cls;
  stats_.highWaterBytes = std::max(stats_.highWaterBytes, stats_.usedBytes);
  stats_.allocationCount = live_.size();
  ++stats_.totalAllocations;
  *ptr = p;
  return Status::ok();
}

Status PinnedHostPool::free(void* ptr) {
  if (ptr == nullptr) return Status::ok();
  bool release = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      return Status(StatusCode::kInvalidArgument,
                    "PinnedHostPool::free: pointer was not allocated by this pool");
    }
    const size_t cls = it->second;
    live_.erase(it);
    stats_.usedBytes -= cls;
    stats_.allocationCount = live_.size();
    if (stats_.cachedBytes + cls > maxCachedBytes_) {
      release = true;
    } else {
      cached_[cls].push_back(ptr);
      stats_.cachedBytes += cls;
    }
  }
  if (release) RINGGUARD_CUDA_CHECK(cudaFreeHost(ptr));
  return Status::ok();
}

Status PinnedHostPool::abandon(void* ptr) {
  if (ptr == nullptr) return Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return Status(StatusCode::kInvalidArgument,
                  "PinnedHostPool::abandon: pointer was not allocated by this pool");
  }
  stats_.usedBytes -= it->second;
  live_.erase(it);
  stats_.allocationCount = live_.size();
  return Status::ok();
}

Status PinnedHostPool::trim() {
  std::map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    blocks.swap(cached_);
    stats_.cachedBytes = 0;
  }
  Status first = Status::ok();
  for (auto& [cls, list] : blocks) {
    for (void* p : list) {
      const cudaError_t err = cudaFreeHost(p);
      if (err != cudaSuccess && first.isOk()) {
        first = cuda_detail::cudaErrorStatus(err, "cudaFreeHost(p)", __FILE__, __LINE__);
      }
    }
  }
  return first;
}

PinnedHostPoolStats PinnedHostPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PinnedHostPoolStats s = stats_;
  s.reservedBytes = s.usedBytes + s.cachedBytes;
  return s;
}

}  // namespace ringguard
