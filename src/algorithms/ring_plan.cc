#include "algorithms/ring_plan.h"

#include <algorithm>

namespace ringguard {

RingPlan::RingPlan(Kind kind, const RingSchedule& schedule, int rank, DataType dtype, ReduceOp op,
                   const void* input, void* output, void* scratch)
    : kind_(kind),
      sched_(schedule),
      me_(rank),
      dtype_(dtype),
      op_(op),
      esize_(dataTypeSize(dtype)),
      input_(static_cast<const uint8_t*>(input)),
      output_(static_cast<uint8_t*>(output)),
      scratch_(static_cast<uint8_t*>(scratch)) {
  const int n = schedule.nranks();
  const int hops = schedule.numSteps() == 0 ? 0 : n - 1;
  first_ = kind == Kind::kAllgather ? n - 1 : 0;
  steps_ = kind == Kind::kAllreduce ? schedule.numSteps() : hops;
}

size_t RingPlan::slotBytes() const {
  // All-gather receives straight into the output. The largest slice this collective has, not the
  // configured slice size: a 12-byte allreduce with 1 GiB slices needs 12-byte slots.
  if (kind_ == Kind::kAllgather) return 0;
  const size_t largestColumn = std::max(sched_.column(0).count, sched_.column(sched_.nranks() - 1).count);
  return std::min(sched_.sliceElements(), largestColumn) * esize_;
}

std::vector<PlanItem> RingPlan::passOrder() const {
  // (step, slice) order: every slice of a step is in flight before the next step needs any of them.
  std::vector<PlanItem> order;
  order.reserve(size_t(steps_) * size_t(numSlices()));
  for (int t = 0; t < steps_; ++t) {
    for (int k = 0; k < numSlices(); ++k) order.push_back(PlanItem{t, k, true, true});
  }
  return order;
}

int RingPlan::blockOf(int column) const {
  if (kind_ == Kind::kAllreduce) return column;
  const int n = sched_.nranks();
  return (column + n - 1) % n;
}

size_t RingPlan::ownBlockOffset(const ElementRange& r) const {
  return (r.offset - sched_.column(me_).offset) * esize_;
}

const uint8_t* RingPlan::sendBytes(int column, int step, const ElementRange& r, bool* origin) const {
  *origin = step == 0;
  switch (kind_) {
    case Kind::kAllreduce:
      return (step == 0 ? input_ : output_) + byteOffset(r);
    case Kind::kReduceScatter:
      return (step == 0 ? input_ : scratch_) + byteOffset(r);
    case Kind::kAllgather:
      return step == 0 ? input_ + ownBlockOffset(r) : output_ + byteOffset(r);
  }
  return nullptr;
}

uint8_t* RingPlan::originCopy(int column, const ElementRange& r) const {
  // All-gather: this rank's block of the output is its input (never received into: its column's route
  // ends at the rank before this one).
  return kind_ == Kind::kAllgather ? output_ + byteOffset(r) : nullptr;
}

RecvTarget RingPlan::recvTarget(int column, int step, const ElementRange& r) const {
  const int n = sched_.nranks();
  const int t = first_ + step;
  RecvTarget target;
  target.forwarded = step + 1 < steps_;
  switch (kind_) {
    case Kind::kAllreduce:
      target.dst = output_ + byteOffset(r);
      target.local = input_ + byteOffset(r);
      target.reduce = sched_.isReduceStep(t);
      target.finalStep = sched_.isFinalReduceStep(t);
      break;
    case Kind::kReduceScatter:
      target.reduce = true;
      target.finalStep = t == n - 2;
      target.dst = target.finalStep ? output_ + ownBlockOffset(r) : scratch_ + byteOffset(r);
      target.local = input_ + byteOffset(r);
      break;
    case Kind::kAllgather:
      target.dst = output_ + byteOffset(r);
      target.inPlace = true;
      break;
  }
  return target;
}

int RingPlan::overwritesSendOf(int step) const {
  // Allreduce's all-gather writes the result over the region this rank sent during reduce-scatter.
  if (kind_ != Kind::kAllreduce || sched_.isReduceStep(step)) return -1;
  return step + 1 - sched_.nranks();
}

}  // namespace ringguard
