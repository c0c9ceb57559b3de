// Allreduce: the whole ring, reduce-scatter steps then all-gather steps, in one pass.
#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/eager.h"
#include "algorithms/ring_plan.h"
#include "algorithms/window_exchange.h"
#include "core/reduce.h"

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

namespace {

// Small: every rank gives every peer its whole input (in its window, or in its fingerprint frame), then
// reduces each ring column in the ring's order with the arguments the ring's hops use, so the bits are the
// pipeline's.
Status allreduceSmall(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& fp, const void* send,
                      void* recv, size_t count, DataType dtype, ReduceOp op) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype), bytes = count * esize;
  std::vector<std::vector<uint8_t>> in;
  RINGGUARD_RETURN_IF_ERROR(smallExchangeAll(route, ctx, fp, send, bytes, &in));
  // In place, the result overwrites this rank's input before the ring order is done with it: a copy.
  if (send == recv)
    in[size_t(me)].assign(static_cast<const uint8_t*>(send), static_cast<const uint8_t*>(send) + bytes);
  auto input = [&](int r) {
    return r == me && send != recv ? static_cast<const uint8_t*>(send) : in[size_t(r)].data();
  };
  const RingSchedule sched(n, count, esize, ctx.options->sliceBytes);
  for (int j = 0; j < n; ++j) {
    const ElementRange c = sched.column(j);
    if (c.count == 0) continue;
    const size_t off = c.offset * esize;
    uint8_t* dst = static_cast<uint8_t*>(recv) + off;
    // Hop t: rank j + t + 1 reduces its own input with what arrived (rank j's input at the first hop).
    for (int t = 0; t + 1 < n; ++t) {
      const uint8_t* local = input((j + t + 1) % n) + off;
      const uint8_t* incoming = t == 0 ? input(j) + off : dst;
      reduceHost(dtype, op, dst, local, incoming, c.count, t == n - 2, n, t == 0);
    }
  }
  return Status::ok();
}

}  // namespace

Status allreduce(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t count,
                 DataType dtype, ReduceOp op) {
  const Fingerprint fp = makeAllreduceFingerprint(op, dtype, count, issueOrder(ctx));
  const size_t bytes = count * dataTypeSize(dtype);
  const SmallRoute route = smallRoute(ctx, *exec, bytes, bytes);
  if (route != SmallRoute::kPipeline) return allreduceSmall(route, ctx, fp, send, recv, count, dtype, op);
  RINGGUARD_RETURN_IF_ERROR(exchangeFingerprints(ctx, fp));
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
