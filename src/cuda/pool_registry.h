#pragma once
// Every live DevicePool and PinnedHostPool of the process, so that the memory ringguard holds is visible
// beside PyTorch's own (torch.cuda.memory_reserved()) and released with it (torch.cuda.empty_cache(), or
// ringguard.empty_cache()): the pools are cudaMemPool_t's and pinned blocks of ringguard's own, which
// PyTorch's caching allocator neither sees nor trims. Pools join when they are made and leave when they are
// destroyed; nothing else registers (docs/DOWNGRADE.md, "ringguard's pools beside PyTorch's").
#include "cuda/memory_pool.h"
#include "ringguard/core/status.h"

namespace ringguard {

struct ProcessPoolStats {
  // Summed over the device pools on the device asked for (every device: -1). highWaterBytes is the sum of
  // each pool's own peak (an upper bound of the peak of the sum).
  DevicePoolStats device;
  PinnedHostPoolStats pinned;  // summed over every pinned pool (pinned memory belongs to no device)
  int devicePools = 0;
  int pinnedPools = 0;
};

// A consistent reading of the pools alive now.
Status processPoolStats(int device, ProcessPoolStats* out);

// Releases what the pools cache and nobody uses: every device pool on `device` (every device: -1) trimmed
// to zero cached bytes (memory in use and stream-ordered frees not yet reached stay), every cached pinned
// block returned to the driver. Safe while collectives run. The first error is returned after trying all.
Status trimProcessPools(int device = -1);

namespace pool_registry_detail {
void join(DevicePool* pool);
void leave(DevicePool* pool);
void join(PinnedHostPool* pool);
void leave(PinnedHostPool* pool);
}  // namespace pool_registry_detail

}  // namespace ringguard
