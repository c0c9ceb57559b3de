#pragma once
// What ringguard's own memory pools hold, process-wide (device cudaMemPool_t's and pinned host blocks, which
// PyTorch's caching allocator neither sees nor trims), and their release: what python/ringguard/memory.py
// reports beside torch.cuda.memory_reserved() (docs/DOWNGRADE.md, "ringguard's pools beside PyTorch's").
// Implemented by the CUDA layer (src/cuda/pool_usage.cc, ringguard::cuda).
#include <cstdint>

#include "ringguard/core/status.h"

namespace ringguard {
namespace cuda {

struct PoolUsage {
  uint64_t reservedBytes = 0;       // memory held: handed out plus cached
  uint64_t usedBytes = 0;           // of which handed out
  uint64_t highWaterBytes = 0;      // the sum of each pool's own peak of usedBytes
  uint64_t allocations = 0;         // live allocations
  uint64_t allocationFailures = 0;  // allocations the driver refused (out of memory)
  int pools = 0;
};

struct ProcessPoolUsage {
  PoolUsage device;  // the device pools on the device asked for (every device: -1)
  PoolUsage pinned;  // every pinned pool (pinned memory belongs to no device)
};

// A consistent reading of the pools alive now.
Status readPoolUsage(int device, ProcessPoolUsage* out);

// Releases what the pools cache and nobody uses: every device pool on `device` (every device: -1) trimmed
// to zero cached bytes, every cached pinned block returned to the driver. Safe while collectives run. The
// first error is returned after trying all.
Status trimPools(int device);

}  // namespace cuda
}  // namespace ringguard
