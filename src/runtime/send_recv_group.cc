// Grouped point-to-point (Communicator::sendRecvGroupAsync): the ops planned into rounds that cannot
// deadlock (core/p2p_group_plan.h), each round one sendRecv, and one Work over them all.
#include <string>
#include <vector>

#include "algorithms/arguments.h"
#include "core/p2p_group_plan.h"
#include "ringguard/runtime/communicator.h"
#include "runtime/communicator_impl.h"

namespace ringguard {

namespace {

// What the plan needs of every op before any round is issued: a direction, a peer in range, a dtype and a
// size in bytes that fits. The rest (buffers, counts against slices, a message to itself without its other
// end) each round checks as sendRecvAsync does, telling its peers.
Status checkGroupOp(const P2pOp& op, size_t index, int size) {
  const auto invalid = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "op " + std::to_string(index) + ": " + why);
  };
  if (op.kind != P2pOp::Kind::kSend && op.kind != P2pOp::Kind::kRecv) {
    return invalid("kind " + std::to_string(int(op.kind)) + " is neither a send nor a receive");
  }
  const char* what = op.kind == P2pOp::Kind::kSend ? "a send to" : "a receive from";
  if (op.peer < 0 || op.peer >= size) {
    return invalid(std::string(what) + " rank " + std::to_string(op.peer) + ", outside [0, " +
                   std::to_string(size) + ")");
  }
  Status dtype = checkDtype(op.dtype);
  if (!dtype.isOk()) return invalid(dtype.message());
  if (op.count > ~size_t(0) / dataTypeSize(op.dtype)) {
    return invalid("count " + std::to_string(op.count) + " overflows the address space");
  }
  return Status::ok();
}

}  // namespace

bool Communicator::sendRecvOnPeerWindows() const {
  return impl_->direct_ != nullptr && impl_->direct_->takesPeerSendRecv();
}

std::shared_ptr<Work> Communicator::sendRecvGroupAsync(const std::vector<P2pOp>& ops, void* stream) {
  std::vector<P2pGroupEnd> ends;
  ends.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    Status checked = checkGroupOp(ops[i], i, size());
    if (!checked.isOk()) {
      return Work::completed(Status(checked.code(), "sendrecv group of " + std::to_string(ops.size()) +
                                                        " ops on rank " + std::to_string(rank()) + ": " +
                                                        checked.message()));
    }
    ends.push_back(P2pGroupEnd{ops[i].kind == P2pOp::Kind::kSend, ops[i].peer});
  }
  auto group = std::make_shared<Work>();
  for (const P2pGroupRound& round : planP2pGroup(rank(), size(), ends)) {
    const P2pOp* send = round.send >= 0 ? &ops[size_t(round.send)] : nullptr;
    const P2pOp* recv = round.recv >= 0 ? &ops[size_t(round.recv)] : nullptr;
    group->impl_->parts_.push_back(sendRecvRoundAsync(
        send ? send->buffer : nullptr, send ? send->count : 0, send ? send->dtype : recv->dtype,
        send ? send->peer : -1, recv ? recv->buffer : nullptr, recv ? recv->count : 0,
        recv ? recv->dtype : send->dtype, recv ? recv->peer : -1, stream));
  }
  if (group->impl_->parts_.empty()) group->impl_->complete(Status::ok());
  return group;
}

}  // namespace ringguard
