#pragma once
// The transport interface every collective is written against (docs/design/protocol.md, "Transport
// interface"). Public methods are non-virtual and always move a payload together with its trailer, so no
// implementation can send an unframed slice; implementations override the protected hooks (spdlog's
// base_sink pattern).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/trailer.h"
#include "ringguard/core/status.h"
#include "transport/control/control_channel.h"

namespace ringguard {

class Windows;

// One posted message (payload or trailer) of an implementation.
class TransportOp {
 public:
  virtual ~TransportOp() = default;
  // Sets *done once the message has completed. Never blocks.
  virtual Status test(bool* done) = 0;
  // Withdraws a receive that has not matched yet, or releases a send; after it the op is inert.
  virtual void cancel() = 0;
  // For device transports whose transfers run on a CUDA stream of their own (NCCL): an event (a cudaEvent_t)
  // recorded on that stream after this op. Once test() reported done, work on another stream that touches
  // the op's buffers must wait for it (Executor::waitFor). Null when test() reporting done means the bytes
  // are in place (host transports, the staged transport).
  virtual std::shared_ptr<void> streamEvent() const { return nullptr; }
};

// A framed slice in flight: payload and trailer.
class FrameRequest {
 public:
  FrameRequest() = default;
  FrameRequest(std::unique_ptr<TransportOp> payload, std::unique_ptr<TransportOp> trailer)
      : payload_(std::move(payload)), trailer_(std::move(trailer)) {}
  bool active() const { return payload_ || trailer_; }
  // Sets *done when both parts completed (then the request becomes inactive).
  Status test(bool* done);
  void cancel();
  // After test() reported done: the stream event of its ops (TransportOp::streamEvent), or null.
  void* streamEvent() const { return event_.get(); }

 private:
  std::unique_ptr<TransportOp> payload_;
  std::unique_ptr<TransportOp> trailer_;
  std::shared_ptr<void> event_;
};

// Transport::eagerBytes of the loopback transport (in-memory queues: a frame of any size is one hand-over).
inline constexpr size_t kHostEagerBytes = size_t(16) << 10;

class Transport {
 public:
  virtual ~Transport() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Human-readable name for logs ("mpi", "nccl", "staged").
  virtual const char* name() const = 0;
  // The slice size a communicator uses when Options::sliceBytes is 0.
  virtual size_t defaultSliceBytes() const { return size_t(1) << 20; }
  // The receive slots per link a communicator uses when Options::slots is 0.
  virtual int defaultSlots() const { return 2; }
  // The largest payload a small collective or send/recv carries in its fingerprint frames instead of
  // running the pipeline (docs/design/protocol.md, "Small collectives in one round"); 0: never. Host
  // transports only.
  virtual size_t eagerBytes() const { return 0; }
  // Every rank's window when this transport's ranks can read each other's memory (shared memory), for the
  // one-sided protocol (transport/window.h); null otherwise.
  virtual Windows* windows() { return nullptr; }

  // After a fatal error messages may still be in flight (unmatched fingerprints, error broadcasts).
  // A broken transport keeps its channels out of reuse, so those can never match a later communicator.
  void markBroken() {
    broken_ = true;
    doAbort();
  }
  bool broken() const { return broken_; }
  // A collective over this transport timed out: a rank stopped making progress (it may never answer
  // again). A transport whose teardown needs every rank (MPI_Finalize) must not count on it.
  void notePeerStalled(const std::string& why) { doNotePeerStalled(why); }

  // Data plane. Buffers must stay valid (and unmodified, for sends) until the request completes.
  Status postSend(int peer, const void* payload, size_t bytes, const Trailer* trailer, FrameRequest* out);
  Status postRecv(int peer, void* payload, size_t bytes, Trailer* trailer, FrameRequest* out);

  // Starts what has been posted since the last flush. Transports that batch (NCCL groups) launch the
  // batch here; the algorithm flushes before it waits for or consumes anything it posted.
  Status flush() { return doFlush(); }
  // Advances posted operations that need the host to move them on (staged copies); called while waiting.
  Status progress() { return doProgress(); }

  // Waiting without spinning, for transports whose operations complete on threads of their own (the c10d
  // transport's waiters). eventCount() grows whenever one of this transport's operations completes or
  // fails, a control frame arrives or the transport breaks; waitForEvent(seen, max) blocks until it differs
  // from `seen` (read before the caller's last test, so no completion is missed) or `max` has passed. It
  // returns false at once on transports that need the caller's polling to move (MPI's progress engine,
  // NCCL's stream events, staged copies, the loopback fabric): their waiters spin, then sleep.
  uint64_t eventCount() const { return doEventCount(); }
  bool waitForEvent(uint64_t seen, std::chrono::microseconds max) { return doWaitForEvent(seen, max); }
  // How long a waiter polls before it blocks in waitForEvent (0: a few polls). A transport whose ranks own
  // their cores polls longer: a sleep costs a wake-up on every hop of a chain.
  virtual std::chrono::microseconds pollBeforeBlocking() const { return std::chrono::microseconds(0); }
  // For a transport built on this one whose waits sleep on events of their own (the shared-memory
  // transport over the c10d one): calls `listener` (on any thread) whenever eventCount() grows, so a
  // control frame or a failure here wakes those waits too. Null removes it. False on transports without
  // such events (waitForEvent returns false there).
  bool setEventListener(std::function<void()> listener) { return doSetEventListener(std::move(listener)); }

  // This end is going away (its owner is about to destroy it): tells the peers now, on transports that have
  // a message for it (the c10d transport's goodbye), so a peer waiting for a frame from this rank fails at
  // once instead of at its timeout. An owner that destroys several transports one after the other calls
  // it on all of them first (a peer may be waiting on any one). Nothing but the destructor may follow it;
  // idempotent.
  void leave() { doLeave(); }

  // The control channel over the same ranks (sealed frames: control_channel.h), owned by the transport
  // or by the host transport it is built on. Never null.
  virtual ControlChannel* control() = 0;

 protected:
  Transport(int rank, int size) : rank_(rank), size_(size) {}

  enum class Channel { kPayload, kTrailer };
  virtual Status doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                            std::unique_ptr<TransportOp>* out) = 0;
  virtual Status doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                            std::unique_ptr<TransportOp>* out) = 0;
  // One framed slice. By default two messages, the payload and the trailer (doPostSend, doPostRecv); a
  // transport may move a small frame as one message instead (MPI packs payload and trailer: one message
  // latency instead of two). Both ends decide from the slice's byte count, which the fingerprint agreed.
  virtual Status doPostFrameSend(int peer, const void* payload, size_t bytes, const Trailer* trailer,
                                 FrameRequest* out);
  virtual Status doPostFrameRecv(int peer, void* payload, size_t bytes, Trailer* trailer, FrameRequest* out);
  // Called once when the transport breaks: tear down what could otherwise block forever (ncclCommAbort).
  virtual void doAbort() {}
  virtual void doLeave() {}
  virtual void doNotePeerStalled(const std::string& /*why*/) {}
  virtual Status doFlush() { return Status::ok(); }
  virtual Status doProgress() { return Status::ok(); }
  virtual uint64_t doEventCount() const { return 0; }
  virtual bool doWaitForEvent(uint64_t /*seen*/, std::chrono::microseconds /*max*/) { return false; }
  virtual bool doSetEventListener(std::function<void()> /*listener*/) { return false; }

  // Transports built on another transport (staging through host memory, a host control channel) reach
  // its hooks through these.
  static Status innerPostSend(Transport* inner, int peer, Channel channel, const void* data, size_t bytes,
                              std::unique_ptr<TransportOp>* out) {
    return inner->doPostSend(peer, channel, data, bytes, out);
  }
  static Status innerPostRecv(Transport* inner, int peer, Channel channel, void* data, size_t bytes,
                              std::unique_ptr<TransportOp>* out) {
    return inner->doPostRecv(peer, channel, data, bytes, out);
  }

 private:
  Status checkPeer(int peer, const char* what) const;

  int rank_;
  int size_;
  std::atomic<bool> broken_{false};  // read by every thread that uses the transport
};

}  // namespace ringguard
