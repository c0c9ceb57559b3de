#include "ringguard/algorithms/allreduce_ring.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "ringguard/core/log.h"
#include "ringguard/core/ring_schedule.h"

namespace ringguard {

namespace {

// One AllReduce on one rank. Items are (step, slice) pairs, indexed step * S + slice; item i is sent to
// the right neighbour and item i is received from the left one.
class RingAllreduce {
 public:
  RingAllreduce(const CollectiveContext& ctx, Executor* exec, const void* send, void* recv, size_t count,
                DataType dtype, ReduceOp op)
      : ctx_(ctx),
        exec_(exec),
        t_(ctx.transport),
        send_(static_cast<const uint8_t*>(send)),
        recv_(static_cast<uint8_t*>(recv)),
        dtype_(dtype),
        op_(op),
        esize_(dataTypeSize(dtype)),
        sched_(ctx.transport->size(), count, esize_, ctx.options->sliceBytes),
        me_(ctx.transport->rank()),
        left_(sched_.leftOf(me_)),
        right_(sched_.rightOf(me_)),
        S_(sched_.slicesPerColumn()),
        T_(sched_.numSteps()),
        W_(ctx.options->slots) {}

  Status run();

 private:
  size_t item(int step, int slice) const { return size_t(step) * S_ + slice; }
  ElementRange sendRange(int step, int slice) const {
    return sched_.slice(sched_.sendColumn(me_, step), slice);
  }
  ElementRange recvRange(int step, int slice) const {
    return sched_.slice(sched_.recvColumn(me_, step), slice);
  }
  const uint8_t* localPtr(const ElementRange& r) const { return send_ + r.offset * esize_; }
  uint8_t* resultPtr(const ElementRange& r) const { return recv_ + r.offset * esize_; }
  SliceId idOf(int step, int slice, int column, size_t bytes, int attempt) const {
    return SliceId{ctx_.seq,         uint32_t(step),  uint32_t(slice),
                   uint32_t(column), uint32_t(bytes), uint16_t(attempt)};
  }

  Status postSendItem(int step, int slice, int attempt, bool retransmit);
  Status postRecvItem(int step, int slice, int slotIndex);
  Status applyRecvItem(int step, int slice, int attempt, int slotIndex);
  Status waitSend(size_t idx, void** lastEvent = nullptr);
  Status waitAllSends();
  Status collectVerdicts();
  Status pass();
  Status repairRound(int attempt, const std::vector<ReplayEntry>& plan);

  const CollectiveContext& ctx_;
  Executor* exec_;
  Transport* t_;
  const uint8_t* send_;
  uint8_t* recv_;
  DataType dtype_;
  ReduceOp op_;
  size_t esize_;
  RingSchedule sched_;
  int me_, left_, right_, S_, T_, W_;
  std::vector<FrameRequest> sendReqs_;
  std::vector<FrameRequest> slotReqs_;
  std::vector<uint8_t> injected_;         // per received item: a corruption was injected into it
  std::vector<size_t> appliedThisRound_;  // received items whose verdicts are still to be read
  std::vector<SliceFailure> failures_;    // this rank's, current round
  Counters local_;
};

Status RingAllreduce::postSendItem(int step, int slice, int attempt, bool retransmit) {
  const size_t idx = item(step, slice);
  const ElementRange r = sendRange(step, slice);
  const size_t bytes = r.count * esize_;
  // Step 0 sends this rank's input; later steps send what this rank applied (or kept, poisoned) at the
  // step before, whose trailer the executor already wrote.
  const uint8_t* ptr = step == 0 ? localPtr(r) : resultPtr(r);
  if (retransmit) {
    // The retained bytes with their original CRC: every later write to this region was skipped.
    RINGGUARD_RETURN_IF_ERROR(exec_->retag(idx, uint16_t(attempt)));
    local_.retransmitted++;
  } else if (step == 0) {
    RINGGUARD_RETURN_IF_ERROR(
        exec_->sealFirst(idx, ptr, idOf(step, slice, sched_.sendColumn(me_, step), bytes, attempt)));
  }
  if (const FaultInjector* inj = ctx_.injector) {
    if (int ms = inj->delayMs(ctx_.seq, step, slice, right_, attempt)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      local_.delayed++;
    }
  }
  local_.slicesSent++;
  local_.bytesSent += bytes;
  return t_->postSend(right_, ptr, bytes, exec_->sendTrailer(idx), &sendReqs_[idx]);
}

Status RingAllreduce::postRecvItem(int step, int slice, int slotIndex) {
  const size_t bytes = recvRange(step, slice).count * esize_;
  return t_->postRecv(left_, exec_->slot(slotIndex), bytes, exec_->slotTrailer(slotIndex),
                      &slotReqs_[slotIndex]);
}

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

// Waits until the send of item `idx` completed, and orders the executor's later work after it (a device
// transport on a stream of its own has it complete in that stream's order only).
Status RingAllreduce::waitSend(size_t idx, void** lastEvent) {
  {
    ScopedNs timed(&local_.transferWaitNs);
    RINGGUARD_RETURN_IF_ERROR(waitFrame(ctx_, &sendReqs_[idx], [&] {
      return "slice " + std::to_string(idx % S_) + " of step " + std::to_string(idx / S_) +
             " to be taken by rank " + std::to_string(right_);
    }));
  }
  void* event = sendReqs_[idx].streamEvent();
  if (lastEvent != nullptr && event == *lastEvent) return Status::ok();
  if (lastEvent != nullptr) *lastEvent = event;
  return exec_->waitFor(event);
}

Status RingAllreduce::waitAllSends() {
  void* last = nullptr;  // frames posted together share one event: wait for each launch once
  for (size_t i = 0; i < sendReqs_.size(); ++i) RINGGUARD_RETURN_IF_ERROR(waitSend(i, &last));
  return Status::ok();
}

Status RingAllreduce::applyRecvItem(int step, int slice, int attempt, int slotIndex) {
  {
    ScopedNs timed(&local_.transferWaitNs);
    RINGGUARD_RETURN_IF_ERROR(waitFrame(ctx_, &slotReqs_[slotIndex], [&] {
      return "slice " + std::to_string(slice) + " of step " + std::to_string(step) + " from rank " +
             std::to_string(left_);
    }));
  }
  // The slot's bytes land in the transport stream's order: the executor's work on them waits for that.
  RINGGUARD_RETURN_IF_ERROR(exec_->waitFor(slotReqs_[slotIndex].streamEvent()));
  const size_t idx = item(step, slice);
  const int column = sched_.recvColumn(me_, step);
  const ElementRange r = recvRange(step, slice);
  const size_t bytes = r.count * esize_;

  // Fault injection: after the sender's CRC, before this rank's check, as a bad link would.
  injected_[idx] = 0;
  if (ctx_.injector && ctx_.injector->corrupts(ctx_.seq, step, slice, me_, attempt)) {
    bool changed = false;
    RINGGUARD_RETURN_IF_ERROR(exec_->editSlot(slotIndex, nullptr, bytes, [&](uint8_t* payload, Trailer* trailer) {
      changed = ctx_.injector->corrupt(ctx_.seq, step, slice, me_, attempt, payload, bytes, trailer);
    }));
    injected_[idx] = changed;
    if (changed) local_.injected++;
  }

  // An all-gather write lands on a region this rank sent during reduce-scatter: that send must be done.
  if (!sched_.isReduceStep(step))
    RINGGUARD_RETURN_IF_ERROR(waitSend(item(step + 1 - sched_.nranks(), slice)));

  ApplyTask task;
  task.expected = idOf(step, slice, column, bytes, attempt);
  task.next = idOf(step + 1, slice, column, bytes, attempt);
  task.dst = resultPtr(r);
  task.local = localPtr(r);
  task.count = r.count;
  task.dtype = dtype_;
  task.op = op_;
  task.reduce = sched_.isReduceStep(step);
  task.finalStep = sched_.isFinalReduceStep(step);
  task.forwarded = sched_.isForwarded(step);
  task.nranks = sched_.nranks();
  local_.slicesVerified++;
  appliedThisRound_.push_back(idx);
  ScopedNs timed(&local_.applyNs);
  return exec_->verifyAndApply(task, slotIndex, idx, task.forwarded ? item(step + 1, slice) : idx);
}

// Reads the verdicts of everything applied since the last call (one sync per pass or repair round).
Status RingAllreduce::collectVerdicts() {
  ScopedNs timed(&local_.executorWaitNs);
  RINGGUARD_RETURN_IF_ERROR(pollUntil(
      ctx_, [&](bool* done) { return exec_->syncTest(done); },
      [] { return std::string("the executor to finish verifying and reducing"); }));
  for (size_t idx : appliedThisRound_) {
    const int step = int(idx / S_), slice = int(idx % S_);
    const SliceCheck check = exec_->verdict(idx);
    if (isLinkFailure(check)) {
      local_.detected++;
      SliceFailure f;
      f.column = uint32_t(sched_.recvColumn(me_, step));
      f.slice = uint32_t(slice);
      f.step = uint32_t(step);
      f.sender = left_;
      f.receiver = me_;
      f.reason = uint8_t(check);
      failures_.push_back(f);
      logger()->debug("allreduce seq {}: detected {}", ctx_.seq, describeFailure(f));
    } else if (injected_[idx] && check == SliceCheck::kOk) {
      local_.escaped++;
      logger()->error("allreduce seq {}: an injected corruption of step {} slice {} passed verification",
                      ctx_.seq, step, slice);
    }
  }
  appliedThisRound_.clear();
  return Status::ok();
}

Status RingAllreduce::pass() {
  const size_t total = size_t(T_) * S_;
  size_t nextSend = 0, nextDone = 0;
  while (nextDone < total) {
    // Item i is posted as a pair, receive i from the left with send i to the right, once its input is
    // final (step 0 at once, later steps once the slice was applied at the step before) and a slot is
    // free: up to W items in flight, so the next slices' transfers overlap this slice's verify + reduce.
    // Every rank posts the same pairs together, so a transport that completes a batch as a whole (an
    // NCCL group) never holds a receive whose matching send its peer can only post after that batch.
    // Each pair is launched on its own, so the verify of item i waits for item i's transfer only.
    while (nextSend < total && nextSend < nextDone + W_ &&
           (nextSend < size_t(S_) || nextSend - S_ < nextDone)) {
      RINGGUARD_RETURN_IF_ERROR(postRecvItem(int(nextSend / S_), int(nextSend % S_), int(nextSend % W_)));
      RINGGUARD_RETURN_IF_ERROR(postSendItem(int(nextSend / S_), int(nextSend % S_), 0, false));
      RINGGUARD_RETURN_IF_ERROR(t_->flush());
      ++nextSend;
    }
    RINGGUARD_RETURN_IF_ERROR(applyRecvItem(int(nextDone / S_), int(nextDone % S_), 0, int(nextDone % W_)));
    ++nextDone;
  }
  RINGGUARD_RETURN_IF_ERROR(waitAllSends());
  return collectVerdicts();
}

Status RingAllreduce::repairRound(int attempt, const std::vector<ReplayEntry>& plan) {
  uint32_t first = uint32_t(T_);
  for (const ReplayEntry& e : plan) first = std::min(first, e.fromStep);
  for (int step = int(first); step < T_; ++step) {
    // At one step this rank sends one column and receives the column its left neighbour sends, so both
    // sides walk the same plan entries in the same order; chunks of W keep each side's batch matched.
    std::vector<ReplayEntry> sends, recvs;
    for (const ReplayEntry& e : plan) {
      if (e.fromStep > uint32_t(step)) continue;
      if (sched_.sender(int(e.column), step) == me_) sends.push_back(e);
      if (sched_.receiver(int(e.column), step) == me_) recvs.push_back(e);
    }
    for (size_t base = 0; base < std::max(sends.size(), recvs.size()); base += size_t(W_)) {
      for (size_t i = base; i < std::min(recvs.size(), base + W_); ++i) {
        RINGGUARD_RETURN_IF_ERROR(postRecvItem(step, int(recvs[i].slice), int(i - base)));
      }
      for (size_t i = base; i < std::min(sends.size(), base + W_); ++i) {
        RINGGUARD_RETURN_IF_ERROR(
            postSendItem(step, int(sends[i].slice), attempt, sends[i].fromStep == uint32_t(step)));
      }
      // One batch per chunk: a rank that only sends at this step must not carry its sends into the
      // next step's batch, or an NCCL group would wait on a receive its peer posts after this one.
      RINGGUARD_RETURN_IF_ERROR(t_->flush());
      for (size_t i = base; i < std::min(recvs.size(), base + W_); ++i) {
        RINGGUARD_RETURN_IF_ERROR(applyRecvItem(step, int(recvs[i].slice), attempt, int(i - base)));
      }
    }
  }
  RINGGUARD_RETURN_IF_ERROR(waitAllSends());
  return collectVerdicts();
}

Status RingAllreduce::run() {
  const size_t total = size_t(T_) * S_;
  sendReqs_.resize(total);
  slotReqs_.resize(size_t(W_));
  injected_.assign(total, 0);
  RINGGUARD_RETURN_IF_ERROR(exec_->prepare(total, W_, sched_.sliceElements() * esize_));
  Status st = pass();
  std::vector<SliceFailure> global;
  for (int attempt = 0; st.isOk(); ++attempt) {
    st = exchangeVerdicts(ctx_, attempt, failures_, &global);
    if (!st.isOk() || global.empty()) break;
    if (attempt == ctx_.options->maxRetries) {
      std::ostringstream os;
      os << "allreduce seq " << ctx_.seq << ": slice still failing verification after " << attempt
         << " retransmission(s): " << describeFailure(global.front());
      if (global.size() > 1) os << " (and " << global.size() - 1 << " more)";
      st = Status(StatusCode::kCorruption, os.str());
      break;
    }
    failures_.clear();
    local_.repairRounds++;
    st = repairRound(attempt + 1, planRepair(global));
  }
  if (!st.isOk()) {
    for (FrameRequest& r : slotReqs_) r.cancel();
    for (FrameRequest& r : sendReqs_) r.cancel();
  }
  *ctx_.counters += local_;
  return st;
}

}  // namespace

Status allreduceRing(const CollectiveContext& ctx, Executor* executor, const void* send, void* recv,
                     size_t count, DataType dtype, ReduceOp op) {
  RINGGUARD_RETURN_IF_ERROR(exchangeFingerprints(ctx, makeAllreduceFingerprint(op, dtype, count, ctx.seq)));
  const size_t bytes = count * dataTypeSize(dtype);
  if (ctx.transport->size() == 1 || count == 0) {
    // Nothing crosses a link; avg over one rank divides by 1.
    return send == recv ? Status::ok() : executor->copy(recv, send, bytes);
  }
  RingAllreduce ring(ctx, executor, send, recv, count, dtype, op);
  return ring.run();
}

}  // namespace ringguard
