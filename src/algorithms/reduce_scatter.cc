// Reduce-scatter: the ring's reduce steps over caller-laid-out blocks; rank r finishes block r.
#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/eager.h"
#include "algorithms/ring_plan.h"
#include "algorithms/window_exchange.h"
#include "core/reduce.h"

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

namespace {

// Small: every rank gives each peer that peer's block (in its window or its fingerprint frame), then reduces
// its own block in the order the ring does (block b rides column b + 1, which starts at rank b + 1), with the
// arguments the ring's hops use, so the bits are the pipeline's. A peer's block is reduced where the exchange
// verified it (in the peer's window: read once).
Status reduceScatterSmall(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& fp,
                          const void* send, void* recv, size_t recvCount, DataType dtype, ReduceOp op) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t bytes = recvCount * dataTypeSize(dtype);
  const auto* input = static_cast<const uint8_t*>(send);
  // Per thread (eager.h): no allocation per call.
  thread_local std::vector<EagerPayload> out;
  thread_local std::vector<size_t> inBytes;
  thread_local std::vector<std::vector<uint8_t>> in;
  thread_local std::vector<const uint8_t*> at;
  out.resize(size_t(n));
  for (int p = 0; p < n; ++p) out[size_t(p)] = EagerPayload{input + size_t(p) * bytes, p == me ? 0 : bytes};
  inBytes.assign(size_t(n), bytes);
  inBytes[size_t(me)] = 0;
  RINGGUARD_RETURN_IF_ERROR(smallExchange(route, ctx, fp, out, inBytes, &in, WindowReads{nullptr, &at}));
  // In place, recv is this rank's block of send, which the first hops overwrite before the last reads it:
  // a copy.
  const uint8_t* own = input + size_t(me) * bytes;
  at[size_t(me)] = own;
  if (own == recv) {
    in[size_t(me)].assign(own, own + bytes);
    at[size_t(me)] = in[size_t(me)].data();
  }
  auto block = [&](int r) { return at[size_t(r)]; };
  auto* dst = static_cast<uint8_t*>(recv);
  const int start = (me + 1) % n;
  for (int t = 0; t + 1 < n; ++t) {
    const uint8_t* local = block((start + t + 1) % n);
    const uint8_t* incoming = t == 0 ? block(start) : dst;
    reduceHost(dtype, op, dst, local, incoming, recvCount, t == n - 2, n, t == 0);
  }
  return Status::ok();
}

}  // namespace

Status reduceScatter(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv,
                     size_t recvCount, DataType dtype, ReduceOp op) {
  const Fingerprint fp =
      makeFingerprint(CollectiveKind::kReduceScatter, op, dtype, recvCount, kNoRoot, issueOrder(ctx));
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype), bytes = recvCount * esize;
  const SmallRoute route = smallRoute(ctx, *exec, bytes, bytes * size_t(n - 1));
  if (route != SmallRoute::kPipeline) {
    return reduceScatterSmall(route, ctx, fp, send, recv, recvCount, dtype, op);
  }
  RINGGUARD_RETURN_IF_ERROR(exchangeFingerprints(ctx, fp));
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
