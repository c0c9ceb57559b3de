#include "ringguard/algorithms/allreduce_ring.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "ringguard/core/log.h"
#include "ringguard/core/reduce.h"
#include "ringguard/core/ring_schedule.h"

namespace ringguard {

namespace {

// State of one AllReduce on one rank. Items are (step, slice) pairs, indexed step * S + slice.
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
        T_(sched_.numSteps()) {}

  Status run();

 private:
  struct SendItem {
    FrameRequest req;
    const uint8_t* ptr = nullptr;
    Trailer trailer{};  // as first sent: its payload CRC is what a retransmission carries
  };
  struct RecvItem {
    bool good = false;     // verified and applied
    Trailer outTrailer{};  // what this rank forwards at the next step (step/attempt set when sent)
    const uint8_t* outPtr = nullptr;
  };
  struct Slot {
    std::vector<uint8_t> payload;
    Trailer trailer{};
    FrameRequest req;
  };

  size_t item(int step, int slice) const { return size_t(step) * S_ + slice; }
  ElementRange sendRange(int step, int slice) const {
    return sched_.slice(sched_.sendColumn(me_, step), slice);
  }
  ElementRange recvRange(int step, int slice) const {
    return sched_.slice(sched_.recvColumn(me_, step), slice);
  }
  const uint8_t* localPtr(const ElementRange& r) const { return send_ + r.offset * esize_; }
  uint8_t* resultPtr(const ElementRange& r) const { return recv_ + r.offset * esize_; }

  Status postSendItem(int step, int slice, int attempt, bool retransmit);
  Status postRecvItem(int step, int slice, Slot* slot);
  Status processRecvItem(int step, int slice, int attempt, Slot* slot);
  Status waitSend(size_t idx);
  Status waitAllSends();
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
  int me_, left_, right_, S_, T_;
  std::vector<SendItem> sends_;
  std::vector<RecvItem> recvs_;
  std::vector<SliceFailure> failures_;  // this rank's, current round
  Counters local_;
};

Status RingAllreduce::postSendItem(int step, int slice, int attempt, bool retransmit) {
  SendItem& s = sends_[item(step, slice)];
  const ElementRange r = sendRange(step, slice);
  const size_t bytes = r.count * esize_;
  const SliceId id{ctx_.seq,        uint32_t(step),   uint32_t(slice), uint32_t(sched_.sendColumn(me_, step)),
                   uint32_t(bytes), uint16_t(attempt)};
  if (retransmit) {
    // The retained bytes with their original CRC: the buffer still holds exactly what was sent.
    s.trailer.attempt = uint16_t(attempt);
    sealTrailer(&s.trailer);
    local_.retransmitted++;
  } else if (step == 0) {
    s.ptr = localPtr(r);
    s.trailer = makeTrailer(id, exec_->checksum(s.ptr, bytes), 0);
  } else {
    const RecvItem& prev = recvs_[item(step - 1, slice)];
    s.ptr = prev.outPtr;
    s.trailer = prev.outTrailer;
    s.trailer.step = uint32_t(step);
    s.trailer.attempt = uint16_t(attempt);
    sealTrailer(&s.trailer);
  }
  if (const FaultInjector* inj = ctx_.injector) {
    if (int ms = inj->delayMs(ctx_.seq, step, slice, right_, attempt)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      local_.delayed++;
    }
  }
  local_.slicesSent++;
  local_.bytesSent += bytes;
  return t_->postSend(right_, s.ptr, bytes, &s.trailer, &s.req);
}

Status RingAllreduce::postRecvItem(int step, int slice, Slot* slot) {
  const size_t bytes = recvRange(step, slice).count * esize_;
  if (slot->payload.size() < bytes) slot->payload.resize(bytes);
  return t_->postRecv(left_, slot->payload.data(), bytes, &slot->trailer, &slot->req);
}

Status RingAllreduce::waitSend(size_t idx) {
  return waitFrame(ctx_, &sends_[idx].req, [&] {
    return "slice " + std::to_string(idx % S_) + " of step " + std::to_string(idx / S_) +
           " to be taken by rank " + std::to_string(right_);
  });
}

Status RingAllreduce::waitAllSends() {
  for (size_t i = 0; i < sends_.size(); ++i) RINGGUARD_RETURN_IF_ERROR(waitSend(i));
  return Status::ok();
}

Status RingAllreduce::processRecvItem(int step, int slice, int attempt, Slot* slot) {
  RINGGUARD_RETURN_IF_ERROR(waitFrame(ctx_, &slot->req, [&] {
    return "slice " + std::to_string(slice) + " of step " + std::to_string(step) + " from rank " +
           std::to_string(left_);
  }));
  const int column = sched_.recvColumn(me_, step);
  const ElementRange r = recvRange(step, slice);
  const size_t bytes = r.count * esize_;
  const SliceId id{ctx_.seq,         uint32_t(step),  uint32_t(slice),
                   uint32_t(column), uint32_t(bytes), uint16_t(attempt)};

  // Fault injection: after the sender's CRC, before this rank's check, as a bad link would.
  bool injected = false;
  if (ctx_.injector && ctx_.injector->corrupts(ctx_.seq, step, slice, me_, attempt)) {
    injected = ctx_.injector->corrupt(ctx_.seq, step, slice, me_, attempt, slot->payload.data(), bytes,
                                      &slot->trailer);
    if (injected) local_.injected++;
  }

  // An all-gather write lands on a region this rank sent during reduce-scatter: that send must be done.
  if (!sched_.isReduceStep(step))
    RINGGUARD_RETURN_IF_ERROR(waitSend(item(step + 1 - sched_.nranks(), slice)));

  ApplyTask task;
  task.slot = slot->payload.data();
  task.trailer = &slot->trailer;
  task.expected = id;
  task.dst = resultPtr(r);
  task.local = localPtr(r);
  task.count = r.count;
  task.dtype = dtype_;
  task.op = op_;
  task.reduce = sched_.isReduceStep(step);
  task.finalStep = sched_.isFinalReduceStep(step);
  task.forwarded = sched_.isForwarded(step);
  task.nranks = sched_.nranks();
  ApplyResult res = exec_->verifyAndApply(task);
  local_.slicesVerified++;

  RecvItem& out = recvs_[item(step, slice)];
  out.good = res.check == SliceCheck::kOk;
  if (isLinkFailure(res.check)) {
    local_.detected++;
    SliceFailure f;
    f.column = uint32_t(column);
    f.slice = uint32_t(slice);
    f.step = uint32_t(step);
    f.sender = left_;
    f.receiver = me_;
    f.reason = uint8_t(res.check);
    failures_.push_back(f);
    logger()->debug("allreduce seq {}: detected {}", ctx_.seq, describeFailure(f));
  } else if (injected && res.check == SliceCheck::kOk) {
    local_.escaped++;
    logger()->error("allreduce seq {}: an injected corruption of step {} slice {} passed verification",
                    ctx_.seq, step, slice);
  }
  if (task.forwarded) {
    const SliceId next{ctx_.seq,         uint32_t(step + 1), uint32_t(slice),
                       uint32_t(column), uint32_t(bytes),    uint16_t(attempt)};
    if (out.good) {
      out.outPtr = resultPtr(r);
      out.outTrailer = makeTrailer(next, res.outCrc, 0);
    } else {
      // No verified value: send the local bytes marked poisoned, with their real CRC so the next link is
      // still checked; later hops skip the slice and the repair round fills it in.
      out.outPtr = localPtr(r);
      out.outTrailer = makeTrailer(next, exec_->checksum(out.outPtr, bytes), kTrailerPoisoned);
    }
  }
  return Status::ok();
}

Status RingAllreduce::pass() {
  const int W = ctx_.options->slots;
  const size_t total = size_t(T_) * S_;
  std::vector<Slot> slots(W);
  size_t nextSend = 0, nextRecv = 0, nextDone = 0;
  while (nextDone < total) {
    // Sends whose input is final: step 0 at once, later steps once the previous step's slice is applied.
    while (nextSend < total && (nextSend < size_t(S_) || nextSend - S_ < nextDone)) {
      RINGGUARD_RETURN_IF_ERROR(postSendItem(int(nextSend / S_), int(nextSend % S_), 0, false));
      ++nextSend;
    }
    // Keep W receives posted: the next slice's transfer overlaps this slice's verify + reduce.
    while (nextRecv < total && nextRecv < nextDone + W) {
      RINGGUARD_RETURN_IF_ERROR(postRecvItem(int(nextRecv / S_), int(nextRecv % S_), &slots[nextRecv % W]));
      ++nextRecv;
    }
    RINGGUARD_RETURN_IF_ERROR(
        processRecvItem(int(nextDone / S_), int(nextDone % S_), 0, &slots[nextDone % W]));
    ++nextDone;
  }
  while (nextSend < total) {  // the last step's sends (their inputs are all applied now)
    RINGGUARD_RETURN_IF_ERROR(postSendItem(int(nextSend / S_), int(nextSend % S_), 0, false));
    ++nextSend;
  }
  return waitAllSends();
}

Status RingAllreduce::repairRound(int attempt, const std::vector<ReplayEntry>& plan) {
  uint32_t first = uint32_t(T_);
  for (const ReplayEntry& e : plan) first = std::min(first, e.fromStep);
  std::vector<Slot> slots;
  for (int step = int(first); step < T_; ++step) {
    // Every rank walks the plan in the same order, so sends and receives match per link.
    std::vector<int> recvSlices;
    for (const ReplayEntry& e : plan) {
      if (e.fromStep > uint32_t(step)) continue;
      if (sched_.receiver(int(e.column), step) == me_) recvSlices.push_back(int(e.slice));
    }
    slots.resize(std::max(slots.size(), recvSlices.size()));
    for (size_t i = 0; i < recvSlices.size(); ++i) {
      RINGGUARD_RETURN_IF_ERROR(postRecvItem(step, recvSlices[i], &slots[i]));
    }
    for (const ReplayEntry& e : plan) {
      if (e.fromStep > uint32_t(step) || sched_.sender(int(e.column), step) != me_) continue;
      RINGGUARD_RETURN_IF_ERROR(postSendItem(step, int(e.slice), attempt, e.fromStep == uint32_t(step)));
    }
    for (size_t i = 0; i < recvSlices.size(); ++i) {
      RINGGUARD_RETURN_IF_ERROR(processRecvItem(step, recvSlices[i], attempt, &slots[i]));
    }
  }
  return waitAllSends();
}

Status RingAllreduce::run() {
  sends_.resize(size_t(T_) * S_);
  recvs_.resize(size_t(T_) * S_);
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
    for (SendItem& s : sends_) s.req.cancel();
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
    if (bytes && send != recv) std::memcpy(recv, send, bytes);
    return Status::ok();  // avg over one rank divides by 1
  }
  RingAllreduce ring(ctx, executor, send, recv, count, dtype, op);
  return ring.run();
}

}  // namespace ringguard
