#pragma once
// The argument checks the collectives share (each collective's check composes them). Each returns
// kInvalidArgument with a message naming the argument; the communicator prefixes "<collective> on rank r".
#include <cstddef>
#include <cstdint>

#include "algorithms/collectives.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"

namespace ringguard {

Status checkDtype(DataType dtype);
// A valid op that reduces `dtype` (reduceSupported), else an error naming both and why; checkDtype first.
Status checkOp(ReduceOp op, DataType dtype);
// premul_sum needs two ranks: the one-rank collectives copy (the executors have no scaling pass).
Status checkOpRanks(ReduceOp op, int size);
// `what` is null while `count` elements are to be read or written through it.
Status checkBuffer(const char* what, const void* p, size_t count);
// Two buffers of the call that overlap without being the allowed in-place alias.
Status checkDisjoint(const char* a, const void* pa, size_t aBytes, const char* b, const void* pb,
                     size_t bBytes);
// A peer or root rank outside [0, size).
Status checkRank(const char* what, int r, int size);
// More than 2^30 slices of `count` elements at the communicator's slice size.
Status checkSlices(size_t count, DataType dtype, size_t sliceBytes);

}  // namespace ringguard
