// Verified point-to-point: a send to one rank and/or a receive from one rank, posted together. Only the
// two ends of each flow talk: the receiver checks the sender's fingerprint (count, dtype, message
// number) before any payload, verifies every slice in place, and answers with its verdict; the sender
// resends failed slices from the caller's buffer (retained until the exchange completes).
#include <algorithm>

#include "algorithms/arguments.h"
#include "algorithms/collectives.h"
#include "algorithms/flow_plan.h"
#include "algorithms/peer_messages.h"

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

Status sendRecv(const CollectiveContext& group, Executor* exec, const PeerExchange& x, DataType dtype) {
  // Errors name the exchange by its own message number (the one it receives, else the one it sends), not
  // by the group's collective number, which point-to-point traffic does not advance.
  CollectiveContext ctx = group;
  ctx.seq = x.src >= 0 ? x.recvSeq : x.sendSeq;
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const size_t esize = dataTypeSize(dtype);
  if (x.dst == me) return exec->copy(x.recv, x.send, x.sendCount * esize);  // nothing crosses a link

  // Before any payload: the receiver checks what the sender will send.
  if (x.dst >= 0) {
    const Fingerprint f = flowFingerprint(ctx, dtype, x.sendCount, x.tag, x.sendSeq);
    RINGGUARD_RETURN_IF_ERROR(sendToPeer(ctx, x.dst, ControlTag::kFingerprint, &f, sizeof(f)));
  }
  if (x.src >= 0)
    RINGGUARD_RETURN_IF_ERROR(receivePeerFingerprint(
        ctx, x.src, flowFingerprint(ctx, dtype, x.recvCount, x.tag, x.recvSeq), "sendrecv"));

  // Flows are columns named by their sender; one step.
  std::vector<Flow> out, in;
  if (x.dst >= 0) out.push_back(Flow{me, x.dst, 0, 0, x.sendCount, x.sendSeq});
  if (x.src >= 0) in.push_back(Flow{x.src, x.src, 0, 0, x.recvCount, x.recvSeq});
  auto route = [me, x](int column) {
    if (column == me && x.dst >= 0) return FlowRoute{me, x.dst, 0};
    if (column == x.src) return FlowRoute{x.src, me, 0};
    return FlowRoute{};
  };
  // One plan, two buffers: sends read x.send, receives land in x.recv (offsets are 0 in both).
  const FlowPlan plan(n, me, n, 1, dtype, ctx.options->sliceBytes, x.send, x.recv, out, in, route);

  // Each direction keeps exchanging verdicts while its last verdict named failures: the two ends of a
  // flow see the same verdicts, so they stop at the same round and no verdict is left unread.
  bool sendActive = x.dst >= 0, recvActive = x.src >= 0;
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

}  // namespace ringguard
