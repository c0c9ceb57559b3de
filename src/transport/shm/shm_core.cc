#include "transport/shm/shm_core.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/copy_bytes.h"

namespace ringguard {

namespace {

// Every message in a ring starts with this record; the receiver checks it against the receive it posted.
struct MessageHeader {
  uint32_t magic;
  uint32_t channel;
  uint64_t bytes;
};
constexpr uint32_t kMessageMagic = 0x4d534752;  // "RGSM"

// Copies n bytes into / out of a ring of `cap` bytes at stream position `pos` (wrapping at the end).
// Nothing for n == 0 (an empty message's buffer may be null, which memcpy may not take even for 0 bytes).
void copyIn(uint8_t* ring, size_t cap, uint64_t pos, const uint8_t* src, size_t n) {
  if (n == 0) return;
  const size_t off = size_t(pos % cap), first = std::min(n, cap - off);
  copyBytes(ring + off, src, first);
  copyBytes(ring, src + first, n - first);
}
void copyOut(const uint8_t* ring, size_t cap, uint64_t pos, uint8_t* dst, size_t n) {
  if (n == 0) return;
  const size_t off = size_t(pos % cap), first = std::min(n, cap - off);
  copyBytes(dst, ring + off, first);
  copyBytes(dst + first, ring, n - first);
}

const char* channelName(uint32_t channel) { return channel == 0 ? "payload" : "trailer"; }

// A control frame in a control ring: this record, then the sealed frame.
struct ControlRecord {
  uint32_t magic;
  uint16_t tag;
  uint16_t reserved;
  uint64_t bytes;
};
constexpr uint32_t kControlMagic = 0x43534752;  // "RGSC"
// No control frame is near this (fingerprints, verdict lists, errors, small collectives' payloads): a
// record claiming more is a peer's bug or malice, refused before anything is allocated for it.
constexpr uint64_t kMaxControlFrame = uint64_t(64) << 20;

// Whether a ring's indices are possible: the reader never ahead of the writer, never more than the ring
// between them.
bool possible(uint64_t head, uint64_t tail, size_t cap) { return tail <= head && head - tail <= cap; }

std::string corrupt(const char* which, const char* dir, int peer, uint64_t theirs, uint64_t ours) {
  return std::string("shared-memory ") + which + " ring " + dir + " rank " + std::to_string(peer) +
         " is corrupt: the peer's index " + std::to_string(theirs) + " against this rank's " +
         std::to_string(ours);
}

}  // namespace

ShmCore::ShmCore(int rank, int size, std::unique_ptr<shm::Segment> own,
                 std::vector<std::unique_ptr<shm::Segment>> peers)
    : rank_(rank),
      size_(size),
      own_(std::move(own)),
      peers_(std::move(peers)),
      links_(size_t(size)),
      control_(size_t(size)) {}

void ShmCore::breakAll() {
  broken_.store(true);
  own_->raise();
}

// One posted send or receive: queued on its peer's link until every byte moved.
struct ShmCore::Op final : public TransportOp {
  std::shared_ptr<ShmCore> core;
  int peer = 0;
  bool isRecv = false;
  uint32_t channel = 0;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  size_t moved = 0;      // payload bytes moved so far
  bool started = false;  // the message header has moved
  bool queued = true;
  bool done = false;
  Status error;

  ~Op() override { cancel(); }
  Status test(bool* out) override { return core->test(this, out); }
  void cancel() override { core->cancel(this); }
};

std::unique_ptr<TransportOp> ShmCore::post(const std::shared_ptr<ShmCore>& self, int peer, uint32_t channel,
                                           uint8_t* data, size_t bytes, bool isRecv) {
  auto op = std::make_unique<Op>();
  op->core = self;
  op->peer = peer;
  op->isRecv = isRecv;
  op->channel = channel;
  op->data = data;
  op->bytes = bytes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Link& l = links_[size_t(peer)];
    (isRecv ? l.recvs : l.sends).push_back(op.get());
  }
  progress();
  return op;
}

Status ShmCore::test(Op* op, bool* done) {
  progress();
  std::lock_guard<std::mutex> lock(mutex_);
  *done = op->done;
  return op->error;
}

// Withdraws an op that has not finished. One whose message was partly moved leaves its link's stream in
// the middle of a message: the link fails every later op (only a failed collective cancels, and it breaks
// the communicator).
void ShmCore::cancel(Op* op) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!op->queued) return;
  Link& l = links_[size_t(op->peer)];
  auto& q = op->isRecv ? l.recvs : l.sends;
  q.erase(std::find(q.begin(), q.end(), op));
  op->queued = false;
  op->done = true;
  if (op->started && l.failure.isOk()) {
    l.failure = Status(StatusCode::kTransportError,
                       std::string("shared-memory link ") + (op->isRecv ? "from" : "to") + " rank " +
                           std::to_string(op->peer) + " was left in the middle of a message (a cancelled " +
                           (op->isRecv ? "receive" : "send") + ")");
  }
}

void ShmCore::finish(Link& l, Op* op, Status error) {
  auto& q = op->isRecv ? l.recvs : l.sends;
  q.erase(std::find(q.begin(), q.end(), op));
  op->queued = false;
  op->done = true;
  op->error = std::move(error);
}

void ShmCore::failLink(Link& l, Status error) {
  if (l.failure.isOk()) l.failure = std::move(error);
  while (!l.sends.empty()) finish(l, l.sends.front(), l.failure);
  while (!l.recvs.empty()) finish(l, l.recvs.front(), l.failure);
}

void ShmCore::progress() {
  std::lock_guard<std::mutex> lock(mutex_);
  progressLocked();
}

void ShmCore::progressLocked() {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Link& l = links_[size_t(p)];
    if (l.failure.isOk() && broken_.load()) {
      l.failure = Status(StatusCode::kTransportError, "the shared-memory transport is broken");
    }
    if (!l.failure.isOk()) {
      failLink(l, l.failure);
    } else {
      if (!l.sends.empty()) pushSends(p, l);
      if (!l.recvs.empty()) pullRecvs(p, l);
    }
    ControlLink& c = control_[size_t(p)];
    if (c.failure.isOk()) {
      if (!c.outbox.empty()) pushControl(p, c);
      pullControl(p, c);
    }
  }
}

// Copies the queued sends to `peer` into our ring in its segment, as far as the ring has room.
void ShmCore::pushSends(int peer, Link& l) {
  shm::Segment& seg = *peers_[size_t(peer)];
  shm::RingIndices& ring = seg.ring(rank_);
  uint8_t* data = seg.data(rank_);
  const size_t cap = seg.ringBytes();
  const uint64_t tail = ring.tail.value.load(std::memory_order_acquire);
  if (!possible(l.head, tail, cap)) {
    failLink(l, Status(StatusCode::kTransportError, corrupt("data", "to", peer, tail, l.head)));
    return;
  }
  const uint64_t start = l.head;
  while (!l.sends.empty()) {
    Op* op = l.sends.front();
    size_t room = cap - size_t(l.head - tail);
    if (!op->started) {
      if (room < sizeof(MessageHeader)) break;
      const MessageHeader h{kMessageMagic, op->channel, op->bytes};
      copyIn(data, cap, l.head, reinterpret_cast<const uint8_t*>(&h), sizeof(h));
      l.head += sizeof(h);
      room -= sizeof(h);
      op->started = true;
    }
    const size_t n = std::min(room, op->bytes - op->moved);
    copyIn(data, cap, l.head, op->data + op->moved, n);
    l.head += n;
    op->moved += n;
    if (op->moved < op->bytes) break;
    finish(l, op, Status::ok());
  }
  if (l.head != start) {
    ring.head.value.store(l.head, std::memory_order_release);
    seg.raise();
  }
}

// Copies what `peer` wrote into our segment out into the receives posted for it, in order.
void ShmCore::pullRecvs(int peer, Link& l) {
  shm::RingIndices& ring = own_->ring(peer);
  const uint8_t* data = own_->data(peer);
  const size_t cap = own_->ringBytes();
  const uint64_t head = ring.head.value.load(std::memory_order_acquire);
  if (!possible(head, l.tail, cap)) {
    failLink(l, Status(StatusCode::kTransportError, corrupt("data", "from", peer, head, l.tail)));
    return;
  }
  const uint64_t start = l.tail;
  while (!l.recvs.empty()) {
    Op* op = l.recvs.front();
    size_t avail = size_t(head - l.tail);
    if (!op->started) {
      if (avail < sizeof(MessageHeader)) break;
      MessageHeader h;
      copyOut(data, cap, l.tail, reinterpret_cast<uint8_t*>(&h), sizeof(h));
      if (h.magic != kMessageMagic || h.channel != op->channel || h.bytes != op->bytes) {
        const bool framed = h.magic == kMessageMagic && h.channel <= 1;
        failLink(l,
                 Status(StatusCode::kTransportError,
                        "shared-memory message from rank " + std::to_string(peer) + ": expected a " +
                            channelName(op->channel) + " of " + std::to_string(op->bytes) + " bytes, got " +
                            (framed ? std::string("a ") + channelName(h.channel) + " of " +
                                          std::to_string(h.bytes) + " bytes"
                                    : std::string("bytes that are no message header"))));
        break;
      }
      l.tail += sizeof(h);
      avail -= sizeof(h);
      op->started = true;
    }
    const size_t n = std::min(avail, op->bytes - op->moved);
    copyOut(data, cap, l.tail, op->data + op->moved, n);
    l.tail += n;
    op->moved += n;
    if (op->moved < op->bytes) break;
    finish(l, op, Status::ok());
  }
  if (l.tail != start) {
    ring.tail.value.store(l.tail, std::memory_order_release);
    peers_[size_t(peer)]->raise();  // the writer may wait for room
  }
}

// ---- control ------------------------------------------------------------------------------------------

Status ShmCore::sendControl(int peer, ControlTag tag, const void* frame, size_t bytes,
                            std::chrono::milliseconds timeout, const std::function<Status()>& alive) {
  std::unique_lock<std::mutex> lock(mutex_);
  ControlLink& c = control_[size_t(peer)];
  if (peer == rank_) {  // to itself: straight into the inbox
    const auto* p = static_cast<const uint8_t*>(frame);
    c.inbox[size_t(tag)].emplace_back(p, p + bytes);
    own_->raise();
    return Status::ok();
  }
  if (!c.failure.isOk()) return c.failure;
  if (!c.outbox.empty() || !pushRecord(peer, c, tag, static_cast<const uint8_t*>(frame), bytes)) {
    const ControlRecord h{kControlMagic, uint16_t(tag), 0, bytes};
    // No room for the whole record now: it waits in the outbox, and goes into the ring as room appears.
    std::vector<uint8_t> record;
    record.reserve(sizeof(h) + bytes);
    record.insert(record.end(), reinterpret_cast<const uint8_t*>(&h),
                  reinterpret_cast<const uint8_t*>(&h + 1));
    record.insert(record.end(), static_cast<const uint8_t*>(frame),
                  static_cast<const uint8_t*>(frame) + bytes);
    c.outbox.push_back(std::move(record));
    pushControl(peer, c);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!c.outbox.empty() && c.failure.isOk()) {
    // The peer's ring is full: it has not read for a while. Keep taking what others send this rank (a
    // peer blocked the same way on this rank's ring moves on), and stop when the peer is gone or late.
    const uint32_t seen = own_->bell();
    progressLocked();
    if (c.outbox.empty()) break;
    lock.unlock();
    Status st = alive ? alive() : Status::ok();
    if (st.isOk() && std::chrono::steady_clock::now() > deadline) {
      st = Status(StatusCode::kTimeout, "a control frame to rank " + std::to_string(peer) +
                                            " waited past the timeout for room in its shared-memory ring");
    }
    if (!st.isOk()) {
      lock.lock();
      if (c.failure.isOk()) c.failure = st;
      break;
    }
    own_->wait(seen, std::chrono::milliseconds(1));
    lock.lock();
  }
  return c.failure;
}

Status ShmCore::takeControl(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from, bool* got) {
  std::lock_guard<std::mutex> lock(mutex_);
  progressLocked();
  *got = false;
  for (int p = peer < 0 ? 0 : peer; p < (peer < 0 ? size_ : peer + 1); ++p) {
    ControlLink& c = control_[size_t(p)];
    auto& q = c.inbox[size_t(tag)];
    if (!q.empty()) {
      *frame = std::move(q.front());
      q.pop_front();
      *from = p;
      *got = true;
      return Status::ok();
    }
    if (!c.failure.isOk()) return c.failure;
  }
  return Status::ok();
}

bool ShmCore::pending(int peer, ControlTag tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int p = peer < 0 ? 0 : peer; p < (peer < 0 ? size_ : peer + 1); ++p) {
    if (!control_[size_t(p)].inbox[size_t(tag)].empty()) return true;
  }
  return false;
}

bool ShmCore::pushRecord(int peer, ControlLink& c, ControlTag tag, const uint8_t* frame, size_t bytes) {
  const ControlRecord h{kControlMagic, uint16_t(tag), 0, bytes};
  shm::Segment& seg = *peers_[size_t(peer)];
  shm::RingIndices& ring = seg.controlRing(rank_);
  const size_t cap = seg.controlRingBytes();
  const uint64_t tail = ring.tail.value.load(std::memory_order_acquire);
  if (!possible(c.head, tail, cap)) {
    c.failure = Status(StatusCode::kTransportError, corrupt("control", "to", peer, tail, c.head));
    return true;  // nothing to keep: the link failed
  }
  if (cap - size_t(c.head - tail) < sizeof(h) + bytes) return false;
  uint8_t* data = seg.controlData(rank_);
  copyIn(data, cap, c.head, reinterpret_cast<const uint8_t*>(&h), sizeof(h));
  copyIn(data, cap, c.head + sizeof(h), frame, bytes);
  c.head += sizeof(h) + bytes;
  ring.head.value.store(c.head, std::memory_order_release);
  seg.raise();
  return true;
}

void ShmCore::pushControl(int peer, ControlLink& c) {
  shm::Segment& seg = *peers_[size_t(peer)];
  shm::RingIndices& ring = seg.controlRing(rank_);
  uint8_t* data = seg.controlData(rank_);
  const size_t cap = seg.controlRingBytes();
  const uint64_t tail = ring.tail.value.load(std::memory_order_acquire);
  if (!possible(c.head, tail, cap)) {
    c.failure = Status(StatusCode::kTransportError, corrupt("control", "to", peer, tail, c.head));
    return;
  }
  const uint64_t start = c.head;
  while (!c.outbox.empty()) {
    const std::vector<uint8_t>& r = c.outbox.front();
    const size_t n = std::min(cap - size_t(c.head - tail), r.size() - c.outboxSent);
    if (n == 0) break;
    copyIn(data, cap, c.head, r.data() + c.outboxSent, n);
    c.head += n;
    c.outboxSent += n;
    if (c.outboxSent < r.size()) break;
    c.outbox.pop_front();
    c.outboxSent = 0;
  }
  if (c.head != start) {
    ring.head.value.store(c.head, std::memory_order_release);
    seg.raise();
  }
}

void ShmCore::pullControl(int peer, ControlLink& c) {
  shm::RingIndices& ring = own_->controlRing(peer);
  const uint8_t* data = own_->controlData(peer);
  const size_t cap = own_->controlRingBytes();
  const uint64_t head = ring.head.value.load(std::memory_order_acquire);
  if (!possible(head, c.tail, cap)) {
    c.failure = Status(StatusCode::kTransportError, corrupt("control", "from", peer, head, c.tail));
    return;
  }
  const uint64_t start = c.tail;
  while (head != c.tail) {
    if (c.partial.empty()) {  // a record starts: its header first
      if (head - c.tail < sizeof(ControlRecord)) break;
      ControlRecord h;
      copyOut(data, cap, c.tail, reinterpret_cast<uint8_t*>(&h), sizeof(h));
      if (h.magic != kControlMagic || h.tag >= kNumControlTags || h.bytes > kMaxControlFrame) {
        c.failure = Status(StatusCode::kTransportError,
                           "shared-memory control ring from rank " + std::to_string(peer) +
                               " holds bytes that are no control record (magic " + std::to_string(h.magic) +
                               ", tag " + std::to_string(h.tag) + ", " + std::to_string(h.bytes) + " bytes)");
        break;
      }
      c.tail += sizeof(h);
      if (head - c.tail >= h.bytes) {  // all there: straight into the inbox, one copy
        const size_t off = size_t(c.tail % cap), first = std::min(size_t(h.bytes), cap - off);
        std::vector<uint8_t>& frame = c.inbox[h.tag].emplace_back(data + off, data + off + first);
        frame.insert(frame.end(), data, data + (size_t(h.bytes) - first));
        c.tail += h.bytes;
        continue;
      }
      c.partial.resize(sizeof(h) + size_t(h.bytes));
      std::memcpy(c.partial.data(), &h, sizeof(h));
      c.partialGot = sizeof(h);
    }
    const size_t n = std::min(size_t(head - c.tail), c.partial.size() - c.partialGot);
    copyOut(data, cap, c.tail, c.partial.data() + c.partialGot, n);
    c.tail += n;
    c.partialGot += n;
    if (c.partialGot < c.partial.size()) break;
    ControlRecord h;
    std::memcpy(&h, c.partial.data(), sizeof(h));
    c.inbox[h.tag].emplace_back(c.partial.begin() + sizeof(h), c.partial.end());
    c.partial.clear();
    c.partialGot = 0;
  }
  if (c.tail != start) {
    ring.tail.value.store(c.tail, std::memory_order_release);
    peers_[size_t(peer)]->raise();
  }
}

}  // namespace ringguard
