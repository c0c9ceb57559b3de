#include "ringguard/cuda/pool_registry.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace ringguard {

namespace {

// One mutex orders registration against readings and trims: a pool leaves (first thing in its destructor)
// only once no reading or trim is using it. Pools never take this mutex while holding their own.
struct Registry {
  std::mutex mu;
  std::vector<DevicePool*> device;
  std::vector<PinnedHostPool*> pinned;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: pools may outlive static destruction order
  return *r;
}

template <typename T>
void erase(std::vector<T*>* v, T* p) {
  v->erase(std::remove(v->begin(), v->end(), p), v->end());
}

}  // namespace

namespace pool_registry_detail {
void join(DevicePool* pool) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().device.push_back(pool);
}
void leave(DevicePool* pool) {
  std::lock_guard<std::mutex> lock(registry().mu);
  erase(&registry().device, pool);
}
void join(PinnedHostPool* pool) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().pinned.push_back(pool);
}
void leave(PinnedHostPool* pool) {
  std::lock_guard<std::mutex> lock(registry().mu);
  erase(&registry().pinned, pool);
}
}  // namespace pool_registry_detail

Status processPoolStats(int device, ProcessPoolStats* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "processPoolStats: null output");
  ProcessPoolStats s;
  std::lock_guard<std::mutex> lock(registry().mu);
  for (DevicePool* p : registry().device) {
    if (device >= 0 && p->device() != device) continue;
    DevicePoolStats d;
    RINGGUARD_RETURN_IF_ERROR(p->stats(&d));
    s.device.reservedBytes += d.reservedBytes;
    s.device.usedBytes += d.usedBytes;
    s.device.highWaterBytes += d.highWaterBytes;
    s.device.allocationCount += d.allocationCount;
    s.device.totalAllocations += d.totalAllocations;
    s.device.allocationFailures += d.allocationFailures;
    ++s.devicePools;
  }
  for (PinnedHostPool* p : registry().pinned) {
    const PinnedHostPoolStats h = p->stats();
    s.pinned.reservedBytes += h.reservedBytes;
    s.pinned.usedBytes += h.usedBytes;
    s.pinned.cachedBytes += h.cachedBytes;
    s.pinned.highWaterBytes += h.highWaterBytes;
    s.pinned.allocationCount += h.allocationCount;
    s.pinned.totalAllocations += h.totalAllocations;
    s.pinned.allocationFailures += h.allocationFailures;
    ++s.pinnedPools;
  }
  *out = s;
  return Status::ok();
}

Status trimProcessPools(int device) {
  Status first = Status::ok();
  std::lock_guard<std::mutex> lock(registry().mu);
  for (DevicePool* p : registry().device) {
    if (device >= 0 && p->device() != device) continue;
    Status st = p->trim(0);
    if (!st.isOk() && first.isOk()) first = st;
  }
  for (PinnedHostPool* p : registry().pinned) {
    Status st = p->trim();
    if (!st.isOk() && first.isOk()) first = st;
  }
  return first;
}

}  // namespace ringguard
