// Reduce-scatter: the ring's reduce steps over caller-laid-out blocks; rank r finishes block r.
#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/ring_plan.h"

namespace ringguard {

Status checkReduceScatterArgs(const CollectiveShape& c, const void* send, const void* recv, size_t recvCount,
                              DataType dtype, ReduceOp op) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(dtype));
  RINGGUARD_RETURN_IF_ERROR(checkOp(op, dtype));
  RINGGUARD_RETURN_IF_ERROR(checkOpRanks(op, c.size));
  const size_t total = recvCount * size_t(c.size);
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", send, total));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", recv, recvCount));
  RINGGUARD_RETURN_IF_ERROR(checkSlices(recvCount, dtype, c.sliceBytes));
  const size_t esize = dataTypeSize(dtype);
  if (recvCount > 0 && recv == static_cast<const uint8_t*>(send) + size_t(c.rank) * recvCount * esize)
    return Status::ok();  // in place: recv is this rank's block of send
  return checkDisjoint("send", send, total * esize, "recv", recv, recvCount * esize);
}

Status reduceScatter(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv,
                     size_t recvCount, DataType dtype, ReduceOp op) {
  RINGGUARD_RETURN_IF_ERROR(exchangeFingerprints(
      ctx, makeFingerprint(CollectiveKind::kReduceScatter, op, dtype, recvCount, kNoRoot, issueOrder(ctx))));
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype), bytes = recvCount * esize;
  const uint8_t* own = static_cast<const uint8_t*>(send) + size_t(me) * bytes;
  if (n == 1 || recvCount == 0) return own == recv ? Status::ok() : exec->copy(recv, own, bytes);
  // The blocks this rank forwards accumulate in scratch, so the caller's recv needs only its own block.
  void* scratch = nullptr;
  RINGGUARD_RETURN_IF_ERROR(exec->scratch(bytes * size_t(n), &scratch));
  const RingSchedule sched = RingSchedule::blocks(n, recvCount, esize, ctx.options->sliceBytes);
  const RingPlan plan(RingPlan::Kind::kReduceScatter, sched, me, dtype, op, send, recv, scratch);
  return runPipeline(ctx, exec, plan, groupVerdicts(ctx, plan));
}

}  // namespace ringguard
