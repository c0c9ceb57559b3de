#include "ringguard/runtime/staged_allreduce.h"

#include <cstdint>

#include "algorithms/arguments.h"
#include "runtime/staged_pipeline.h"

namespace ringguard {

Status stagedAllreduce(Communicator& host, HostStager& stager, const void* send, void* recv, size_t count,
                       DataType dtype, ReduceOp op, size_t chunkBytes, StagedStats* stats) {
  StagedCall call("staged allreduce", send, recv, count, dtype, chunkBytes);
  call.reduces = true;
  call.op = op;
  Status refusal = checkStagedCall(call, host.size());
  const size_t esize = isValid(dtype) ? dataTypeSize(dtype) : 1;
  if (refusal.isOk() && send != recv)
    refusal = checkDisjoint("send", send, count * esize, "recv", recv, count * esize);

  // Out of place between the slot's two buffers: the copies back of chunk c-1 read one slot's result while
  // chunk c+1 is copied into that slot's input, so neither waits for the other.
  auto reduce = [&](const void* hostIn, void* hostOut, size_t elems) {
    return host.allreduce(hostIn, hostOut, elems, dtype, op);
  };
  auto copyOut = [&](size_t first, size_t elems, const void* hostOut, int slot) {
    return stager.fromHost(static_cast<uint8_t*>(recv) + first * esize, hostOut, elems * esize, slot);
  };
  return runStaged(host, stager, call, refusal, reduce, copyOut, stats);
}

}  // namespace ringguard
