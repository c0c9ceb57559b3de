#pragma once
// The chunked allreduce staged through host memory: the `staged_chunked` variant of the `all_reduce`
// family (docs/DOWNGRADE.md). The caller's `count` elements are copied to host staging buffers a chunk at a
// time, each chunk is allreduced by a host communicator (the verified ring: CRC per slice, retransmission,
// fault injection all apply), and the reduced chunk is copied back. Its only memory is the host staging
// buffers: no device-side slots, scratch or CRC state, which is why the rules move the allreduce here when
// device memory is under pressure. The copies of chunk c+1 (to the host) and c-1 (back) overlap the host
// allreduce of chunk c.
#include <cstddef>

#include "ringguard/core/status.h"
#include "ringguard/core/types.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {

// The allreduce with `op` of `count` elements of `dtype` over every rank of `host` (a host communicator:
// its collectives take host memory), from `send` into `recv` (the same buffer: in place; otherwise they may
// not overlap), staged `chunkBytes` at a time (rounded down to whole elements) through `stager`. Every op
// the host allreduce takes: avg and premul_sum are applied per element by the host allreduce of each chunk,
// so the result is theirs. Synchronous: returns when every host allreduce has finished and every copy back
// to `recv` has completed (a device stager's last copies are then complete on its stream). Collective over
// `host`: every rank must call it with the same count, dtype, op and chunkBytes, in the same order relative
// to host's other collectives. Staging memory: 4 chunks (each slot's input and result: the copies back of
// chunk c-1 read one slot's result while chunk c+1 is copied into that slot's input). Before the first
// chunk the ranks all-gather a small header (whether their arguments and staging memory are good, count,
// chunk, dtype, op), so failures are the same on every rank and leave the host communicator usable:
// kInvalidArgument (naming the argument and the rank) for a null buffer with count > 0, an invalid dtype,
// an op the dtype does not take, premul_sum on one rank, chunkBytes smaller than one element or
// overlapping buffers, and kPeerError ("rank r refused the call") on the other ranks; the stager's error for
// staging memory it cannot provide; kInvalidArgument on every rank naming both calls when ranks differ in
// count, chunk, dtype or op (premul_sum: its factor); a failed host allreduce's Status (kCorruption,
// kTimeout, ...) as the host communicator returns it.
Status stagedAllreduce(Communicator& host, HostStager& stager, const void* send, void* recv, size_t count,
                       DataType dtype, ReduceOp op, size_t chunkBytes, StagedStats* stats = nullptr);

}  // namespace ringguard
