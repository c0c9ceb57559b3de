#pragma once
// Verified point-to-point messages issued one direction at a time (c10d's isend / irecv, MPI_Isend /
// MPI_Irecv), each running the engine's sendRecv (docs/design/protocol.md, "Point-to-point lanes").
//
// A Communicator runs everything on one progress thread in issue order, which suits collectives (every
// rank issues them in the same order) but not point-to-point traffic: in the ring pattern `irecv(left);
// isend(right)` every rank would wait in its receive before posting its send. So each (peer, direction) is
// a lane with a thread of its own that runs that lane's messages in issue order: sends and receives never
// wait for each other, and messages of one (peer, direction) match in order, as in NCCL, Gloo and MPI.
//
// The lanes share one transport of their own (its channels are not the collectives'). Per peer two lane
// threads use it at once: the send lane posts payloads to the peer and reads its verdicts, the receive
// lane posts receives from it and sends verdicts; every transport of ours is safe for that (host
// transports; the control channel locks).
//
// Before the first message with a peer, in either direction, the two ranks compare their settings
// (peerHandshake, once per pair): ranks whose slice sizes differ would otherwise post receives of the wrong
// size, which Gloo answers by aborting the process.
//
// A receive from any source (c10d's recvAnysource) has no lane of its own to match in: it waits on a thread
// of its own for the first fingerprint frame from a peer whose receive lane is free for it, and then runs as
// that lane's next message (its message number, its executor). The matching rule, deterministic for a given
// arrival of messages: receives match in issue order, whatever their source (a receive from a named peer
// issued before an any-source receive takes that peer's next message first; one issued after it waits until
// it matched); each poll looks at the peers in ascending rank order and takes the lowest rank whose message
// is there. So when several peers' messages are waiting, the lowest rank's is taken, and messages of one
// peer still match in order. The pair's settings check with each peer polled is made without waiting on a
// peer that may never send (postPeerHandshake, then the peer's record when it is there). A peer whose channel
// failed (it left: its group was destroyed there) is passed over; the receive fails only when every peer has.
//
// The first failed message fails every lane (what is queued and every later message complete with it)
// and is announced to the peers, as a failed collective is: a lane whose peer stopped never leaves the
// other side waiting past its own timeout.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "algorithms/agreement.h"
#include "core/fault_injector.h"
#include "executor/executor.h"
#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "ringguard/core/status.h"
#include "ringguard/core/types.h"
#include "transport/transport.h"

namespace ringguard {

class PeerLanes {
 public:
  // Runs on the lane's thread once the message completed, with its Status.
  using Done = std::function<void(const Status&)>;

  // Takes the transport (host memory; sizes and rank from it). `options` must be valid for its size.
  PeerLanes(std::unique_ptr<Transport> transport, const Options& options);
  // Runs what is queued (each message ends, at worst, at its timeout), then joins the lanes.
  ~PeerLanes();
  PeerLanes(const PeerLanes&) = delete;
  PeerLanes& operator=(const PeerLanes&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // `count` elements of `dtype` at `data` (host memory, valid until `done` ran) to / from `peer`, another
  // rank. `tag` (non-negative) must be the one the other side gives: messages match in order per (peer,
  // direction), and a count, dtype or tag that differs is an error on both sides naming both. Bad
  // arguments run `done` at once, on the caller's thread, with kInvalidArgument.
  void send(int peer, int tag, const void* data, size_t count, DataType dtype, Done done);
  void recv(int peer, int tag, void* data, size_t count, DataType dtype, Done done);
  // A receive from whichever peer sends first, by the rule above; `done` gets the source (-1 on failure).
  // Its count, dtype and tag are checked against the sender's fingerprint as recv's are.
  using DoneFrom = std::function<void(const Status&, int source)>;
  void recvAny(int tag, void* data, size_t count, DataType dtype, DoneFrom done);

  // Fails what is queued and the messages in flight at their next wait (kAborted), and tells the peers.
  void abort(const std::string& why);
  // The owner saw a failure elsewhere over the same ranks: a peer may never say goodbye, so the destructor
  // ends the transport as after a failure of the lanes' own (no goodbye wait). Nothing is announced.
  void peersMayBeGone() { peersMayBeGone_.store(true); }

  // Fault injection of the messages that start after this call.
  Status setFault(const FaultOptions& fault);
  Counters counters() const;
  Status firstError() const;

 private:
  struct Message {
    int tag;
    const void* send;
    void* recv;
    size_t count;
    DataType dtype;
    Done done;
    uint32_t issueLane = 0;  // the issuing thread's (ringguard/core/issue_lane.h), read in send() / recv()
    uint64_t anyBefore = 0;  // any-source receives issued before this message: it starts once they matched
    DoneFrom doneFrom;       // an any-source receive's, instead of done
  };
  struct Lane {
    std::deque<Message> queue;  // guarded by PeerLanes::mutex_
    bool running = false;       // guarded by PeerLanes::mutex_: the lane's thread runs a message
    // The next message number: the lane's thread's, or the any-source thread's while it runs a receive of
    // this lane (the lane's thread cannot start one then: Message::anyBefore).
    uint64_t messages = 0;
    // The lane's slots and trailers, for its whole life: a receive the transport could not withdraw after a
    // failure (Gloo cannot) may still write into them, so they must outlive the message (~PeerLanes).
    std::unique_ptr<Executor> exec;
    std::thread thread;
  };

  void enqueue(int peer, bool isSend, Message m);
  Lane* laneFor(int peer, bool isSend);  // made at first use; under mutex_
  void loop(int peer, bool isSend, Lane* lane);
  Status run(int peer, bool isSend, Lane* lane, const Message& m, Counters* delta);
  void anyLoop();
  // Any-source receive number `ordinal`: finds its source (*source) and runs it as that peer's message.
  Status runAny(const Message& m, uint64_t ordinal, int* source, Counters* delta);
  // The context one message runs in; `injector` keeps the fault injector it names alive.
  CollectiveContext context(const Message& m, Counters* delta, const char* name,
                            std::shared_ptr<const FaultInjector>* injector);
  // The settings check with `peer`: made by the first lane that reaches the peer, waited for by the other.
  Status checkPeer(int peer);
  // The same without waiting for the peer: *done once its record was there (the result then returned).
  Status tryCheckPeer(int peer, bool* done);
  void fail(const Status& error);

  std::unique_ptr<Transport> transport_;
  const Options options_;
  const int rank_;
  const int size_;

  struct PeerCheck {
    bool posted = false;  // this rank's record was sent
    bool busy = false;    // a thread is sending or taking records
    bool done = false;
    Status result;
  };

  mutable std::mutex mutex_;  // guards lanes_, peerChecks_, injector_, counters_, firstError_, stopping_
  std::condition_variable cv_;
  std::map<std::pair<int, bool>, std::unique_ptr<Lane>> lanes_;  // (peer, isSend), made at first use
  std::map<int, PeerCheck> peerChecks_;                          // by peer, made at first use
  std::deque<Message> anyQueue_;                                 // any-source receives, in issue order
  std::thread anyThread_;                                        // runs them, made at first use
  uint64_t anyIssued_ = 0;                                       // any-source receives issued
  uint64_t anyDone_ = 0;                                         // of those, matched or failed (in order)
  std::shared_ptr<const FaultInjector> injector_;
  Counters counters_;
  Status firstError_;
  bool stopping_ = false;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> peersMayBeGone_{false};
};

}  // namespace ringguard
