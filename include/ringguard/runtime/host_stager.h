#pragma once
// The copies of the staged collectives (ringguard/runtime/staged_allgather.h, staged_allreduce.h): the
// caller's buffers are moved to host staging buffers a chunk at a time, each chunk goes through a host
// communicator's verified collective, and the result comes back. A HostStager does the moving, so the same
// algorithms run on host memory (makeMemcpyStager(), the unit tests) and on device memory
// (cuda::makeDeviceStager, ringguard/runtime/device_stager.h).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ringguard/core/status.h"

namespace ringguard {

// Moves bytes between the caller's buffers and host staging buffers, in two slots (the pipeline's double
// buffers). A copy may be asynchronous: the algorithms wait for a slot's copies before they read (to host)
// or overwrite (from host) that slot's staging bytes.
class HostStager {
 public:
  virtual ~HostStager() = default;

  // Host staging memory (pinned, for a device stager); bytes > 0.
  virtual Status allocateHost(size_t bytes, void** ptr) = 0;
  virtual Status freeHost(void* ptr) = 0;
  // Starts copying `bytes` of the caller's `src` to host `dst`, as part of `slot` (0 or 1).
  virtual Status toHost(void* dst, const void* src, size_t bytes, int slot) = 0;
  // Starts copying `bytes` of host `src` to the caller's `dst`, as part of `slot`.
  virtual Status fromHost(void* dst, const void* src, size_t bytes, int slot) = 0;
  // Waits until every toHost (fromHost) copy started in `slot` so far has completed.
  virtual Status waitToHost(int slot) = 0;
  virtual Status waitFromHost(int slot) = 0;
};

// Copies with memcpy into heap memory: the algorithms over host buffers (tests, CPU-only builds).
std::unique_ptr<HostStager> makeMemcpyStager();

// What one staged collective did.
struct StagedStats {
  uint64_t chunks = 0;        // host collectives run (one for count == 0, so that every rank takes part)
  uint64_t chunkBytes = 0;    // the chunk size used, in bytes (a whole number of elements)
  uint64_t stagingBytes = 0;  // host staging memory held during the call
};

}  // namespace ringguard
