#include "runtime/peer_lanes.h"

#include <chrono>
#include <new>
#include <vector>

#include "algorithms/agreement.h"
#include "algorithms/collectives.h"
#include "algorithms/window_sendrecv.h"
#include "core/keep_alive.h"
#include "core/logging.h"
#include "core/thread_name.h"
#include "executor/host_executor.h"
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
  // The any-source receives first: lanes' messages issued after one wait for it to match.
  if (anyThread_.joinable()) anyThread_.join();
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

void PeerLanes::recvAny(int tag, void* data, size_t count, DataType dtype, DoneFrom done) {
  auto invalid = [&](const std::string& why) {
    done(Status(StatusCode::kInvalidArgument,
                "recv from any source on rank " + std::to_string(rank_) + ": " + why),
         -1);
  };
  if (size_ < 2) return invalid("the group has no other rank to receive from");
  PeerExchange x;
  x.tag = tag;
  x.src = (rank_ + 1) % size_;  // any peer: what is checked does not depend on which
  x.recv = data;
  x.recvCount = count;
  Status checked = checkSendRecvArgs(CollectiveShape{rank_, size_, options_.sliceBytes}, x, dtype);
  if (!checked.isOk()) return invalid(checked.message());
  Message m{tag, nullptr, data, count, dtype, nullptr, currentIssueLane()};
  m.doneFrom = std::move(done);
  Status poisoned;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) {
      poisoned =
          Status(StatusCode::kInvalidArgument, "recv on rank " + std::to_string(rank_) + " after shutdown");
    } else if (!firstError_.isOk()) {
      poisoned = firstError_;
    } else {
      m.anyBefore = anyIssued_++;
      anyQueue_.push_back(std::move(m));
      if (!anyThread_.joinable()) {
        anyThread_ = std::thread([this] {
          nameThisThread("rg-recv-any");
          anyLoop();
        });
      }
    }
  }
  if (!poisoned.isOk()) return m.doneFrom(poisoned, -1);
  cv_.notify_all();
}

PeerLanes::Lane* PeerLanes::laneFor(int peer, bool isSend) {
  std::unique_ptr<Lane>& lane = lanes_[{peer, isSend}];
  if (!lane) {
    lane = std::make_unique<Lane>();
    Lane* l = lane.get();
    l->thread = std::thread([this, peer, isSend, l] {
      nameThisThread(isSend ? "rg-send" : "rg-recv");
      loop(peer, isSend, l);
    });
  }
  return lane.get();
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
      m.anyBefore = isSend ? 0 : anyIssued_;
      laneFor(peer, isSend)->queue.push_back(std::move(m));
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
      // A receive waits for the any-source receives issued before it (they may take this peer's message).
      cv_.wait(lock, [&] {
        return (stopping_ && lane->queue.empty()) ||
               (!lane->queue.empty() && lane->queue.front().anyBefore <= anyDone_);
      });
      if (lane->queue.empty()) return;  // stopping with nothing left
      m = std::move(lane->queue.front());
      lane->queue.pop_front();
      lane->running = true;
      poisoned = firstError_;
    }
    if (!poisoned.isOk()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        lane->running = false;
      }
      cv_.notify_all();
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
      lane->running = false;
      counters_ += delta;
      if (st.isOk()) counters_.collectives++;
      // Ended by another lane's failure: that failure is the cause.
      if (st.code() == StatusCode::kAborted && !firstError_.isOk()) st = firstError_;
    }
    cv_.notify_all();
    if (!st.isOk()) fail(st);
    m.done(st);
  }
}

void PeerLanes::anyLoop() {
  for (;;) {
    Message m;
    Status poisoned;
    uint64_t ordinal = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !anyQueue_.empty(); });
      if (anyQueue_.empty()) return;  // stopping with nothing left
      m = std::move(anyQueue_.front());
      anyQueue_.pop_front();
      poisoned = firstError_;
      ordinal = anyDone_;  // they match in order: this one's number
    }
    int source = -1;
    Counters delta;
    Status st = poisoned;
    if (st.isOk()) {
      try {
        st = runAny(m, ordinal, &source, &delta);
      } catch (const std::bad_alloc&) {
        st = Status(StatusCode::kInternal,
                    "recv from any source on rank " + std::to_string(rank_) + ": out of memory");
      }
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++anyDone_;
      counters_ += delta;
      if (st.isOk()) counters_.collectives++;
      if (st.code() == StatusCode::kAborted && !firstError_.isOk()) st = firstError_;
    }
    cv_.notify_all();
    if (!st.isOk() && poisoned.isOk()) fail(st);
    m.doneFrom(st, st.isOk() ? source : -1);
  }
}

CollectiveContext PeerLanes::context(const Message& m, Counters* delta, const char* name,
                                     std::shared_ptr<const FaultInjector>* injector) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    *injector = injector_;
  }
  CollectiveContext ctx;
  ctx.transport = transport_.get();
  ctx.options = &options_;
  ctx.injector = (*injector)->enabled() ? injector->get() : nullptr;
  ctx.counters = delta;
  ctx.lane = m.issueLane;
  ctx.name = name;
  return ctx;
}

Status PeerLanes::runAny(const Message& m, uint64_t ordinal, int* source, Counters* delta) {
  std::shared_ptr<const FaultInjector> injector;
  CollectiveContext ctx = context(m, delta, "recv", &injector);
  ctx.aborted = &aborted_;
  ctx.seq = ordinal;
  const auto start = std::chrono::steady_clock::now();
  const std::string what =
      "a message from any rank (recv without a source, tag " + std::to_string(m.tag) + ")";
  std::vector<uint8_t> frame;
  bool damaged = false, inSlot = false;
  const Windows* windows = transport_->windows();
  // Peers whose channel failed (kTransportError: a peer that left, its group destroyed, sends nothing more)
  // are passed over; the receive fails with the first such error only when every peer has.
  std::vector<bool> gone(size_t(size_), false);
  Status firstGone;
  size_t goneCount = 0;
  auto passOver = [&](int p, const Status& st) -> Status {
    if (st.code() != StatusCode::kTransportError) return st;
    gone[size_t(p)] = true;
    if (firstGone.isOk()) firstGone = st;
    return ++goneCount == size_t(size_ - 1) ? firstGone : Status::ok();
  };
  RINGGUARD_RETURN_IF_ERROR(pollUntil(
      ctx,
      [&](bool* done) -> Status {
        // Checked before pollUntil's own deadline: no single peer is the one this rank waits on.
        if (std::chrono::steady_clock::now() - start >= options_.timeout) {
          return Status(StatusCode::kTimeout,
                        "recv on rank " + std::to_string(rank_) + ": no message from any rank within " +
                            std::to_string(options_.timeout.count()) + " ms (recv without a source, tag " +
                            std::to_string(m.tag) + ")");
        }
        for (int p = 0; p < size_; ++p) {  // ascending rank order: the matching rule (peer_lanes.h)
          if (p == rank_ || gone[size_t(p)]) continue;
          uint64_t next = 0;  // p's next message to this rank: the lane's next message number
          {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = lanes_.find({p, false});
            const Lane* lane = it == lanes_.end() ? nullptr : it->second.get();
            // A receive from p issued before this one takes p's next message.
            if (lane != nullptr &&
                (lane->running || (!lane->queue.empty() && lane->queue.front().anyBefore <= ordinal)))
              continue;
            if (lane != nullptr) next = lane->messages;
          }
          bool checked = false;
          Status st = tryCheckPeer(p, &checked);
          if (!st.isOk()) {
            RINGGUARD_RETURN_IF_ERROR(passOver(p, st));
            continue;
          }
          if (!checked) continue;
          // A message published in p's slot (window_sendrecv.h) is there as a frame would be.
          if (windows != nullptr && slotPublished(*windows, p, next)) {
            *source = p;
            inSlot = true;
            *done = true;
            return Status::ok();
          }
          bool got = false;
          int from = -1;
          st = transport_->control()->probeRepairable(p, ControlTag::kFingerprint, &frame, &from, &got,
                                                      &damaged, ctx.injector, delta);
          if (!st.isOk()) {
            RINGGUARD_RETURN_IF_ERROR(passOver(p, st));
            continue;
          }
          if (got) {
            *source = p;
            *done = true;
            return Status::ok();
          }
        }
        return Status::ok();
      },
      [&] { return what; }, -1));
  Lane* lane;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    lane = laneFor(*source, /*isSend=*/false);
  }
  PeerExchange x;
  x.tag = m.tag;
  x.src = *source;
  x.recv = m.recv;
  x.recvCount = m.count;
  x.recvSeq = lane->messages++;  // the lane's thread starts nothing before this receive ends (anyBefore)
  // Taken from a slot: sendRecv finds it there.
  x.takenFingerprint = inSlot ? nullptr : &frame;
  x.takenDamaged = damaged;
  if (!lane->exec) lane->exec = std::make_unique<HostExecutor>();
  return sendRecv(ctx, lane->exec.get(), x, m.dtype);
}

Status PeerLanes::checkPeer(int peer) {
  PeerCheck* check;
  bool post = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    check = &peerChecks_[peer];
    // Another thread's step ends, at worst, at its timeout or when an abort stops it.
    cv_.wait(lock, [&] { return check->done || !check->busy; });
    if (check->done) return check->result;
    check->busy = true;
    post = !check->posted;
    check->posted = true;
  }
  Status st = post ? postPeerHandshake(transport_.get(), peer, options_) : Status::ok();
  if (st.isOk()) st = finishPeerHandshake(transport_.get(), peer, options_, &aborted_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check->busy = false;
    check->done = true;
    check->result = st;
  }
  cv_.notify_all();
  return st;
}

Status PeerLanes::tryCheckPeer(int peer, bool* done) {
  *done = false;
  PeerCheck* check;
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check = &peerChecks_[peer];
    if (check->done) {
      *done = true;
      return check->result;
    }
    if (check->busy) return Status::ok();  // a lane is making it: look again at the next poll
    check->busy = true;
    post = !check->posted;
    check->posted = true;
  }
  Status st = post ? postPeerHandshake(transport_.get(), peer, options_) : Status::ok();
  bool got = false;
  if (st.isOk()) {
    std::vector<uint8_t> record;
    int from = -1;
    st = transport_->control()->probe(peer, ControlTag::kHandshake, &record, &from, &got);
    if (st.isOk() && got) st = comparePeerHandshake(transport_.get(), peer, options_, record);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    check->busy = false;
    if (got || !st.isOk()) {
      check->done = true;
      check->result = st;
      *done = true;
    }
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
  CollectiveContext ctx = context(m, delta, isSend ? "send" : "recv", &injector);
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
    dropped[{-1, false}].swap(anyQueue_);
    anyDone_ += dropped[{-1, false}].size();  // failed: the lanes' later messages need not wait for them
  }
  aborted_.store(true);
  if (announce) broadcastError(transport_.get(), reason);
  cv_.notify_all();
  for (auto& entry : dropped) {
    for (Message& m : entry.second) {
      if (m.doneFrom) {
        m.doneFrom(reason, -1);
      } else {
        m.done(reason);
      }
    }
  }
}

Status PeerLanes::setFault(const FaultOptions& fault) {
  std::shared_ptr<const FaultInjector> injector;
  RINGGUARD_RETURN_IF_ERROR(makeFaultInjector(options_, size_, fault, &injector));
  std::lock_guard<std::mutex> lock(mutex_);
  injector_ = std::move(injector);
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
