#include "algorithms/flow_plan.h"

#include <algorithm>

#include "core/ring_schedule.h"

namespace ringguard {

FlowPlan::FlowPlan(int nranks, int rank, int numColumns, int numSteps, DataType dtype, size_t sliceBytes,
                   const void* input, void* output, std::vector<Flow> outgoing, std::vector<Flow> incoming,
                   std::function<FlowRoute(int column)> route)
    : n_(nranks),
      me_(rank),
      columns_(numColumns),
      steps_(numSteps),
      dtype_(dtype),
      esize_(dataTypeSize(dtype)),
      input_(static_cast<const uint8_t*>(input)),
      output_(static_cast<uint8_t*>(output)),
      out_(std::move(outgoing)),
      in_(std::move(incoming)),
      route_(std::move(route)) {
  sliceElems_ = RingSchedule::sliceElementsFor(esize_, sliceBytes);
  slices_ = 1;
  outAtStep_.assign(size_t(std::max(0, steps_)), -1);
  inAtStep_.assign(size_t(std::max(0, steps_)), -1);
  for (int side = 0; side < 2; ++side) {
    const std::vector<Flow>& flows = side == 0 ? out_ : in_;
    std::vector<int>& atStep = side == 0 ? outAtStep_ : inAtStep_;
    for (size_t i = 0; i < flows.size(); ++i) {
      const Flow& f = flows[i];
      slices_ = std::max(slices_, slicesOf(&f));
      if (f.step >= 0 && f.step < steps_) atStep[size_t(f.step)] = int(i);
      byColumn_.emplace(f.column, std::make_pair(side, int(i)));
    }
  }
}

int FlowPlan::slicesOf(const Flow* f) const {
  if (f == nullptr) return 0;
  return int(std::max<size_t>(1, (f->count + sliceElems_ - 1) / sliceElems_));
}

int FlowPlan::columnSlices(int column) const {
  const Flow* f = find(column);
  return f != nullptr ? slicesOf(f) : -1;  // not this rank's flow: its length is known to its endpoints only
}

const Flow* FlowPlan::outAt(int step) const {
  if (step < 0 || step >= steps_ || outAtStep_[size_t(step)] < 0) return nullptr;
  return &out_[size_t(outAtStep_[size_t(step)])];
}

const Flow* FlowPlan::inAt(int step) const {
  if (step < 0 || step >= steps_ || inAtStep_[size_t(step)] < 0) return nullptr;
  return &in_[size_t(inAtStep_[size_t(step)])];
}

const Flow* FlowPlan::find(int column) const {
  auto it = byColumn_.find(column);
  if (it == byColumn_.end()) return nullptr;
  return &(it->second.first == 0 ? out_ : in_)[size_t(it->second.second)];
}

std::vector<PlanItem> FlowPlan::passOrder() const {
  // (step, slice) order; each slice's receive is posted together with the same slice's send of the step,
  // so peers exchanging with each other post matching pairs.
  std::vector<PlanItem> order;
  for (int t = 0; t < steps_; ++t) {
    const int sends = slicesOf(outAt(t)), recvs = slicesOf(inAt(t));
    for (int k = 0; k < std::max(sends, recvs); ++k) order.push_back(PlanItem{t, k, k < recvs, k < sends});
  }
  return order;
}

int FlowPlan::sender(int column, int step) const {
  const FlowRoute r = route_(column);
  return r.step == step ? r.sender : -1;
}

int FlowPlan::receiver(int column, int step) const {
  const FlowRoute r = route_(column);
  return r.step == step ? r.receiver : -1;
}

int FlowPlan::sendColumn(int step) const {
  const Flow* f = outAt(step);
  return f ? f->column : -1;
}

int FlowPlan::recvColumn(int step) const {
  const Flow* f = inAt(step);
  return f ? f->column : -1;
}

ElementRange FlowPlan::range(int column, int slice) const {
  const Flow* f = find(column);
  if (f == nullptr) return ElementRange{};
  const size_t start = std::min(f->count, size_t(slice) * sliceElems_);
  return ElementRange{f->offset + start, std::min(f->count, start + sliceElems_) - start};
}

const uint8_t* FlowPlan::sendBytes(int column, int step, const ElementRange& r, bool* origin) const {
  *origin = true;  // every flow starts here: its bytes are the caller's input, retained until the end
  return input_ + r.offset * esize_;
}

RecvTarget FlowPlan::recvTarget(int column, int step, const ElementRange& r) const {
  RecvTarget t;
  t.dst = output_ + r.offset * esize_;
  t.inPlace = true;
  return t;
}

uint64_t FlowPlan::sliceSeq(int column, uint64_t collectiveSeq) const {
  const Flow* f = find(column);
  return f ? f->seq : collectiveSeq;
}

}  // namespace ringguard
