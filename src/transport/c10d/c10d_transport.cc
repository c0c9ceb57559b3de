#include "ringguard/transport/c10d_transport.h"

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/log_text.h"
#include "core/thread_name.h"
#include "transport/transport.h"

namespace ringguard {

namespace {

// Gloo's wait(timeout) closes every pair of the context when it expires; ours never does (a year), and
// markBroken() ends waits that must stop.
constexpr std::chrono::milliseconds kNoExpiry = std::chrono::hours(24 * 365);

// Control frames: fixed size (a Gloo receive must know its size), a header and up to kFrameData bytes.
constexpr size_t kFrameBytes = 4096;
struct FrameHeader {
  uint32_t tag;     // ControlTag
  uint32_t total;   // message bytes
  uint32_t offset;  // of this chunk
  uint32_t length;  // of this chunk
};
constexpr size_t kFrameData = kFrameBytes - sizeof(FrameHeader);
// Frame tag of the last frame a transport sends each peer when it is destroyed cleanly: the peer's control
// thread then ends without a receive left posted, so nothing keeps the Gloo context alive.
constexpr uint32_t kGoodbyeTag = 0xB7Eu;
// How long a clean shutdown waits for the peers' goodbyes (a peer that exits closes the connection, which
// also ends the wait).
constexpr std::chrono::seconds kGoodbyeWait(10);

enum : int { kPending = 0, kDone = 1, kFailed = 2, kAborted = 3 };

// What a TransportOp and its waiter share.
struct OpState {
  std::atomic<int> state{kPending};
  std::string error;  // written before state becomes kFailed
};

struct Pending {
  c10::intrusive_ptr<c10d::Work> work;
  std::shared_ptr<OpState> state;
  at::Tensor keep;  // memory the backend reads or writes until the work ends (control frames)
  // Completes without waking the collective: a frame's payload, whose trailer follows in the same waiter
  // (no wait is done before both are). A failure always wakes it.
  bool quiet = false;
};

// Works whose wait was abandoned may still be used by the backend (a receive cannot be withdrawn from
// Gloo): their buffers and works are kept for the life of the process, as MpiTransport keeps the
// communicators of a broken transport.
void keepForever(std::vector<Pending> pending) {
  static std::mutex mutex;
  static auto* kept = new std::vector<Pending>();
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& p : pending) kept->push_back(std::move(p));
}

std::string describe(const std::exception& e) {
  std::string what = e.what();
  auto nl = what.find('\n');  // c10 errors append a backtrace
  return nl == std::string::npos ? what : what.substr(0, nl);
}

// A Gloo operation with `peer` failed with `detail` (Gloo's text). A peer that exited closes its sockets,
// and Gloo reports that as an I/O error of the pair ("Read error ...: Connection reset by peer",
// "Connection closed by peer", "Broken pipe"): say that the connection is gone, and keep Gloo's text.
Status glooFailure(const std::string& what, int peer, const std::string& detail) {
  const std::string rank = "rank " + std::to_string(peer);
  const std::string failed = what + " " + rank + " failed: " + detail;
  for (const char* closed : {"by peer", "Broken pipe", "Socket closed", "Connection closed"}) {
    if (detail.find(closed) != std::string::npos) {
      return Status(StatusCode::kTransportError, "connection to " + rank + " closed (" + rank +
                                                     " exited, or the link to it failed): " + failed);
    }
  }
  return Status(StatusCode::kTransportError, failed);
}

// What a collective waiting on this transport blocks on (Transport::waitForEvent): a count that every
// completion, control frame and abort raises, and the condition that wakes the waiter.
class Events {
 public:
  void raise() {
    std::function<void()> listener;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      count_.fetch_add(1, std::memory_order_relaxed);
      listener = listener_;
    }
    cv_.notify_all();
    if (listener) listener();
  }
  void setListener(std::function<void()> listener) {
    std::lock_guard<std::mutex> lock(mutex_);
    listener_ = std::move(listener);
  }
  uint64_t count() const { return count_.load(std::memory_order_acquire); }
  void waitPast(uint64_t seen, std::chrono::microseconds max) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, max, [&] { return count_.load(std::memory_order_relaxed) != seen; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> count_{0};
  std::function<void()> listener_;  // Transport::setEventListener
};

// Waits the works of one (peer, direction) in post order on its own thread, and raises `events` (when not
// null) at each completion a collective may be waiting for.
class Waiter {
 public:
  explicit Waiter(Events* events)
      : events_(events), thread_([this] {
          nameThisThread("rg-wait");
          loop();
        }) {}
  ~Waiter() {
    abortAll();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    std::vector<Pending> left(queue_.begin(), queue_.end());
    keepForever(std::move(left));
  }

  void push(Pending p) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (aborted_) {
        p.work->abort();
        p.state->state = kAborted;
      }
      queue_.push_back(std::move(p));
    }
    cv_.notify_all();
  }

  // Waits until everything pushed so far has completed, or `deadline`; true if it has.
  bool drain(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    return idle_.wait_until(lock, deadline, [this] { return queue_.empty() && !current_.work; });
  }

  // Ends every wait, now and later (the transport is broken).
  void abortAll() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborted_ = true;
      if (current_.work) current_.work->abort();
      for (auto& p : queue_) {
        p.work->abort();
        p.state->state = kAborted;
      }
    }
    if (events_ != nullptr) events_->raise();
  }

 private:
  void loop() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        current_ = std::move(queue_.front());
        queue_.pop_front();
        if (aborted_) {
          current_.state->state = kAborted;
          keepForever({std::move(current_)});
          current_ = Pending();
          idle_.notify_all();
          continue;
        }
      }
      int result = kDone;
      const bool quiet = current_.quiet;
      std::string error;
      try {
        if (!current_.work->wait(kNoExpiry)) result = kAborted;
      } catch (const std::exception& e) {
        result = kFailed;
        error = describe(e);
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (result == kFailed) current_.state->error = error;
        current_.state->state = result;
        if (result != kDone) keepForever({std::move(current_)});
        current_ = Pending();
        idle_.notify_all();
      }
      if (events_ != nullptr && (result != kDone || !quiet)) events_->raise();
    }
  }

  Events* events_;
  std::mutex mutex_;
  std::condition_variable cv_, idle_;
  std::deque<Pending> queue_;
  Pending current_;
  bool stop_ = false;
  bool aborted_ = false;
  std::thread thread_;
};

class C10dOp final : public TransportOp {
 public:
  C10dOp(std::shared_ptr<OpState> state, c10::intrusive_ptr<c10d::Work> work, int peer, bool isRecv)
      : state_(std::move(state)), work_(std::move(work)), peer_(peer), isRecv_(isRecv) {}
  ~C10dOp() override { cancel(); }

  Status test(bool* done) override {
    int s = state_ ? state_->state.load() : kDone;
    *done = s == kDone;
    if (s == kFailed) return glooFailure(isRecv_ ? "receive from" : "send to", peer_, state_->error);
    if (s == kAborted) {
      return Status(StatusCode::kAborted, std::string(isRecv_ ? "receive from" : "send to") + " rank " +
                                              std::to_string(peer_) + " was aborted");
    }
    return Status::ok();
  }

  // Gloo cannot withdraw a posted receive: ending the wait is all there is. The waiter keeps the work (and
  // so the memory it names stays the caller's problem only until the transport breaks, which a cancelled
  // receive always precedes in the algorithms).
  void cancel() override {
    if (state_ && state_->state.load() == kPending && work_) work_->abort();
    state_.reset();
    work_.reset();
  }

 private:
  std::shared_ptr<OpState> state_;
  c10::intrusive_ptr<c10d::Work> work_;
  int peer_;
  bool isRecv_;
};

class C10dTransport;

// The control channel's hooks move sealed frames through the transport's control frames and inbox.
class C10dControlChannel final : public ControlChannel {
 public:
  C10dControlChannel(int rank, int size, C10dTransport* transport)
      : ControlChannel(rank, size), transport_(transport) {}

 protected:
  Status doSend(int peer, ControlTag tag, const void* frame, size_t bytes) override;
  Status doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from, bool* got) override;

 private:
  C10dTransport* transport_;
};

class C10dTransport final : public Transport {
 public:
  C10dTransport(c10::intrusive_ptr<c10d::Backend> backend, int tagBase)
      : Transport(backend->getRank(), backend->getSize()),
        control_(rank(), size(), this),
        backend_(std::move(backend)),
        tagPayload_(tagBase),
        tagTrailer_(tagBase + 1),
        tagControl_(tagBase + 2),
        peers_(size_t(size())) {
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      auto& peer = peers_[size_t(p)];
      peer.sends = std::make_unique<Waiter>(&events_);
      peer.recvs = std::make_unique<Waiter>(&events_);
      peer.controlSends = std::make_unique<Waiter>(nullptr);  // no collective waits for a control send
      peer.controlThread = std::thread([this, p] {
        nameThisThread("rg-control");
        controlLoop(p);
      });
    }
  }

  ~C10dTransport() override {
    sayGoodbye(/*waitForPeers=*/!broken());
    stopControl();
    peers_.clear();  // joins the waiters
  }

  const char* name() const override { return "gloo"; }
  // Control frames travel as kFrameBytes Gloo messages, each taken by the peer's control thread in turn:
  // a 16 KiB payload (five of them) was slower than the pipeline, a 4 KiB one (two) faster
  // (docs/PERFORMANCE.md, "Small messages through the c10d backend").
  size_t eagerBytes() const override { return kFrameBytes; }
  ControlChannel* control() override { return &control_; }

  // The control channel's hooks (C10dControlChannel).
  Status sendControlFrame(int peer, ControlTag tag, const void* data, size_t bytes);
  Status probeControlFrame(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from, bool* got);

 protected:
  Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override {
    return post(peer, channel, const_cast<void*>(data), bytes, /*isRecv=*/false, out);
  }
  Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                    std::unique_ptr<TransportOp>* out) override {
    return post(peer, channel, data, bytes, /*isRecv=*/true, out);
  }

  // The goodbye now: a peer waiting for a control frame from this rank fails at once ("rank R has left").
  void doLeave() override { sendGoodbyes(); }

  void doAbort() override {
    stopControl();
    for (auto& peer : peers_) {
      if (peer.sends) peer.sends->abortAll();
      if (peer.recvs) peer.recvs->abortAll();
      if (peer.controlSends) peer.controlSends->abortAll();
    }
    events_.raise();
  }

  // Every completion is a waiter thread's or the control thread's: a collective blocks until one.
  uint64_t doEventCount() const override { return events_.count(); }
  bool doWaitForEvent(uint64_t seen, std::chrono::microseconds max) override {
    events_.waitPast(seen, max);
    return true;
  }
  bool doSetEventListener(std::function<void()> listener) override {
    events_.setListener(std::move(listener));
    return true;
  }

 private:
  struct Peer {
    std::unique_ptr<Waiter> sends, recvs, controlSends;
    std::thread controlThread;
    std::mutex mutex;                            // guards controlWork
    c10::intrusive_ptr<c10d::Work> controlWork;  // the receive the control thread waits on
    ~Peer() {
      if (controlThread.joinable()) controlThread.join();
    }
  };

  template <typename F>
  Status call(const char* what, int peer, F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return glooFailure(what, peer, describe(e));
    }
    return Status::ok();
  }

  Status post(int peer, Channel channel, void* data, size_t bytes, bool isRecv,
              std::unique_ptr<TransportOp>* out) {
    if (peer == rank()) {
      return Status(StatusCode::kInvalidArgument, "c10d transport: no data path to the own rank");
    }
    auto state = std::make_shared<OpState>();
    if (bytes == 0) {  // both sides know the size; nothing travels
      state->state = kDone;
      out->reset(new C10dOp(state, {}, peer, isRecv));
      return Status::ok();
    }
    int tag = channel == Channel::kPayload ? tagPayload_ : tagTrailer_;
    std::vector<at::Tensor> tensors{at::from_blob(data, {int64_t(bytes)}, at::kByte)};
    c10::intrusive_ptr<c10d::Work> work;
    RINGGUARD_RETURN_IF_ERROR(call(isRecv ? "receive from" : "send to", peer, [&] {
      work = isRecv ? backend_->recv(tensors, peer, tag) : backend_->send(tensors, peer, tag);
    }));
    auto& waiter = isRecv ? peers_[size_t(peer)].recvs : peers_[size_t(peer)].sends;
    // Transport::doPostFrameSend/Recv post the payload, then the trailer, to this peer and direction.
    waiter->push(Pending{work, state, {}, /*quiet=*/channel == Channel::kPayload});
    out->reset(new C10dOp(state, work, peer, isRecv));
    return Status::ok();
  }

  // Receives control frames from `peer` until stopped, reassembling messages into the inbox.
  void controlLoop(int peer) {
    std::map<int, std::vector<uint8_t>> partial;  // by tag
    for (;;) {
      at::Tensor frame = at::empty({int64_t(kFrameBytes)}, at::kByte);
      std::vector<at::Tensor> tensors{frame};
      c10::intrusive_ptr<c10d::Work> work;
      {
        std::lock_guard<std::mutex> lock(peers_[size_t(peer)].mutex);
        if (controlStopped_) return;
        try {
          work = backend_->recv(tensors, peer, tagControl_);
        } catch (const std::exception& e) {
          failControl(peer, describe(e));
          return;
        }
        peers_[size_t(peer)].controlWork = work;
      }
      bool ok = false;
      try {
        ok = work->wait(kNoExpiry);
      } catch (const std::exception& e) {
        keepForever({Pending{work, std::make_shared<OpState>(), frame}});
        failControl(peer, describe(e));
        return;
      }
      if (!ok) {  // aborted: the receive stays posted in Gloo, with our frame
        keepForever({Pending{work, std::make_shared<OpState>(), frame}});
        return;
      }
      FrameHeader h;
      std::memcpy(&h, frame.data_ptr(), sizeof(h));
      if (h.tag == kGoodbyeTag) {
        std::lock_guard<std::mutex> lock(peers_[size_t(peer)].mutex);
        peers_[size_t(peer)].controlWork.reset();
        markControlDone(peer);
        return;
      }
      if (h.length > kFrameData || uint64_t(h.offset) + h.length > h.total) {
        failControl(peer, "malformed control frame");
        return;
      }
      auto& msg = partial[int(h.tag)];
      if (h.offset == 0) msg.assign(h.total, 0);
      if (msg.size() != h.total) {
        failControl(peer, "control frame out of order");
        return;
      }
      std::memcpy(msg.data() + h.offset, frame.data_ptr<uint8_t>() + sizeof(h), h.length);
      if (h.offset + h.length == h.total) {
        {
          std::lock_guard<std::mutex> lock(inboxMutex_);
          inbox_[{peer, int(h.tag)}].push_back(std::move(msg));
        }
        partial.erase(int(h.tag));
        events_.raise();
      }
    }
  }

  void markControlDone(int peer) {
    {
      std::lock_guard<std::mutex> lock(inboxMutex_);
      controlDone_[size_t(peer)] = true;
    }
    controlDoneCv_.notify_all();
    events_.raise();  // a failed control channel is an error the waiting collective reports
  }

  // The goodbye frame to every peer, once (leave() may have sent it before the destructor); false when a
  // send failed (the connection is gone: nobody to wait for).
  bool sendGoodbyes() {
    std::lock_guard<std::mutex> lock(goodbyeMutex_);
    if (goodbyeSent_) return goodbyeOk_;
    goodbyeSent_ = true;
    for (int p = 0; p < size(); ++p) {
      if (p == rank()) continue;
      at::Tensor frame = at::zeros({int64_t(kFrameBytes)}, at::kByte);
      FrameHeader h{kGoodbyeTag, 0, 0, 0};
      std::memcpy(frame.data_ptr(), &h, sizeof(h));
      std::vector<at::Tensor> tensors{frame};
      try {
        auto work = backend_->send(tensors, p, tagControl_);
        peers_[size_t(p)].controlSends->push(Pending{work, std::make_shared<OpState>(), frame});
      } catch (const std::exception&) {
        goodbyeOk_ = false;
      }
    }
    return goodbyeOk_;
  }

  // The end: a goodbye frame to every peer, whose control thread then ends. A clean end (`waitForPeers`)
  // then waits (bounded) until every peer's goodbye arrived and our sends completed, so no Gloo work is left
  // pending and the Gloo context can go. A broken transport says goodbye too, or its healthy peers would
  // wait kGoodbyeWait for it at their own end (after a failed send/recv between two of three ranks, the
  // third one's shutdown took 10 s), and waits for nothing: its waiters are aborted, but Gloo still sends
  // an aborted send (the frame is kept for the process's life), and its own control receives stay posted
  // in Gloo (keepForever), where the peers' goodbyes land. A connection that is gone ends the waiting too.
  void sayGoodbye(bool waitForPeers) {
    if (!sendGoodbyes() || !waitForPeers) return;
    const auto deadline = std::chrono::steady_clock::now() + kGoodbyeWait;
    {
      std::unique_lock<std::mutex> lock(inboxMutex_);
      controlDoneCv_.wait_until(lock, deadline, [this] {
        for (int p = 0; p < size(); ++p) {
          if (p != rank() && !controlDone_[size_t(p)]) return false;
        }
        return true;
      });
    }
    for (auto& peer : peers_) {
      if (peer.controlSends) peer.controlSends->drain(deadline);
    }
  }

  void failControl(int peer, const std::string& why) {
    if (controlStopped_) {  // our own shutdown ended the receive: not a failure
      markControlDone(peer);
      return;
    }
    logText(LogLevel::kWarn, Subsys::kTransport,
            "rank " + std::to_string(rank()) + ": control channel from rank " + std::to_string(peer) +
                " failed: " + why);
    {
      std::lock_guard<std::mutex> lock(inboxMutex_);
      controlError_[size_t(peer)] = why;
    }
    markControlDone(peer);
  }

  // Ends the control threads' receives (the works stay posted in Gloo: see keepForever).
  void stopControl() {
    for (auto& peer : peers_) {
      std::lock_guard<std::mutex> lock(peer.mutex);
      controlStopped_ = true;
      if (peer.controlWork) peer.controlWork->abort();
    }
  }

  C10dControlChannel control_;
  Events events_;  // before peers_: their threads raise it until they are joined
  c10::intrusive_ptr<c10d::Backend> backend_;
  const int tagPayload_, tagTrailer_, tagControl_;
  std::atomic<bool> controlStopped_{false};
  std::mutex goodbyeMutex_;
  bool goodbyeSent_ = false, goodbyeOk_ = true;  // guarded by goodbyeMutex_
  std::mutex inboxMutex_;
  std::map<std::pair<int, int>, std::deque<std::vector<uint8_t>>> inbox_;  // (peer, tag) -> messages
  std::vector<std::string> controlError_ = std::vector<std::string>(size_t(size()));
  std::vector<bool> controlDone_ = std::vector<bool>(size_t(size()), false);  // guarded by inboxMutex_
  std::condition_variable controlDoneCv_;
  std::vector<Peer> peers_;
};

Status C10dTransport::sendControlFrame(int peer, ControlTag tag, const void* data, size_t bytes) {
  if (bytes > UINT32_MAX) return Status(StatusCode::kInvalidArgument, "control message too large");
  if (peer == rank()) {
    std::lock_guard<std::mutex> lock(inboxMutex_);
    const auto* p = static_cast<const uint8_t*>(data);
    inbox_[{peer, int(tag)}].emplace_back(p, p + bytes);
    return Status::ok();
  }
  const auto* src = static_cast<const uint8_t*>(data);
  size_t offset = 0;
  do {
    size_t length = std::min(kFrameData, bytes - offset);
    at::Tensor frame = at::zeros({int64_t(kFrameBytes)}, at::kByte);
    FrameHeader h{uint32_t(tag), uint32_t(bytes), uint32_t(offset), uint32_t(length)};
    std::memcpy(frame.data_ptr(), &h, sizeof(h));
    if (length) std::memcpy(frame.data_ptr<uint8_t>() + sizeof(h), src + offset, length);
    std::vector<at::Tensor> tensors{frame};
    c10::intrusive_ptr<c10d::Work> work;
    RINGGUARD_RETURN_IF_ERROR(
        call("control send to", peer, [&] { work = backend_->send(tensors, peer, tagControl_); }));
    peers_[size_t(peer)].controlSends->push(Pending{work, std::make_shared<OpState>(), frame});
    offset += length;
  } while (offset < bytes);
  return Status::ok();
}

Status C10dTransport::probeControlFrame(int peer, ControlTag tag, std::vector<uint8_t>* message, int* from,
                                        bool* got) {
  *got = false;
  std::lock_guard<std::mutex> lock(inboxMutex_);
  for (int p = (peer < 0 ? 0 : peer); p < (peer < 0 ? size() : peer + 1); ++p) {
    auto it = inbox_.find({p, int(tag)});
    if (it != inbox_.end() && !it->second.empty()) {
      *message = std::move(it->second.front());
      it->second.pop_front();
      *from = p;
      *got = true;
      return Status::ok();
    }
  }
  // A failed control channel means the peer (or the connection to it) is gone: say so, rather than
  // let the caller wait for its timeout.
  for (int p = (peer < 0 ? 0 : peer); p < (peer < 0 ? size() : peer + 1); ++p) {
    if (!controlError_[size_t(p)].empty())
      return glooFailure("control channel from", p, controlError_[size_t(p)]);
  }
  // A peer whose goodbye arrived has ended its transport (its process group was destroyed): it sent every
  // control frame before the goodbye, on one tag and so in order, so a frame that is not here now never
  // will be. Say so at once rather than let the caller wait for its timeout and blame the peer's progress.
  // Not while an error frame of that peer waits in the inbox: the caller's own probe of it gives the cause
  // (a rank that failed, announced it and then destroyed its group). Not after our own stopControl, which
  // marks the channels done too; an any-source wait fails only when every peer has left.
  if (!controlStopped_) {
    int left = -1, gone = 0, peers = 0;
    for (int p = (peer < 0 ? 0 : peer); p < (peer < 0 ? size() : peer + 1); ++p) {
      if (p == rank()) continue;
      ++peers;
      const auto error = inbox_.find({p, int(ControlTag::kError)});
      if (controlDone_[size_t(p)] && (error == inbox_.end() || error->second.empty())) {
        ++gone;
        left = p;
      }
    }
    if (peers > 0 && gone == peers) {
      return Status(
          StatusCode::kTransportError,
          "rank " + std::to_string(left) +
              " has left: its communicator over this group ended (the group was destroyed there, or "
              "its process is exiting) before it sent the frame this rank waits for");
    }
  }
  return Status::ok();
}

Status C10dControlChannel::doSend(int peer, ControlTag tag, const void* frame, size_t bytes) {
  return transport_->sendControlFrame(peer, tag, frame, bytes);
}

Status C10dControlChannel::doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from,
                                   bool* got) {
  return transport_->probeControlFrame(peer, tag, frame, from, got);
}

}  // namespace

Status createC10dTransport(c10::intrusive_ptr<c10d::Backend> backend, int tagBase,
                           std::unique_ptr<Transport>* out) {
  if (!backend) return Status(StatusCode::kInvalidArgument, "createC10dTransport: no backend");
  if (tagBase < 0) return Status(StatusCode::kInvalidArgument, "createC10dTransport: negative tag base");
  out->reset(new C10dTransport(std::move(backend), tagBase));
  return Status::ok();
}

}  // namespace ringguard
