// Broadcast: a pipelined chain root -> root + 1 -> ... -> root - 1 over one column. Each rank receives
// the slices straight into its output, verifies them there and forwards them; hop h of the chain is
// step h, so a repair replays a failed slice from the failed hop to the end of the chain.
#include <algorithm>
#include <cstring>

#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/eager.h"
#include "algorithms/pipeline.h"
#include "algorithms/window_exchange.h"
#include "core/copy_bytes.h"
#include "core/ring_schedule.h"

namespace ringguard {

namespace {

class ChainPlan final : public PipelinePlan {
 public:
  ChainPlan(int nranks, int rank, int root, size_t count, DataType dtype, size_t sliceBytes, int slots,
            const void* input, void* output)
      : n_(nranks),
        root_(root),
        pos_((rank - root + nranks) % nranks),
        count_(count),
        dtype_(dtype),
        esize_(dataTypeSize(dtype)),
        slots_(slots),
        input_(static_cast<const uint8_t*>(input)),
        output_(static_cast<uint8_t*>(output)) {
    sliceElems_ = RingSchedule::sliceElementsFor(esize_, sliceBytes);
    slices_ = int(std::max<size_t>(1, (count + sliceElems_ - 1) / sliceElems_));
  }

  int numSteps() const override { return n_ - 1; }
  int numColumns() const override { return 1; }
  int numSlices() const override { return slices_; }
  size_t slotBytes() const override { return 0; }  // every receive is in place
  DataType dtype() const override { return dtype_; }
  int nranks() const override { return n_; }

  // This rank receives at hop pos - 1 and sends at hop pos. The receives run `slots` ahead of the sends
  // that forward them, so the next slices arrive while this one is verified and sent on.
  std::vector<PlanItem> passOrder() const override {
    std::vector<PlanItem> order;
    const bool recvs = pos_ > 0, sends = pos_ < n_ - 1;
    const int ahead = recvs ? slots_ : 0;
    for (int k = 0; k < slices_ + ahead; ++k) {
      if (recvs && k < slices_) order.push_back(PlanItem{pos_ - 1, k, true, false});
      if (sends && k - ahead >= 0) order.push_back(PlanItem{pos_, k - ahead, false, true});
    }
    return order;
  }
  int sender(int column, int step) const override { return (root_ + step) % n_; }
  int receiver(int column, int step) const override { return (root_ + step + 1) % n_; }
  int lastStep(int column) const override { return n_ - 2; }
  int sendColumn(int step) const override { return step == pos_ && pos_ < n_ - 1 ? 0 : -1; }
  int recvColumn(int step) const override { return step == pos_ - 1 ? 0 : -1; }
  ElementRange range(int column, int slice) const override {
    const size_t start = std::min(count_, size_t(slice) * sliceElems_);
    return ElementRange{start, std::min(count_, start + sliceElems_) - start};
  }
  const uint8_t* sendBytes(int column, int step, const ElementRange& r, bool* origin) const override {
    *origin = pos_ == 0;
    return (pos_ == 0 ? input_ : output_) + r.offset * esize_;
  }
  // The root's output gets its input slice by slice as the slices are sealed and sent.
  uint8_t* originCopy(int column, const ElementRange& r) const override {
    return pos_ == 0 ? output_ + r.offset * esize_ : nullptr;
  }
  RecvTarget recvTarget(int column, int step, const ElementRange& r) const override {
    RecvTarget t;
    t.dst = output_ + r.offset * esize_;
    t.inPlace = true;
    t.forwarded = pos_ < n_ - 1;
    return t;
  }

 private:
  const int n_, root_, pos_;
  const size_t count_;
  const DataType dtype_;
  const size_t esize_;
  const int slots_;
  const uint8_t* input_;
  uint8_t* output_;
  size_t sliceElems_ = 1;
  int slices_ = 1;
};

}  // namespace

Status checkBroadcastArgs(const CollectiveShape& c, const void* send, const void* recv, size_t count,
                          DataType dtype, int root) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(dtype));
  RINGGUARD_RETURN_IF_ERROR(checkRank("root", root, c.size));
  if (c.rank == root) RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", send, count));
  RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", recv, count));
  RINGGUARD_RETURN_IF_ERROR(checkSlices(count, dtype, c.sliceBytes));
  if (c.rank != root || send == recv) return Status::ok();
  const size_t bytes = count * dataTypeSize(dtype);
  return checkDisjoint("send", send, bytes, "recv", recv, bytes);
}

Status broadcast(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t count,
                 DataType dtype, int root) {
  const Fingerprint fp =
      makeFingerprint(CollectiveKind::kBroadcast, ReduceOp::kSum, dtype, count, root, issueOrder(ctx));
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t bytes = count * dataTypeSize(dtype);
  const SmallRoute route = smallRoute(ctx, *exec, bytes, bytes);
  if (route != SmallRoute::kPipeline) {
    // Small: the root's input travels in its window or its fingerprint frames; the other ranks give none.
    // Per thread (eager.h): no allocation per call.
    thread_local std::vector<EagerPayload> out;
    thread_local std::vector<size_t> inBytes;
    thread_local std::vector<std::vector<uint8_t>> in;
    thread_local std::vector<uint8_t*> into;
    out.assign(size_t(n), EagerPayload{});
    inBytes.assign(size_t(n), 0);
    for (int p = 0; p < n; ++p) {
      if (me == root && p != me) out[size_t(p)] = EagerPayload{send, bytes};
    }
    if (me != root) inBytes[size_t(root)] = bytes;
    // Read from a window straight into place; a frame's payload is copied there from `in`.
    into.assign(size_t(n), nullptr);
    into[size_t(root)] = static_cast<uint8_t*>(recv);
    RINGGUARD_RETURN_IF_ERROR(smallExchange(route, ctx, fp, out, inBytes, &in, WindowReads{&into}));
    const void* value = me == root ? send : in[size_t(root)].empty() ? nullptr : in[size_t(root)].data();
    if (value != nullptr && value != recv && bytes > 0) copyBytes(recv, value, bytes);
    return Status::ok();
  }
  RINGGUARD_RETURN_IF_ERROR(exchangeFingerprints(ctx, fp));
  if (n == 1 || count == 0) {
    return me == root && send != recv ? exec->copy(recv, send, count * dataTypeSize(dtype)) : Status::ok();
  }
  // Out of place, the pipeline copies the root's input into its output as it sends it
  // (PipelinePlan::originCopy).
  const ChainPlan plan(n, me, root, count, dtype, ctx.options->sliceBytes, std::max(1, ctx.options->slots),
                       me == root ? send : recv, recv);
  return runPipeline(ctx, exec, plan, groupVerdicts(ctx, plan));
}

}  // namespace ringguard
