#pragma once
// The chunked all-gather staged through host memory: the `staged_chunked` variant of the `all_gather`
// family (docs/DOWNGRADE.md). Every rank's `count` elements are copied to host staging buffers a chunk at
// a time, each chunk is all-gathered by a host communicator (the verified ring: CRC per slice,
// retransmission, fault injection all apply), and every rank's piece of the host result is copied back to
// its place in the output. It moves the all-gather's traffic off a saturated device transport onto the
// host one; the copies of chunk c+1 (to the host) and c-1 (back) overlap the host all-gather of chunk c.
#include <cstddef>

#include "ringguard/core/status.h"
#include "ringguard/core/types.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {

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
Status stagedAllgather(Communicator& host, HostStager& stager, const void* send, void* recv, size_t count,
                       DataType dtype, size_t chunkBytes, StagedStats* stats = nullptr);

}  // namespace ringguard
