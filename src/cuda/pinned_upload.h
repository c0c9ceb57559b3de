#pragma once
// Small host-to-device copies that never take the driver's pageable path: a cudaMemcpyAsync from pageable
// memory "may synchronize with the stream" to stage the bytes (CUDA runtime API, "API synchronization
// behavior"), i.e. wait on the host for the work queued before it. The replica check's work tables
// (crc32ManyDevice) are copied once per check on the training stream, where such a wait takes away the
// CPU's lead over the GPU at every check. Here the bytes go into a pinned block first; the block is reused
// only once an event recorded behind its copy has completed (the copy has read it). Private to the CUDA
// layer.
#include <cuda_runtime.h>

#include <cstddef>

#include "ringguard/core/status.h"

namespace ringguard {

// Copies `bytes` from host memory `src` (any kind; free to change once this returns) to device memory `dst`,
// ordered on `stream` (of the current device), without waiting for the stream. Thread-safe.
// kInvalidArgument on a stream being captured into a CUDA graph (a replay would read a reused block).
Status pinnedUploadAsync(void* dst, const void* src, size_t bytes, cudaStream_t stream);

}  // namespace ringguard
