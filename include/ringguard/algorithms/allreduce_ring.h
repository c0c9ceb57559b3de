#pragma once
// The CRC32-verified, pipelined, double-buffered ring AllReduce (docs/design/protocol.md).
#include <cstddef>

#include "ringguard/algorithms/collective.h"
#include "ringguard/algorithms/executor.h"
#include "ringguard/core/types.h"

namespace ringguard {

// Runs one AllReduce over ctx.transport. `send` may equal `recv` (in place). Arguments must already be
// valid (the communicator checks them). On success every rank's `recv` holds the result, bit-identical
// to a fault-free run; on failure every rank returns an error and `recv` is unspecified.
Status allreduceRing(const CollectiveContext& ctx, Executor* executor, const void* send, void* recv,
                     size_t count, DataType dtype, ReduceOp op);

}  // namespace ringguard
