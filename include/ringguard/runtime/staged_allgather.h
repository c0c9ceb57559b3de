#pragma once
// The chunked all-gather staged through host memory: the `staged_chunked` variant of the `all_gather`
// family (docs/DOWNGRADE.md). Every rank's `count` elements are copied to host staging buffers a chunk at
// a time, each chunk is all-gathered by a host communicator (the verified ring: CRC per slice,
// retransmission, fault injection all apply), and every rank's piece of the host result is copied back to
// its place in the output. It moves the all-gather's traffic off a saturated device transport onto the
// host one; the copies of chunk c+1 (to the host) and c-1 (back) overlap the host all-gather of chunk c.
//
// The copies go through an AllgatherStager, so the same algorithm runs on host memory (memcpyStager(),
// the unit tests) and on device memory (cuda::makeDeviceStager, ringguard/runtime/device_staged_allgather.h).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "ringguard/core/status.h"
#include "ringguard/core/types.h"
#include "ringguard/runtime/communicator.h"

namespace ringguard {

// Moves bytes between the caller's buffers and host staging buffers, in two slots (the pipeline's double
// buffers). A copy may be asynchronous: the algorithm waits for a slot's copies before it reads (to host)
// or overwrites (from host) that slot's staging bytes.
class AllgatherStager {
 public:
  virtual ~AllgatherStager() = default;

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

// Copies with memcpy into heap memory: the algorithm over host buffers (tests, CPU-only builds).
std::unique_ptr<AllgatherStager> makeMemcpyStager();

struct StagedAllgatherStats {
  uint64_t chunks = 0;        // host all-gathers run (one for count == 0, so that every rank takes part)
  uint64_t chunkBytes = 0;    // the chunk size used, in bytes (a whole number of elements)
  uint64_t stagingBytes = 0;  // host staging memory held during the call
};

// The all-gather of `count` elements of `dtype` from every rank of `host` (a host communicator: its
// collectives take host memory) into `recv` (host->size() blocks of `count` elements, rank r's at
// r * count), staged `chunkBytes` at a time (rounded down to whole elements) through `stager`. Synchronous:
// returns when every host all-gather has finished and every copy back to `recv` has completed (a device
// stager's last copies are then complete on its stream). Collective over `host`: every rank must call it
// with the same count, dtype and chunkBytes, in the same order relative to host's other collectives.
// Staging memory: 2 x (size() + 1) chunks. `send` may not overlap `recv` except as recv + rank * count
// (in place). Before the first chunk the ranks all-gather a small header (whether their arguments and
// staging memory are good, count, chunk, dtype), so failures are the same on every rank and leave the host
// communicator usable: kInvalidArgument (naming the argument and the rank) for a null buffer with count > 0,
// an invalid dtype, chunkBytes smaller than one element, or a count whose N x count bytes overflow, and
// kPeerError ("rank r refused the call") on the other ranks; the stager's error for staging memory it cannot
// provide; kInvalidArgument on every rank naming both calls when ranks differ in count, chunk or dtype; a
// failed host all-gather's Status (kCorruption, kTimeout, ...) as the host communicator returns it.
Status stagedAllgather(Communicator& host, AllgatherStager& stager, const void* send, void* recv,
                       size_t count, DataType dtype, size_t chunkBytes,
                       StagedAllgatherStats* stats = nullptr);

}  // namespace ringguard
