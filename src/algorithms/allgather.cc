// All-gather: the ring's copy steps; every received slice lands in the output and is verified there.
#include <cstring>

#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/eager.h"
#include "algorithms/ring_plan.h"
#include "algorithms/window_exchange.h"
#include "core/copy_bytes.h"

namespace ringguard {

Status checkAllgatherArgs(const CollectiveShape& c, const void* send, const void* recv, size_t sendCount,
                          DataType dtype) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(dtype));
  const size_t total = sendCount * size_t(c.size);
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", send, sendCount));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", recv, total));
  RINGGUARD_RETURN_IF_ERROR(checkSlices(sendCount, dtype, c.sliceBytes));
  const size_t esize = dataTypeSize(dtype);
  if (sendCount > 0 && send == static_cast<const uint8_t*>(recv) + size_t(c.rank) * sendCount * esize)
    return Status::ok();  // in place: send is this rank's block of recv
  return checkDisjoint("send", send, sendCount * esize, "recv", recv, total * esize);
}

Status allgather(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t sendCount,
                 DataType dtype) {
  const Fingerprint fp =
      makeFingerprint(CollectiveKind::kAllgather, ReduceOp::kSum, dtype, sendCount, kNoRoot, issueOrder(ctx));
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype), bytes = sendCount * esize;
  const SmallRoute route = smallRoute(ctx, *exec, bytes, bytes);
  if (route != SmallRoute::kPipeline) {
    // Small: every rank's block goes to every peer in its window or its fingerprint frame.
    // Read from a window straight into place; a frame's payload is copied there from `in`.
    auto* output = static_cast<uint8_t*>(recv);
    // Per thread (eager.h): no allocation per call.
    thread_local std::vector<uint8_t*> into;
    into.resize(size_t(n));
    for (int r = 0; r < n; ++r) into[size_t(r)] = output + size_t(r) * bytes;
    thread_local std::vector<std::vector<uint8_t>> in;
    RINGGUARD_RETURN_IF_ERROR(smallExchangeAll(route, ctx, fp, send, bytes, &in, WindowReads{&into}));
    for (int r = 0; r < n && bytes > 0; ++r) {
      const void* block = r == me ? send : in[size_t(r)].empty() ? nullptr : in[size_t(r)].data();
      if (block != nullptr && into[size_t(r)] != block) copyBytes(into[size_t(r)], block, bytes);
    }
    return Status::ok();
  }
  RINGGUARD_RETURN_IF_ERROR(exchangeFingerprints(ctx, fp));
  if (n == 1 || sendCount == 0) {
    // This rank's block of the result is its input; nothing crosses a link.
    uint8_t* own = static_cast<uint8_t*>(recv) + size_t(me) * bytes;
    return own == send ? Status::ok() : exec->copy(own, send, bytes);
  }
  // Out of place, the pipeline copies the input into this rank's block slice by slice as it seals and
  // sends it (PipelinePlan::originCopy).
  const RingSchedule sched = RingSchedule::blocks(n, sendCount, esize, ctx.options->sliceBytes);
  const RingPlan plan(RingPlan::Kind::kAllgather, sched, me, dtype, ReduceOp::kSum, send, recv, nullptr);
  return runPipeline(ctx, exec, plan, groupVerdicts(ctx, plan));
}

}  // namespace ringguard
