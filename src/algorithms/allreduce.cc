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

// Small (one-shot): every rank gives every peer its whole input (in its window, or in its fingerprint frame),
// then reduces each ring column in the ring's order with the arguments the ring's hops use, so the bits are
// the pipeline's. A peer's input is reduced where the exchange verified it (in the peer's window: read
// once).
Status allreduceSmall(SmallRoute route, const CollectiveContext& ctx, const Fingerprint& fp, const void* send,
                      void* recv, size_t count, DataType dtype, ReduceOp op) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype), bytes = count * esize;
  thread_local std::vector<std::vector<uint8_t>> in;  // per thread (eager.h): no allocation per call
  thread_local std::vector<const uint8_t*> at;
  RINGGUARD_RETURN_IF_ERROR(smallExchangeAll(route, ctx, fp, send, bytes, &in, WindowReads{nullptr, &at}));
  // In place, the result overwrites this rank's input before the ring order is done with it: a copy.
  at[size_t(me)] = static_cast<const uint8_t*>(send);
  if (send == recv) {
    in[size_t(me)].assign(static_cast<const uint8_t*>(send), static_cast<const uint8_t*>(send) + bytes);
    at[size_t(me)] = in[size_t(me)].data();
  }
  auto input = [&](int r) { return at[size_t(r)]; };
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

// Two-shot, over the windows (docs/design/protocol.md, "Two-shot all-reduce on the windows"): rank r owns
// ring column r. A first exchange gives every owner its column of every peer's input (a reduce-scatter: each
// rank publishes N - 1 columns, one part per reader); the owner reduces it in the ring's order (the column
// starts at its own rank, the ring's hops in turn), reading each peer's column once where it lies, straight
// into its output; a second exchange (step 1) publishes the reduced column to every peer, which reads it
// into place (an all-gather). Every column is reduced by the same hops in the same order as the one-shot and
// the ring reduce it, whichever rank does it, so the bits are theirs.
Status allreduceTwoShot(const CollectiveContext& ctx, const Fingerprint& fp, const void* send, void* recv,
                        size_t count, DataType dtype, ReduceOp op) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype);
  const RingSchedule sched(n, count, esize, ctx.options->sliceBytes);
  const auto* input = static_cast<const uint8_t*>(send);
  auto* output = static_cast<uint8_t*>(recv);
  auto offsetOf = [&](int j) { return sched.column(j).offset * esize; };
  auto bytesOf = [&](int j) { return sched.column(j).count * esize; };

  // Per thread (eager.h): no allocation per call.
  thread_local std::vector<EagerPayload> out;
  thread_local std::vector<size_t> inBytes;
  thread_local std::vector<std::vector<uint8_t>> in;
  thread_local std::vector<const uint8_t*> at;
  thread_local std::vector<uint8_t*> into;
  out.assign(size_t(n), EagerPayload{});
  inBytes.assign(size_t(n), 0);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    out[size_t(p)] = EagerPayload{input + offsetOf(p), bytesOf(p)};
    inBytes[size_t(p)] = bytesOf(me);
  }
  RINGGUARD_RETURN_IF_ERROR(windowExchange(ctx, fp, out, inBytes, &in, WindowReads{nullptr, &at}));
  // In place, this rank's column of its input is read only by the first hop, as the accumulator it
  // overwrites element by element (reduceHost allows dst to alias b).
  at[size_t(me)] = input + offsetOf(me);
  uint8_t* mine = output + offsetOf(me);
  for (int t = 0; t + 1 < n; ++t) {
    const uint8_t* incoming = t == 0 ? at[size_t(me)] : mine;
    reduceHost(dtype, op, mine, at[size_t((me + t + 1) % n)], incoming, sched.column(me).count, t == n - 2, n,
               t == 0);
  }

  into.assign(size_t(n), nullptr);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    out[size_t(p)] = EagerPayload{mine, bytesOf(me)};  // one part, shared by every reader
    inBytes[size_t(p)] = bytesOf(p);
    into[size_t(p)] = output + offsetOf(p);
  }
  return windowExchange(ctx, fp, out, inBytes, &in, WindowReads{&into, nullptr, 1});
}

}  // namespace

Status allreduce(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t count,
                 DataType dtype, ReduceOp op) {
  const Fingerprint fp = makeAllreduceFingerprint(op, dtype, count, issueOrder(ctx));
  const size_t bytes = count * dataTypeSize(dtype);
  const SmallRoute route = smallRoute(ctx, *exec, bytes, bytes);
  if (route == SmallRoute::kWindow && windowAllreduceTwoShot(ctx.transport->size(), bytes))
    return allreduceTwoShot(ctx, fp, send, recv, count, dtype, op);
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
