#include "cuda/pool_registry.h"

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

std::vector<DevicePool*>& listOf(DevicePool*) { return registry().device; }
std::vector<PinnedHostPool*>& listOf(PinnedHostPool*) { return registry().pinned; }

template <typename Pool>
void join(Pool* pool) {
  std::lock_guard<std::mutex> lock(registry().mu);
  listOf(pool).push_back(pool);
}

template <typename Pool>
void leave(Pool* pool) {
  std::lock_guard<std::mutex> lock(registry().mu);
  std::vector<Pool*>& list = listOf(pool);
  list.erase(std::remove(list.begin(), list.end(), pool), list.end());
}

}  // namespace

namespace pool_registry_detail {
void join(DevicePool* pool) { ringguard::join(pool); }
void leave(DevicePool* pool) { ringguard::leave(pool); }
void join(PinnedHostPool* pool) { ringguard::join(pool); }
void leave(PinnedHostPool* pool) { ringguard::leave(pool); }
}  // namespace pool_registry_detail

namespace {

// Adds b to a, field by field.
void accumulate(DevicePoolStats* a, const DevicePoolStats& b) {
  for (auto field : {&DevicePoolStats::reservedBytes, &DevicePoolStats::usedBytes,
                     &DevicePoolStats::highWaterBytes, &DevicePoolStats::allocationCount,
                     &DevicePoolStats::totalAllocations, &DevicePoolStats::allocationFailures}) {
    a->*field += b.*field;
  }
}
void accumulate(PinnedHostPoolStats* a, const PinnedHostPoolStats& b) {
  for (auto field : {&PinnedHostPoolStats::reservedBytes, &PinnedHostPoolStats::usedBytes,
                     &PinnedHostPoolStats::cachedBytes, &PinnedHostPoolStats::highWaterBytes,
                     &PinnedHostPoolStats::allocationCount, &PinnedHostPoolStats::totalAllocations,
                     &PinnedHostPoolStats::allocationFailures}) {
    a->*field += b.*field;
  }
}

}  // namespace

Status processPoolStats(int device, ProcessPoolStats* out) {
  if (out == nullptr) return Status(StatusCode::kInvalidArgument, "processPoolStats: null output");
  ProcessPoolStats s;
  std::lock_guard<std::mutex> lock(registry().mu);
  for (DevicePool* p : registry().device) {
    if (device >= 0 && p->device() != device) continue;
    DevicePoolStats d;
    RINGGUARD_RETURN_IF_ERROR(p->stats(&d));
    accumulate(&s.device, d);
    ++s.devicePools;
  }
  for (PinnedHostPool* p : registry().pinned) {
    accumulate(&s.pinned, p->stats());
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
