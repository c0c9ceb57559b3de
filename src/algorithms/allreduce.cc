// Allreduce: the whole ring, reduce-scatter steps then all-gather steps, in one pass.
#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/ring_plan.h"

namespace ringguard {

Status checkAllreduceArgs(const CollectiveShape& c, const void* send, const void* recv, size_t count,
                          DataType dtype, ReduceOp op) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(dtype));
  RINGGUARD_RETURN_IF_ERROR(checkOp(op, dtype));
  RINGGUARD_RETURN_IF_ERROR(checkOpRanks(op, c.size));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", send, count));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", recv, count));
  RINGGUARD_RETURN_IF_ERROR(checkSlices(count / size_t(c.size), dtype, c.sliceBytes));
  if (send == recv) return Status::ok();
  const size_t bytes = count * dataTypeSize(dtype);
  return checkDisjoint("send", send, bytes, "recv", recv, bytes);
}

Status allreduce(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t count,
                 DataType dtype, ReduceOp op) {
  RINGGUARD_RETURN_IF_ERROR(
      exchangeFingerprints(ctx, makeAllreduceFingerprint(op, dtype, count, issueOrder(ctx))));
  const size_t bytes = count * dataTypeSize(dtype);
  if (ctx.transport->size() == 1 || count == 0) {
    // Nothing crosses a link; avg over one rank divides by 1.
    return send == recv ? Status::ok() : exec->copy(recv, send, bytes);
  }
  const RingSchedule sched(ctx.transport->size(), count, dataTypeSize(dtype), ctx.options->sliceBytes);
  const RingPlan plan(RingPlan::Kind::kAllreduce, sched, ctx.transport->rank(), dtype, op, send, recv,
                      nullptr);
  return runPipeline(ctx, exec, plan, groupVerdicts(ctx, plan));
}

}  // namespace ringguard
