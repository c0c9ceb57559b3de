#include "runtime/peer_lanes.h"

#include <new>

#include "algorithms/collective.h"
#include "algorithms/collectives.h"
#include "algorithms/executor.h"
#include "core/keep_alive.h"
#include "core/logging.h"
#include "core/thread_name.h"
#include "ringguard/core/issue_lane.h"
#include "runtime/handshake.h"
#include "runtime/transport_defaults.h"

namespace ringguard {

PeerLanes::PeerLanes(std::unique_ptr<Transport> transport, const Options& options)
    : transport_(std::move(transport)),
      options_(withTransportDefaults(options, *transport_)),
      rank_(transport_->rank()),
      size_(transport_->size()),
      injector_(std::make_shared<const FaultInjector>(options.fault)) {
  Status valid = options_.validateFor(size_);
  RINGGUARD_ENFORCE(valid.isOk(), "PeerLanes: invalid options: " + valid.message());
}

PeerLanes::~PeerLanes() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& entry : lanes_) entry.second->thread.join();
  if (!firstError_.isOk()) {
    // A receive abandoned by the failure may still land in its lane's slots when the peer's message
    // arrives: keep them to the end of the process (one executor per lane, after a failure only) rather
    // than free them under the transport, as the MPI transport does with its abandoned buffers.
    for (auto& entry : lanes_) keepUntilExit(std::move(entry.second->exec));
  }
  lanes_.clear();
  // After a failure messages may still be in flight: the broken transport keeps them from matching
  // anything later (as a failed Communicator's), and its end waits for no peer's goodbye (as after a
  // failure elsewhere in the owner's group: peersMayBeGone). Otherwise it says goodbye to the peers.
  if (!firstError_.isOk() || peersMayBeGone_.load()) transport_->markBroken();
  transport_.reset();
}

void PeerLanes::send(int peer, int tag, const void* data, size_t count, DataType dtype, Done done) {
  enqueue(peer, /*isSend=*/true,
          Message{tag, data, nullptr, count, dtype, std::move(done), currentIssueLane()});
}

void PeerLanes::recv(int peer, int tag, void* data, size_t count, DataType dtype, Done done) {
  enqueue(peer, /*isSend=*/false,
          Message{tag, nullptr, data, count, dtype, std::move(done), currentIssueLane()});
}

void PeerLanes::enqueue(int peer, bool isSend, Message m) {
  const char* what = isSend ? "send" : "recv";
  auto invalid = [&](const std::string& why) {
    m.done(Status(StatusCode::kInvalidArgument,
                  std::string(what) + " on rank " + std::to_string(rank_) + ": " + why));
  };
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return invalid("peer rank " + std::to_string(peer) + " must be another rank in [0, " +
                   std::to_string(size_) + ")");
  }
  PeerExchange x;
  x.tag = m.tag;
  (isSend ? x.dst : x.src) = peer;
  x.send = m.send;
  x.sendCount = isSend ? m.count : 0;
  x.recv = m.recv;
  x.recvCount = isSend ? 0 : m.count;
  Status checked = checkSendRecvArgs(CollectiveShape{rank_, size_, options_.sliceBytes}, x, m.dtype);
  if (!checked.isOk()) return invalid(checked.message());

  Status poisoned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      poisoned = Status(StatusCode::kInvalidArgument,
                        std::string(what) + " on rank " + std::to_string(rank_) + " after shutdown");
    } else if (!firstError_.isOk()) {
      poisoned = firstError_;
    } else {
      std::unique_ptr<Lane>& lane = lanes_[{peer, isSend}];
      if (!lane) {
        lane = std::make_unique<Lane>();
        Lane* l = lane.get();
        l->thread = std::thread([this, peer, isSend, l] {
          nameThisThread(isSend ? "rg-send" : "rg-recv");
          loop(peer, isSend, l);
        });
      }
      lane->queue.push_back(std::move(m));
    }
  }
  if (!poisoned.isOk()) return m.done(poisoned);
  cv_.notify_all();
}

void PeerLanes::loop(int peer, bool isSend, Lane* lane) {
  for (;;) {
    Message m;
    Status poisoned;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !lane->queue.empty(); });
      if (lane->queue.empty()) return;  // stopping with nothing left
      m = std::move(lane->queue.front());
      lane->queue.pop_front();
      poisoned = firstError_;
    }
    if (!poisoned.isOk()) {
      m.done(poisoned);
      continue;
    }
    Counters delta;
    Status st;
    try {
      st = run(peer, isSend, lane, m, &delta);
    } catch (const std::bad_alloc&) {
      st = Status(StatusCode::kInternal, std::string(isSend ? "send to" : "recv from") + " rank " +
                                             std::to_string(peer) + " on rank " + std::to_string(rank_) +
                                             ": out of memory");
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      counters_ += delta;
      if (st.isOk()) counters_.collectives++;
      // Ended by another lane's failure: that failure is the cause.
      if (st.code() == StatusCode::kAborted && !firstError_.isOk()) st = firstError_;
    }
    if (!st.isOk()) fail(st);
    m.done(st);
  }
}

Status PeerLanes::checkPeer(int peer) {
  PeerCheck* check;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    check = &peerChecks_[peer];
    if (check->started) {
      // The other lane's check ends, at worst, at its timeout or when an abort stops it.
      cv_.wait(lock, [&] { return check->done; });
      return check->result;
    }
    check->started = true;
  }
  Status st = peerHandshake(transport_.get(), peer, options_, &aborted_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check->done = true;
    check->result = st;
  }
  cv_.notify_all();
  return st;
}

Status PeerLanes::run(int peer, bool isSend, Lane* lane, const Message& m, Counters* delta) {
  RINGGUARD_RETURN_IF_ERROR(checkPeer(peer));
  PeerExchange x;
  x.tag = m.tag;
  if (isSend) {
    x.dst = peer;
    x.send = m.send;
    x.sendCount = m.count;
    x.sendSeq = lane->messages++;
  } else {
    x.src = peer;
    x.recv = m.recv;
    x.recvCount = m.count;
    x.recvSeq = lane->messages++;
  }
  std::shared_ptr<const FaultInjector> injector;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    injector = injector_;
  }
  CollectiveContext ctx;
  ctx.transport = transport_.get();
  ctx.options = &options_;
  ctx.injector = injector->enabled() ? injector.get() : nullptr;
  ctx.counters = delta;
  ctx.lane = m.issueLane;
  ctx.name = isSend ? "send" : "recv";
  ctx.aborted = &aborted_;
  if (!lane->exec) lane->exec = std::make_unique<HostExecutor>();  // nothing is shared between lanes
  return sendRecv(ctx, lane->exec.get(), x, m.dtype);
}

void PeerLanes::fail(const Status& error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!firstError_.isOk()) return;
    firstError_ = error;
  }
  logError(Subsys::kRuntime, "rank {}: point-to-point failed: {}", rank_, error.toString());
  // As a failed collective: errors the peer already sees the same way need no announcement.
  if (error.code() != StatusCode::kPeerError && error.code() != StatusCode::kCorruption) {
    broadcastError(transport_.get(), error);
  }
  aborted_.store(true);  // the other lanes' messages in flight end at their next wait
}

void PeerLanes::abort(const std::string& why) {
  std::map<std::pair<int, bool>, std::deque<Message>> dropped;
  Status reason;
  bool announce = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (firstError_.isOk()) {
      firstError_ = Status(StatusCode::kAborted, "rank " + std::to_string(rank_) + " aborted: " + why);
      announce = true;
    }
    reason = firstError_;
    for (auto& entry : lanes_) dropped[entry.first].swap(entry.second->queue);
  }
  aborted_.store(true);
  if (announce) broadcastError(transport_.get(), reason);
  for (auto& entry : dropped) {
    for (Message& m : entry.second) m.done(reason);
  }
}

Status PeerLanes::setFault(const FaultOptions& fault) {
  Options check = options_;
  check.fault = fault;
  RINGGUARD_RETURN_IF_ERROR(check.validateFor(size_));
  std::lock_guard<std::mutex> lock(mutex_);
  injector_ = std::make_shared<const FaultInjector>(fault);
  return Status::ok();
}

Counters PeerLanes::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

Status PeerLanes::firstError() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return firstError_;
}

}  // namespace ringguard
