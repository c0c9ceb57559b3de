#pragma once
// What the staged collectives (staged_allgather.cc, staged_allreduce.cc) share: their argument checks, the
// header every rank all-gathers before the first chunk, the two slots of pinned staging buffers, and the
// double-buffered chunk loop. Each collective supplies only its host collective of one chunk and its copies
// of one chunk's result back.
#include <cstddef>
#include <functional>

#include "ringguard/core/status.h"
#include "ringguard/core/types.h"
#include "ringguard/runtime/communicator.h"
#include "ringguard/runtime/host_stager.h"

namespace ringguard {

// One staged call, as this rank makes it.
struct StagedCall {
  StagedCall(const char* name, const void* send, void* recv, size_t count, DataType dtype, size_t chunkBytes)
      : name(name), send(send), recv(recv), count(count), dtype(dtype), chunkBytes(chunkBytes) {}

  const char* name;  // "staged all-gather": the prefix of every error ("<name> on rank r: ...")
  const void* send;
  void* recv;
  size_t count;  // elements of `send`
  DataType dtype;
  size_t chunkBytes;     // as called: the ranks compare it
  bool reduces = false;  // whether `op` is part of the call (checked and compared across ranks)
  ReduceOp op = ReduceOp::kSum;
  size_t resultChunks = 1;  // a slot's result buffer holds this many chunks (all-gather: size())
};

// The checks every staged call makes (kInvalidArgument naming the argument): a valid dtype; for a reduction
// an op the dtype takes and not premul_sum on one rank; no null buffer with count > 0; a chunk of at least
// one element; count x resultChunks elements whose bytes do not overflow.
Status checkStagedCall(const StagedCall& call, int size);

// Enqueues (through the stager, in `slot`) the copies of one chunk's host result `hostOut` back to the
// caller's buffers: the chunk holds elements [first, first + elems) of every rank's block.
using StagedCopyOut = std::function<Status(size_t first, size_t elems, const void* hostOut, int slot)>;
// The host collective of one chunk of `elems` elements, from `hostIn` into `hostOut`.
using StagedChunk = std::function<Status(const void* hostIn, void* hostOut, size_t elems)>;

// Runs `call`: allocates the two slots' staging buffers (an input chunk and `resultChunks` result chunks
// each), all-gathers the header over `host` (`refusal` is this rank's own error, OK when its arguments are
// good), then per chunk c: the copy to the host of chunk c+1 is enqueued before the host collective of chunk
// c, and the copies back of chunk c after it, so both overlap the next host collective; a slot is reused
// only after its copies have completed. Returns once every copy back has completed.
Status runStaged(Communicator& host, HostStager& stager, const StagedCall& call, Status refusal,
                 const StagedChunk& chunk, const StagedCopyOut& copyOut, StagedStats* stats);

}  // namespace ringguard
