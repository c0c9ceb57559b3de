#pragma once
// What a shared-memory transport and its control channel share: the segments, and per peer the data link
// (posted sends and receives, moved through the data rings in post order) and the control link (sealed
// frames through the control rings). Every move happens on the thread that calls in (a post, a test, a
// probe, progress); nothing runs in the background. Ops hold the core, so one that outlives its transport
// still finds it (and fails: breakAll).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "ringguard/core/status.h"
#include "transport/control/control_channel.h"
#include "transport/shm/shm_segment.h"
#include "transport/transport.h"

namespace ringguard {

class ShmCore {
 public:
  struct Op;
  ShmCore(int rank, int size, std::unique_ptr<shm::Segment> own,
          std::vector<std::unique_ptr<shm::Segment>> peers);

  // Data plane (Transport's hooks).
  std::unique_ptr<TransportOp> post(const std::shared_ptr<ShmCore>& self, int peer, uint32_t channel,
                                    uint8_t* data, size_t bytes, bool isRecv);
  Status test(Op* op, bool* done);
  void cancel(Op* op);
  // Moves what can move on every link, data and control.
  void progress();

  // Control plane (ControlChannel's hooks). sendControl queues the frame and moves what fits; when the
  // ring stays full it keeps taking this rank's own inbound frames (so two ranks sending to each other
  // cannot block each other) and gives up after `timeout` or when `alive` says the peer is gone.
  Status sendControl(int peer, ControlTag tag, const void* frame, size_t bytes,
                     std::chrono::milliseconds timeout, const std::function<Status()>& alive);
  // Takes one arrived frame of `tag` from `peer` (any when < 0); a control link that failed (a peer's
  // impossible ring index or record) is an error once its frames are taken.
  Status takeControl(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from, bool* got);

  // Whether a frame of `tag` from `peer` (any when < 0) waits to be taken.
  bool pending(int peer, ControlTag tag);

  void breakAll();
  shm::Segment& own() { return *own_; }
  // Rank r's segment (this rank's own at r == rank).
  shm::Segment& segment(int r) { return r == rank_ ? *own_ : *peers_[size_t(r)]; }

 private:
  struct Link {
    std::deque<Op*> sends, recvs;
    uint64_t head = 0;  // bytes this rank wrote into its data ring in the peer's segment
    uint64_t tail = 0;  // bytes this rank read from the peer's data ring in its own segment
    Status failure;     // once set, every op of the link fails with it
  };
  struct ControlLink {
    std::deque<std::vector<uint8_t>> outbox;  // records not yet (wholly) in the peer's control ring
    size_t outboxSent = 0;                    // bytes of outbox.front() already written
    uint64_t head = 0, tail = 0;              // as Link's, over the control rings
    std::vector<uint8_t> partial;             // the inbound record being read
    size_t partialGot = 0;
    std::deque<std::vector<uint8_t>> inbox[kNumControlTags];
    Status failure;
  };
  void finish(Link& l, Op* op, Status error);
  void failLink(Link& l, Status error);
  void pushSends(int peer, Link& l);
  void pullRecvs(int peer, Link& l);
  // Writes a whole record into the peer's control ring when it has room now (false: nothing written); a
  // failed link counts as written.
  bool pushRecord(int peer, ControlLink& c, ControlTag tag, const uint8_t* frame, size_t bytes);
  void pushControl(int peer, ControlLink& c);
  void pullControl(int peer, ControlLink& c);
  void progressLocked();

  const int rank_, size_;
  std::unique_ptr<shm::Segment> own_;
  std::vector<std::unique_ptr<shm::Segment>> peers_;  // [peer]; null at this rank
  std::mutex mutex_;
  std::vector<Link> links_;
  std::vector<ControlLink> control_;
  std::atomic<bool> broken_{false};
};

}  // namespace ringguard
