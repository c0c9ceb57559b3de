// Verified point-to-point: a send to one rank and/or a receive from one rank, posted together. Only the
// two ends of each flow talk: the receiver checks the sender's fingerprint (count, dtype, message
// number) before any payload, verifies every slice in place, and answers with its verdict; the sender
// resends failed slices from the caller's buffer (retained until the exchange completes). A small message
// travels inside its fingerprint message (docs/design/protocol.md, "Small collectives in one round").
#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/eager.h"
#include "algorithms/flow_plan.h"
#include "algorithms/peer_messages.h"
#include "algorithms/window_sendrecv.h"
#include "core/copy_bytes.h"
#include "core/trace_events.h"

namespace ringguard {

namespace {

// The issue lane travels (a message sent from one lane and received in another is a mismatch), but not a
// lane number: the message number of the (peer, direction) already orders one lane's messages, and a lane
// number would have to count per peer and direction to match.
Fingerprint flowFingerprint(const CollectiveContext& ctx, DataType dtype, size_t count, int32_t tag,
                            uint64_t seq) {
  return makeFingerprint(CollectiveKind::kSendRecv, ReduceOp::kSum, dtype, count, tag,
                         IssueOrder{seq, ctx.lane, 0});
}

// Each direction's fingerprint: the call's dtype and count, or, for a call in bytes, the direction's own.
Fingerprint sendFingerprint(const CollectiveContext& ctx, const PeerExchange& x, DataType dtype) {
  if (x.inBytes) {
    return flowFingerprint(ctx, x.sendDtype, x.sendCount / dataTypeSize(x.sendDtype), x.tag, x.sendSeq);
  }
  return flowFingerprint(ctx, dtype, x.sendCount, x.tag, x.sendSeq);
}
Fingerprint recvFingerprint(const CollectiveContext& ctx, const PeerExchange& x, DataType dtype) {
  if (x.inBytes) {
    return flowFingerprint(ctx, x.recvDtype, x.recvCount / dataTypeSize(x.recvDtype), x.tag, x.recvSeq);
  }
  return flowFingerprint(ctx, dtype, x.recvCount, x.tag, x.recvSeq);
}

// The small directions of one send/recv: the payload follows the fingerprint in one message (the
// fingerprint, then the eager extension: EagerHeader, the payload's trailer as slice 0 of step 0 in the
// sender's column, the payload), and only the receiver's verdicts follow. A message that fails its check,
// or whose frame arrives damaged, is sent again from the caller's buffer in the next verdict round; after
// maxRetries both ends return the same kCorruption.
class EagerFlows {
 public:
  EagerFlows(const CollectiveContext& ctx, const PeerExchange& x, DataType dtype, bool send, bool recv)
      : ctx_(ctx),
        x_(x),
        dtype_(dtype),
        me_(ctx.transport->rank()),
        sendBytes_(x.sendCount * dataTypeSize(dtype)),
        recvBytes_(x.recvCount * dataTypeSize(dtype)),
        sending_(send),
        receiving_(recv) {}

  Status send(int attempt);
  Status receive(int attempt);
  // Verdict rounds until every eager direction is intact; the payload received then lands in x.recv.
  Status settle();

 private:
  std::string prefix(uint64_t seq) const { return "sendrecv seq " + std::to_string(seq) + ": "; }
  void fail(SliceCheck why);

  const CollectiveContext& ctx_;
  const PeerExchange& x_;
  const DataType dtype_;
  const int me_;
  const size_t sendBytes_, recvBytes_;
  bool sending_, receiving_;
  std::vector<uint8_t> message_;
  EagerView payload_;               // in message_, once intact
  std::vector<SliceFailure> mine_;  // this round's failure of the received message
};

Status EagerFlows::send(int attempt) {
  const Fingerprint f = sendFingerprint(ctx_, x_, dtype_);
  const auto* fingerprint = reinterpret_cast<const uint8_t*>(&f);
  std::vector<uint8_t> body(fingerprint, fingerprint + sizeof(f));
  const SliceId id{x_.sendSeq, 0, 0, uint32_t(me_), uint32_t(sendBytes_), uint16_t(attempt)};
  appendEagerPayload(&body, id, x_.send, sendBytes_, ctx_.counters);
  if (attempt > 0) {
    ctx_.counters->retransmitted++;
    trace::instant(trace::Kind::kRetransmit, "retransmit", ctx_.track, x_.sendSeq, x_.dst, 0, 0, attempt);
  }
  if (const FaultInjector* inj = ctx_.injector) {
    if (int ms = inj->delayMs(x_.sendSeq, 0, 0, x_.dst, attempt)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      ctx_.counters->delayed++;
    }
  }
  return sendToPeer(ctx_, x_.dst, ControlTag::kFingerprint, body.data(), body.size());
}

Status EagerFlows::receive(int attempt) {
  const int src = x_.src;
  bool damaged = false;
  if (attempt == 0 && x_.takenFingerprint != nullptr) {
    message_ = *x_.takenFingerprint;
    damaged = x_.takenDamaged;
  } else {
    RINGGUARD_RETURN_IF_ERROR(pollUntil(
        ctx_,
        [&](bool* done) {
          int from = -1;
          return ctx_.transport->control()->probeRepairable(src, ControlTag::kFingerprint, &message_, &from,
                                                            done, &damaged, ctx_.injector, ctx_.counters);
        },
        [&] {
          return "the sendrecv message from rank " + std::to_string(src) +
                 (attempt == 0 ? std::string() : " again (attempt " + std::to_string(attempt) + ")");
        },
        src));
  }
  if (damaged) {  // counted as detected by the channel
    fail(SliceCheck::kCorrupt);
    return Status::ok();
  }
  RINGGUARD_RETURN_IF_ERROR(
      checkPeerFingerprint(ctx_, src, message_, recvFingerprint(ctx_, x_, dtype_), "sendrecv"));
  if (!parseEagerExtension(&message_, sizeof(Fingerprint), &payload_) || payload_.bytes != recvBytes_) {
    std::ostringstream os;
    os << prefix(x_.recvSeq) << "malformed message from rank " << src << " (" << message_.size()
       << " bytes): not a fingerprint followed by " << recvBytes_ << " payload bytes";
    return Status(StatusCode::kTransportError, os.str());
  }
  const SliceId expected{x_.recvSeq, 0, 0, uint32_t(src), uint32_t(recvBytes_), uint16_t(attempt)};
  const SliceCheck check = verifyEagerPayload(ctx_, expected, payload_, ctx_.counters);
  if (check == SliceCheck::kPoisoned) {
    return Status(StatusCode::kTransportError,
                  prefix(x_.recvSeq) + "rank " + std::to_string(src) + " sent a poisoned payload");
  }
  if (isLinkFailure(check)) fail(check);
  return Status::ok();
}

void EagerFlows::fail(SliceCheck why) {
  SliceFailure f;
  f.column = uint32_t(x_.src);
  f.sender = x_.src;
  f.receiver = me_;
  f.reason = uint8_t(why);
  mine_.push_back(f);
  trace::instant(trace::Kind::kDetect, "detected", ctx_.track, x_.recvSeq, x_.src, me_, 0, 0,
                 sliceCheckName(why));
}

Status EagerFlows::settle() {
  for (int round = 0; sending_ || receiving_; ++round) {
    std::vector<SliceFailure> theirs;
    if (receiving_) RINGGUARD_RETURN_IF_ERROR(sendPeerVerdict(ctx_, x_.src, x_.recvSeq, round, mine_));
    if (sending_) {
      RINGGUARD_RETURN_IF_ERROR(receivePeerVerdict(ctx_, x_.dst, x_.sendSeq, round, &theirs));
      for (const SliceFailure& f : theirs) {
        if (theirs.size() > 1 || f.column != uint32_t(me_) || f.sender != me_ || f.receiver != x_.dst ||
            f.step != 0 || f.slice != 0) {
          return Status(StatusCode::kTransportError,
                        prefix(x_.sendSeq) + "verdict entry from rank " + std::to_string(x_.dst) +
                            " rejected: " + describeFailure(f) + " is not this message's payload");
        }
      }
    }
    // The same failure ends both sides of its flow after the same round.
    for (const auto* failed : {&mine_, &theirs}) {
      if (failed->empty() || round < ctx_.options->maxRetries) continue;
      const uint64_t seq = failed == &mine_ ? x_.recvSeq : x_.sendSeq;
      return Status(StatusCode::kCorruption, prefix(seq) + "slice still failing verification after " +
                                                 std::to_string(round) +
                                                 " retransmission(s): " + describeFailure(failed->front()));
    }
    if (!mine_.empty() || !theirs.empty()) ctx_.counters->repairRounds++;
    if (sending_) {
      sending_ = !theirs.empty();
      if (sending_) RINGGUARD_RETURN_IF_ERROR(send(round + 1));
    }
    if (receiving_) {
      receiving_ = !mine_.empty();
      mine_.clear();
      if (receiving_) {
        RINGGUARD_RETURN_IF_ERROR(receive(round + 1));
      } else {
        copyBytes(x_.recv, payload_.payload, recvBytes_);
      }
    }
  }
  return Status::ok();
}

}  // namespace

Status checkSendRecvArgs(const CollectiveShape& c, const PeerExchange& x, DataType dtype) {
  RINGGUARD_RETURN_IF_ERROR(checkDtype(dtype));
  if (x.tag < 0) return Status(StatusCode::kInvalidArgument, "tag " + std::to_string(x.tag) + " is negative");
  if (x.dst < 0 && x.src < 0)
    return Status(StatusCode::kInvalidArgument, "neither a destination nor a source rank");
  if (x.dst >= 0) {
    RINGGUARD_RETURN_IF_ERROR(checkRank("destination rank", x.dst, c.size));
    RINGGUARD_RETURN_IF_ERROR(checkBuffer("send", x.send, x.sendCount));
    RINGGUARD_RETURN_IF_ERROR(checkSlices(x.sendCount, dtype, c.sliceBytes));
  }
  if (x.src >= 0) {
    RINGGUARD_RETURN_IF_ERROR(checkRank("source rank", x.src, c.size));
    RINGGUARD_RETURN_IF_ERROR(checkBuffer("recv", x.recv, x.recvCount));
    RINGGUARD_RETURN_IF_ERROR(checkSlices(x.recvCount, dtype, c.sliceBytes));
  }
  if ((x.dst == c.rank) != (x.src == c.rank)) {
    return Status(StatusCode::kInvalidArgument,
                  "a message to this rank itself needs its send and receive in the same call");
  }
  if (x.dst == c.rank && x.sendCount != x.recvCount) {
    return Status(StatusCode::kInvalidArgument, "a message to itself sends " + std::to_string(x.sendCount) +
                                                    " elements but receives " + std::to_string(x.recvCount));
  }
  const size_t esize = dataTypeSize(dtype);
  if (x.dst >= 0 && x.src >= 0)
    return checkDisjoint("send", x.send, x.sendCount * esize, "recv", x.recv, x.recvCount * esize);
  return Status::ok();
}

namespace {

// The two-sided path: fingerprint frames (with the payload where it is small) and verdict frames. On a
// transport with windows the receive, once this call's frames went out, takes its message whichever way it
// came (takeMessage): a message in a slot is read there, and only the send remains two-sided.
Status twoSidedSendRecv(const CollectiveContext& ctx, Executor* exec, const PeerExchange& given,
                        DataType dtype) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype);
  PeerExchange x = given;
  std::vector<uint8_t> frame;
  // Before any payload: the receiver checks what the sender will send. A direction whose payload fits the
  // eager limit sends it with its fingerprint; both ends choose alike from the count they agreed on.
  const bool sendEager = x.dst >= 0 && fitsEager(ctx, *exec, x.sendCount * esize);
  bool recvEager = x.src >= 0 && fitsEager(ctx, *exec, x.recvCount * esize);
  if (sendEager) {
    RINGGUARD_RETURN_IF_ERROR(EagerFlows(ctx, x, dtype, true, false).send(0));
  } else if (x.dst >= 0) {
    const Fingerprint f = sendFingerprint(ctx, x, dtype);
    RINGGUARD_RETURN_IF_ERROR(sendToPeer(ctx, x.dst, ControlTag::kFingerprint, &f, sizeof(f)));
  }
  if (x.src >= 0 && x.takenFingerprint == nullptr && ctx.transport->windows() != nullptr &&
      exec->memory() == MemoryKind::kHost) {
    const size_t recvBytes = x.recvCount * esize;
    bool inSlot = false, damaged = false;
    RINGGUARD_RETURN_IF_ERROR(takeMessage(ctx, x.src, x.recvSeq, recvEager, runsInSlot(ctx, *exec, recvBytes),
                                          &inSlot, &frame, &damaged));
    if (inSlot) {
      RINGGUARD_RETURN_IF_ERROR(
          readSlot(ctx, x.src, x.recvSeq, recvFingerprint(ctx, x, dtype), x.recv, recvBytes));
      x.src = -1;
      recvEager = false;
    } else {
      x.takenFingerprint = &frame;
      x.takenDamaged = damaged;
    }
  }
  EagerFlows eager(ctx, x, dtype, sendEager, recvEager);
  if (recvEager) {
    RINGGUARD_RETURN_IF_ERROR(eager.receive(0));
  } else if (x.src >= 0 && x.takenFingerprint != nullptr) {
    if (x.takenDamaged) {  // only a payload in the frame can be repaired; a fingerprint alone cannot
      return Status(StatusCode::kTransportError, "sendrecv seq " + std::to_string(x.recvSeq) +
                                                     ": the fingerprint frame from rank " +
                                                     std::to_string(x.src) + " failed its CRC");
    }
    RINGGUARD_RETURN_IF_ERROR(checkPeerFingerprintMessage(ctx, x.src, *x.takenFingerprint,
                                                          recvFingerprint(ctx, x, dtype), "sendrecv"));
  } else if (x.src >= 0) {
    RINGGUARD_RETURN_IF_ERROR(receivePeerFingerprint(ctx, x.src, recvFingerprint(ctx, x, dtype), "sendrecv"));
  }
  // The small directions settle first: their waits are only on other small directions' messages and
  // verdicts, which every rank sends before it runs a pipeline, so no rank waits on a pipeline for them.
  RINGGUARD_RETURN_IF_ERROR(eager.settle());
  const bool sendPipelined = x.dst >= 0 && !sendEager, recvPipelined = x.src >= 0 && !recvEager;
  if (!sendPipelined && !recvPipelined) return Status::ok();

  // Flows are columns named by their sender; one step.
  std::vector<Flow> out, in;
  if (sendPipelined) out.push_back(Flow{me, x.dst, 0, 0, x.sendCount, x.sendSeq});
  if (recvPipelined) in.push_back(Flow{x.src, x.src, 0, 0, x.recvCount, x.recvSeq});
  auto route = [me, x, sendPipelined, recvPipelined](int column) {
    if (column == me && sendPipelined) return FlowRoute{me, x.dst, 0};
    if (column == x.src && recvPipelined) return FlowRoute{x.src, me, 0};
    return FlowRoute{};
  };
  // One plan, two buffers: sends read x.send, receives land in x.recv (offsets are 0 in both).
  const FlowPlan plan(n, me, n, 1, dtype, ctx.options->sliceBytes, x.send, x.recv, out, in, route);

  // Each direction keeps exchanging verdicts while its last verdict named failures: the two ends of a
  // flow see the same verdicts, so they stop at the same round and no verdict is left unread.
  bool sendActive = sendPipelined, recvActive = recvPipelined;
  VerdictExchange exchange = [&](int round, const std::vector<SliceFailure>& mine,
                                 std::vector<SliceFailure>* repair) {
    std::vector<SliceFailure> theirs;
    if (recvActive) RINGGUARD_RETURN_IF_ERROR(sendPeerVerdict(ctx, x.src, x.recvSeq, round, mine));
    if (sendActive) RINGGUARD_RETURN_IF_ERROR(receivePeerVerdict(ctx, x.dst, x.sendSeq, round, &theirs));
    for (const SliceFailure& f : theirs) {
      Status onRoute = checkPlanFailure(plan, f);
      if (!onRoute.isOk()) {
        return Status(onRoute.code(), "sendrecv seq " + std::to_string(x.sendSeq) +
                                          ": verdict entry from rank " + std::to_string(x.dst) +
                                          " rejected: " + onRoute.message());
      }
    }
    recvActive = !mine.empty();
    sendActive = !theirs.empty();
    std::vector<SliceFailure> all = mine;
    all.insert(all.end(), theirs.begin(), theirs.end());
    *repair = canonicalFailures(std::move(all));
    return Status::ok();
  };
  return runPipeline(ctx, exec, plan, exchange);
}

}  // namespace

Status sendRecv(const CollectiveContext& group, Executor* exec, const PeerExchange& x, DataType dtype) {
  // Errors name the exchange by its own message number (the one it receives, else the one it sends), not
  // by the group's collective number, which point-to-point traffic does not advance.
  CollectiveContext ctx = group;
  ctx.seq = x.src >= 0 ? x.recvSeq : x.sendSeq;
  const int me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype);
  if (x.dst == me) return exec->copy(x.recv, x.send, x.sendCount * esize);  // nothing crosses a link
  const bool windows = ctx.transport->windows() != nullptr && exec->memory() == MemoryKind::kHost;
  if (!windows) return twoSidedSendRecv(ctx, exec, x, dtype);

  // On the windows (window_sendrecv.h): a message that fits its slot is published first, as a two-sided
  // send's frames go out before its receive waits, so no rank's receive waits on anything a peer does after
  // its own receive. A larger message takes the two-sided path, whose receive takes either kind.
  const size_t sendBytes = x.sendCount * esize;
  const bool sendSlot = x.dst >= 0 && runsInSlot(ctx, *exec, sendBytes);
  if (sendSlot) {
    CollectiveContext sendCtx = ctx;
    sendCtx.seq = x.sendSeq;
    publishSlot(sendCtx, x.dst, x.sendSeq, sendFingerprint(ctx, x, dtype), x.send, sendBytes);
  }
  PeerExchange rest = x;
  if (sendSlot) rest.dst = -1;
  if (rest.dst >= 0 || rest.src >= 0) RINGGUARD_RETURN_IF_ERROR(twoSidedSendRecv(ctx, exec, rest, dtype));
  if (!sendSlot) return Status::ok();
  CollectiveContext sendCtx = ctx;
  sendCtx.seq = x.sendSeq;
  return awaitSlotAck(sendCtx, x.dst, x.sendSeq);
}

}  // namespace ringguard
