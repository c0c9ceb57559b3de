#include "algorithms/pipeline.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "core/logging.h"
#include "core/trace_events.h"

namespace ringguard {

namespace {

// Adds the time the enclosing scope took to a counter.
class ScopedNs {
 public:
  explicit ScopedNs(uint64_t* sink) : sink_(sink), start_(std::chrono::steady_clock::now()) {}
  ~ScopedNs() {
    *sink_ += uint64_t(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_)
            .count());
  }

 private:
  uint64_t* sink_;
  std::chrono::steady_clock::time_point start_;
};

// One collective's pipeline on one rank. Items are (step, slice) pairs, indexed step * S + slice: the
// send trailer of item i is sendTrailer(i), the verdict of the receive of item i is verdict(i).
class Pipeline {
 public:
  Pipeline(const CollectiveContext& ctx, Executor* exec, const PipelinePlan& plan)
      : ctx_(ctx),
        exec_(exec),
        plan_(plan),
        t_(ctx.transport),
        me_(ctx.transport->rank()),
        esize_(dataTypeSize(plan.dtype())),
        S_(plan.numSlices()),
        T_(plan.numSteps()),
        W_(std::max(1, ctx.options->slots)) {}

  Status run(const VerdictExchange& exchange);

 private:
  size_t item(int step, int slice) const { return size_t(step) * S_ + slice; }
  SliceId idOf(int column, int step, int slice, size_t bytes, int attempt) const {
    return SliceId{plan_.sliceSeq(column, ctx_.seq),
                   uint32_t(step),
                   uint32_t(slice),
                   uint32_t(column),
                   uint32_t(bytes),
                   uint16_t(attempt)};
  }

  Status postSend(int step, int slice, int attempt, bool retransmit);
  Status postRecv(int step, int slice, int slotIndex);
  Status apply(int step, int slice, int attempt, int slotIndex);
  Status copyDeferred();
  Status waitSend(size_t idx, void** lastEvent = nullptr);
  Status waitAllSends();
  Status collectVerdicts();
  Status pass();
  Status repairRound(int attempt, const std::vector<ReplayEntry>& plan);

  const CollectiveContext& ctx_;
  Executor* exec_;
  const PipelinePlan& plan_;
  Transport* t_;
  const int me_;
  const size_t esize_;
  const int S_, T_, W_;
  std::vector<FrameRequest> sendReqs_;
  std::vector<FrameRequest> slotReqs_;
  std::vector<uint8_t> injected_;         // per received item: a corruption was injected into it
  std::vector<size_t> appliedThisRound_;  // received items whose verdicts are still to be read
  std::vector<SliceFailure> failures_;    // this rank's, current round
  struct DeferredCopy {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
    bool cold;  // copyCold: the collective does not read dst again
  };
  std::vector<DeferredCopy> deferredCopies_;  // origin copies to make once the posted sends are flushed
  Counters local_;
};

Status Pipeline::postSend(int step, int slice, int attempt, bool retransmit) {
  const size_t idx = item(step, slice);
  const int column = plan_.sendColumn(step);
  const int peer = plan_.receiver(column, step);
  const ElementRange r = plan_.range(column, slice);
  const size_t bytes = r.count * esize_;
  bool origin = false;
  const uint8_t* ptr = plan_.sendBytes(column, step, r, &origin);
  if (retransmit) {
    // The retained bytes with their original CRC: every later write to this region was skipped.
    RINGGUARD_RETURN_IF_ERROR(exec_->retag(idx, uint16_t(attempt)));
    local_.retransmitted++;
    trace::instant(trace::Kind::kRetransmit, "retransmit", ctx_.track, ctx_.seq, peer, step, slice, attempt);
  } else if (origin) {
    uint8_t* copy = plan_.originCopy(column, r);
    const bool streams = plan_.numSlices() > 1;
    if (copy != nullptr && copy != ptr && streams && exec_->memory() != MemoryKind::kHost) {
      // A column of several slices streams through the cache: the copy first, so the seal and the send
      // read the more recently used bytes.
      RINGGUARD_RETURN_IF_ERROR(exec_->copy(copy, ptr, bytes));
      ptr = copy;
    } else if (copy != nullptr && copy != ptr) {
      // A column of one slice stays cached from call to call: it is sealed and sent from the input, and
      // copied once the send is posted (pass()), off the peer's path. Sending from the copy made the next
      // call's copy wait for the invalidation of the lines the peer read. In host memory a column of
      // several slices goes the same way, its copy stored past the cache (copyCold): the seal read the
      // input slice into the cache, the send and the copy read it there, and the output's lines are
      // written without being read first (a pass over the slice less than copying first).
      deferredCopies_.push_back(DeferredCopy{copy, ptr, bytes, streams});
    }
    RINGGUARD_RETURN_IF_ERROR(exec_->sealFirst(idx, ptr, idOf(column, step, slice, bytes, attempt)));
  }
  if (const FaultInjector* inj = ctx_.injector) {
    if (int ms = inj->delayMs(plan_.sliceSeq(column, ctx_.seq), step, slice, peer, attempt)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      local_.delayed++;
    }
  }
  local_.slicesSent++;
  local_.bytesSent += bytes;
  return t_->postSend(peer, ptr, bytes, exec_->sendTrailer(idx), &sendReqs_[idx]);
}

Status Pipeline::postRecv(int step, int slice, int slotIndex) {
  const int column = plan_.recvColumn(step);
  const ElementRange r = plan_.range(column, slice);
  const RecvTarget target = plan_.recvTarget(column, step, r);
  const size_t bytes = r.count * esize_;
  void* into = target.inPlace ? static_cast<void*>(target.dst) : exec_->slot(slotIndex);
  return t_->postRecv(plan_.sender(column, step), into, bytes, exec_->slotTrailer(slotIndex),
                      &slotReqs_[size_t(slotIndex)]);
}

Status Pipeline::copyDeferred() {
  for (const DeferredCopy& c : deferredCopies_) {
    RINGGUARD_RETURN_IF_ERROR(c.cold ? exec_->copyCold(c.dst, c.src, c.bytes)
                                     : exec_->copy(c.dst, c.src, c.bytes));
  }
  deferredCopies_.clear();
  return Status::ok();
}

// Waits until the send of item `idx` completed, and orders the executor's later work after it (a device
// transport on a stream of its own has it complete in that stream's order only).
Status Pipeline::waitSend(size_t idx, void** lastEvent) {
  {
    ScopedNs timed(&local_.transferWaitNs);
    const int step = int(idx / S_);
    const int to = plan_.receiver(plan_.sendColumn(step), step);
    RINGGUARD_RETURN_IF_ERROR(waitFrame(
        ctx_, &sendReqs_[idx],
        [&] {
          return "slice " + std::to_string(idx % S_) + " of step " + std::to_string(step) +
                 " to be taken by rank " + std::to_string(to);
        },
        to));
  }
  void* event = sendReqs_[idx].streamEvent();
  if (lastEvent != nullptr && event == *lastEvent) return Status::ok();
  if (lastEvent != nullptr) *lastEvent = event;
  return exec_->waitFor(event);
}

Status Pipeline::waitAllSends() {
  void* last = nullptr;  // frames posted together share one event: wait for each launch once
  for (size_t i = 0; i < sendReqs_.size(); ++i) RINGGUARD_RETURN_IF_ERROR(waitSend(i, &last));
  return Status::ok();
}

Status Pipeline::apply(int step, int slice, int attempt, int slotIndex) {
  const int column = plan_.recvColumn(step);
  const int from = plan_.sender(column, step);
  trace::Span span(trace::Kind::kSlice, "slice", ctx_.track, ctx_.seq);
  if (trace::on()) {
    trace::Event& e = span.event();
    e.a = step;
    e.b = slice;
    e.c = from;
    e.d = attempt;
    e.value = plan_.range(column, slice).count * esize_;
  }
  {
    ScopedNs timed(&local_.transferWaitNs);
    RINGGUARD_RETURN_IF_ERROR(waitFrame(
        ctx_, &slotReqs_[size_t(slotIndex)],
        [&] {
          return "slice " + std::to_string(slice) + " of step " + std::to_string(step) + " from rank " +
                 std::to_string(from);
        },
        from));
  }
  // The bytes land in the transport stream's order: the executor's work on them waits for that.
  RINGGUARD_RETURN_IF_ERROR(exec_->waitFor(slotReqs_[size_t(slotIndex)].streamEvent()));
  const size_t idx = item(step, slice);
  const ElementRange r = plan_.range(column, slice);
  const RecvTarget target = plan_.recvTarget(column, step, r);
  const size_t bytes = r.count * esize_;
  const uint64_t seq = plan_.sliceSeq(column, ctx_.seq);

  // Fault injection: after the sender's CRC, before this rank's check, as a bad link would.
  injected_[idx] = 0;
  // The damage is planned on the host without reading the payload and applied in the executor's order
  // (a kernel on a device executor's stream), so injection keeps the production event ordering.
  if (ctx_.injector && ctx_.injector->corrupts(seq, step, slice, me_, attempt)) {
    const CorruptionPlan damage = ctx_.injector->plan(seq, step, slice, me_, attempt, bytes);
    if (damage.damages()) {
      RINGGUARD_RETURN_IF_ERROR(
          exec_->corruptReceived(slotIndex, target.inPlace ? target.dst : nullptr, bytes, damage));
      injected_[idx] = 1;
      local_.injected++;
    }
  }

  // A write into a region this rank sent from: that send must be done.
  const int sentAt = plan_.overwritesSendOf(step);
  if (sentAt >= 0 && !target.inPlace) RINGGUARD_RETURN_IF_ERROR(waitSend(item(sentAt, slice)));

  ApplyTask task;
  task.expected = idOf(column, step, slice, bytes, attempt);
  task.next = idOf(column, step + 1, slice, bytes, attempt);
  task.dst = target.dst;
  task.local = target.local;
  task.count = r.count;
  task.dtype = plan_.dtype();
  task.op = plan_.op();
  task.reduce = target.reduce;
  task.inPlace = target.inPlace;
  task.finalStep = target.finalStep;
  task.forwarded = target.forwarded;
  task.nranks = plan_.nranks();
  local_.slicesVerified++;
  appliedThisRound_.push_back(idx);
  ScopedNs timed(&local_.applyNs);
  return exec_->verifyAndApply(task, slotIndex, idx, task.forwarded ? item(step + 1, slice) : idx);
}

// Reads the verdicts of everything applied since the last call (one sync per pass or repair round).
Status Pipeline::collectVerdicts() {
  ScopedNs timed(&local_.executorWaitNs);
  RINGGUARD_RETURN_IF_ERROR(pollUntil(
      ctx_, [&](bool* done) { return exec_->syncTest(done); },
      [] { return std::string("the executor to finish verifying and applying"); }));
  for (size_t idx : appliedThisRound_) {
    const int step = int(idx / S_), slice = int(idx % S_);
    const SliceCheck check = exec_->verdict(idx);
    if (isLinkFailure(check)) {
      local_.detected++;
      SliceFailure f;
      f.column = uint32_t(plan_.recvColumn(step));
      f.slice = uint32_t(slice);
      f.step = uint32_t(step);
      f.sender = plan_.sender(int(f.column), step);
      f.receiver = me_;
      f.reason = uint8_t(check);
      failures_.push_back(f);
      trace::instant(trace::Kind::kDetect, "detected", ctx_.track, ctx_.seq, f.sender, f.receiver, step,
                     slice, sliceCheckName(check));
      logDebug(Subsys::kRing, "{} seq {}: detected {}", ctx_.name, ctx_.seq, describeFailure(f));
    } else if (injected_[idx] && check == SliceCheck::kOk) {
      local_.escaped++;
      logError(Subsys::kRing, "{} seq {}: an injected corruption of step {} slice {} passed verification",
               ctx_.name, ctx_.seq, step, slice);
    }
  }
  appliedThisRound_.clear();
  return Status::ok();
}

Status Pipeline::pass() {
  const std::vector<PlanItem> order = plan_.passOrder();
  const size_t n = order.size();
  std::vector<uint8_t> applied(size_t(T_) * S_, 0);
  size_t nextPost = 0, nextApply = 0, recvsPosted = 0, recvsApplied = 0;
  // The pass posts items in order, each receive together with its send, once the send's input is final
  // (an origin send at once, a forwarded one once the slice was applied at the step before) and a slot
  // is free: up to W receives in flight, so the next slices' transfers overlap this slice's verify. Every
  // rank's state machine is the same, so a transport that completes a batch as a whole (an NCCL group)
  // never holds a receive whose matching send its peer can only post after that batch.
  auto postable = [&](const PlanItem& it) {
    if (it.recv && recvsPosted - recvsApplied >= size_t(W_)) return false;
    if (it.send) {
      bool origin = false;
      const int column = plan_.sendColumn(it.step);
      (void)plan_.sendBytes(column, it.step, plan_.range(column, it.slice), &origin);
      if (!origin && !applied[item(it.step - 1, it.slice)]) return false;
    }
    return true;
  };
  while (nextApply < n) {
    while (nextPost < n && postable(order[nextPost])) {
      const PlanItem& it = order[nextPost];
      if (it.recv) RINGGUARD_RETURN_IF_ERROR(postRecv(it.step, it.slice, int(recvsPosted++ % size_t(W_))));
      if (it.send) RINGGUARD_RETURN_IF_ERROR(postSend(it.step, it.slice, 0, false));
      RINGGUARD_RETURN_IF_ERROR(t_->flush());
      RINGGUARD_RETURN_IF_ERROR(copyDeferred());
      ++nextPost;
    }
    // A plan lists every forwarded send after the receive it forwards, so what is applied next was posted.
    RINGGUARD_ENFORCE(nextApply < nextPost, "pipeline: a plan item waits for an item after it");
    const PlanItem& it = order[nextApply++];
    if (!it.recv) continue;
    RINGGUARD_RETURN_IF_ERROR(apply(it.step, it.slice, 0, int(recvsApplied++ % size_t(W_))));
    applied[item(it.step, it.slice)] = 1;
  }
  RINGGUARD_RETURN_IF_ERROR(waitAllSends());
  return collectVerdicts();
}

Status Pipeline::repairRound(int attempt, const std::vector<ReplayEntry>& replay) {
  int first = T_, last = -1;
  for (const ReplayEntry& e : replay) {
    first = std::min(first, int(e.fromStep));
    last = std::max(last, plan_.lastStep(int(e.column)));
  }
  for (int step = first; step <= last; ++step) {
    // At one step this rank sends one column and receives another, and its peers walk the same sorted
    // plan, so both ends of each hop see the same entries in the same order; chunks of W keep each
    // side's batch matched.
    std::vector<ReplayEntry> sends, recvs;
    for (const ReplayEntry& e : replay) {
      if (int(e.fromStep) > step || step > plan_.lastStep(int(e.column))) continue;
      if (plan_.sender(int(e.column), step) == me_) sends.push_back(e);
      if (plan_.receiver(int(e.column), step) == me_) recvs.push_back(e);
    }
    for (size_t base = 0; base < std::max(sends.size(), recvs.size()); base += size_t(W_)) {
      for (size_t i = base; i < std::min(recvs.size(), base + W_); ++i) {
        RINGGUARD_RETURN_IF_ERROR(postRecv(step, int(recvs[i].slice), int(i - base)));
      }
      for (size_t i = base; i < std::min(sends.size(), base + W_); ++i) {
        RINGGUARD_RETURN_IF_ERROR(
            postSend(step, int(sends[i].slice), attempt, sends[i].fromStep == uint32_t(step)));
      }
      // One batch per chunk: a rank that only sends at this step must not carry its sends into the
      // next step's batch, or an NCCL group would wait on a receive its peer posts after this one.
      RINGGUARD_RETURN_IF_ERROR(t_->flush());
      RINGGUARD_RETURN_IF_ERROR(copyDeferred());
      for (size_t i = base; i < std::min(recvs.size(), base + W_); ++i) {
        RINGGUARD_RETURN_IF_ERROR(apply(step, int(recvs[i].slice), attempt, int(i - base)));
      }
    }
  }
  RINGGUARD_RETURN_IF_ERROR(waitAllSends());
  return collectVerdicts();
}

}  // namespace

// A failure record another rank sent: it must name a hop of this plan, or acting on it would index
// outside this collective's trailers and slots.
Status checkPlanFailure(const PipelinePlan& plan, const SliceFailure& f) {
  std::ostringstream os;
  const int column = int(f.column), step = int(f.step);
  if (f.column >= uint32_t(plan.numColumns()) || f.step >= uint32_t(plan.numSteps())) {
    os << "column " << f.column << " or step " << f.step << " outside the schedule (" << plan.numColumns()
       << " columns, " << plan.numSteps() << " steps)";
  } else if (const int slices = plan.columnSlices(column); slices >= 0 && f.slice >= uint32_t(slices)) {
    os << "slice " << f.slice << " outside column " << f.column << " (" << slices << " slices)";
  } else if (f.sender != plan.sender(column, step) || f.receiver != plan.receiver(column, step)) {
    os << "link " << f.sender << " -> " << f.receiver << " is not the route of column " << f.column
       << " at step " << f.step;
  } else {
    return Status::ok();
  }
  return Status(StatusCode::kTransportError, os.str());
}

namespace {

Status Pipeline::run(const VerdictExchange& exchange) {
  const size_t total = size_t(T_) * S_;
  sendReqs_.resize(total);
  slotReqs_.resize(size_t(W_));
  injected_.assign(total, 0);
  Status st = exec_->prepare(total, W_, plan_.slotBytes());
  if (st.isOk()) st = pass();
  std::vector<SliceFailure> repair;
  for (int attempt = 0; st.isOk(); ++attempt) {
    st = exchange(attempt, failures_, &repair);  // every entry from a peer already checked
    if (!st.isOk() || repair.empty()) break;
    if (attempt == ctx_.options->maxRetries) {
      std::ostringstream os;
      os << ctx_.name << " seq " << ctx_.seq << ": slice still failing verification after " << attempt
         << " retransmission(s): " << describeFailure(repair.front());
      if (repair.size() > 1) os << " (and " << repair.size() - 1 << " more)";
      st = Status(StatusCode::kCorruption, os.str());
      break;
    }
    failures_.clear();
    local_.repairRounds++;
    trace::Span span(trace::Kind::kRepair, "repair round", ctx_.track, ctx_.seq);
    span.event().a = attempt + 1;
    span.event().b = int32_t(repair.size());
    st = repairRound(attempt + 1, planRepair(repair));
  }
  if (!st.isOk()) {
    for (FrameRequest& r : slotReqs_) r.cancel();
    for (FrameRequest& r : sendReqs_) r.cancel();
  }
  *ctx_.counters += local_;
  return st;
}

}  // namespace

Status runPipeline(const CollectiveContext& ctx, Executor* exec, const PipelinePlan& plan,
                   const VerdictExchange& exchange) {
  Pipeline p(ctx, exec, plan);
  return p.run(exchange);
}

VerdictExchange groupVerdicts(const CollectiveContext& ctx, const PipelinePlan& plan) {
  // Entries are checked as they arrive, so the error names the peer that sent a bad one.
  FailureValidator onRoute = [&plan](const SliceFailure& f) { return checkPlanFailure(plan, f); };
  return
      [&ctx, onRoute](int round, const std::vector<SliceFailure>& mine, std::vector<SliceFailure>* repair) {
        return exchangeVerdicts(ctx, round, mine, repair, onRoute);
      };
}

}  // namespace ringguard
