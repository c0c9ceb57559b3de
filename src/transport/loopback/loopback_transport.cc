#include "transport/loopback/loopback_transport.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "core/copy_bytes.h"

namespace ringguard {

struct LoopbackFabric::Op {
  bool isRecv = false;
  int src = 0, dst = 0, channel = 0;
  const uint8_t* sendData = nullptr;  // the sender's buffer, or `owned` once the send was released
  std::vector<uint8_t> owned;
  uint8_t* recvData = nullptr;
  size_t bytes = 0;  // sent, or the receive's capacity
  bool done = false;
  std::string error;  // set with done when the match failed
};

namespace {

const char* channelName(int channel) { return channel == 0 ? "payload" : "trailer"; }

class LoopbackOp final : public TransportOp {
 public:
  LoopbackOp(std::shared_ptr<LoopbackFabric> fabric, std::mutex* mutex,
             std::deque<std::shared_ptr<LoopbackFabric::Op>>* queue, std::shared_ptr<LoopbackFabric::Op> op)
      : fabric_(std::move(fabric)), mutex_(mutex), queue_(queue), op_(std::move(op)) {}
  ~LoopbackOp() override { cancel(); }

  Status test(bool* done) override {
    if (!op_) {
      *done = true;
      return Status::ok();
    }
    std::lock_guard<std::mutex> lock(*mutex_);
    *done = op_->done;
    if (op_->done && !op_->error.empty()) return Status(StatusCode::kTransportError, op_->error);
    return Status::ok();
  }

  // An unmatched receive is withdrawn; an unmatched send is released as MPI releases one: it may still be
  // delivered later, from a copy of its bytes, since the caller may free its buffer now.
  void cancel() override {
    if (!op_) return;
    {
      std::lock_guard<std::mutex> lock(*mutex_);
      if (!op_->done) {
        if (op_->isRecv) {
          queue_->erase(std::find(queue_->begin(), queue_->end(), op_));
          op_->done = true;
        } else {
          op_->owned.assign(op_->sendData, op_->sendData + op_->bytes);
          op_->sendData = op_->owned.data();
        }
      }
    }
    op_.reset();
  }

 private:
  std::shared_ptr<LoopbackFabric> fabric_;  // keeps the queues alive
  std::mutex* mutex_;
  std::deque<std::shared_ptr<LoopbackFabric::Op>>* queue_;  // where this op waits until matched
  std::shared_ptr<LoopbackFabric::Op> op_;
};

}  // namespace

class LoopbackControlChannel final : public ControlChannel {
 public:
  LoopbackControlChannel(std::shared_ptr<LoopbackFabric> fabric, int rank)
      : ControlChannel(rank, fabric->size()), fabric_(std::move(fabric)) {}

 protected:
  Status doSend(int peer, ControlTag tag, const void* frame, size_t bytes) override {
    const auto* p = static_cast<const uint8_t*>(frame);
    fabric_->sendControl(rank(), peer, tag, std::vector<uint8_t>(p, p + bytes));
    return Status::ok();
  }
  Status doProbe(int peer, ControlTag tag, std::vector<uint8_t>* frame, int* from, bool* got) override {
    *got = fabric_->takeControl(rank(), peer, tag, frame, from);
    return Status::ok();
  }

 private:
  std::shared_ptr<LoopbackFabric> fabric_;
};

LoopbackFabric::LoopbackFabric(int size)
    : size_(size), inbox_(size_t(size) * size_t(size) * kNumControlTags) {
  RINGGUARD_ENFORCE(size >= 1, "LoopbackFabric: size must be at least 1");
  for (int i = 0; i < size * size; ++i) links_.push_back(std::make_unique<Link>());
}

void LoopbackFabric::setControlHook(ControlHook hook) {
  std::lock_guard<std::mutex> lock(controlMutex_);
  hook_ = std::move(hook);
}

size_t LoopbackFabric::unmatched() const {
  size_t n = 0;
  for (const auto& l : links_) {
    std::lock_guard<std::mutex> lock(l->mutex);
    for (int c = 0; c < kChannels; ++c) n += l->sends[c].size() + l->recvs[c].size();
  }
  return n;
}

size_t LoopbackFabric::undeliveredControlFrames() const {
  std::lock_guard<std::mutex> lock(controlMutex_);
  size_t n = 0;
  for (const auto& q : inbox_) n += q.size();
  return n;
}

void LoopbackFabric::match(Link& l, int channel) {
  auto& sends = l.sends[channel];
  auto& recvs = l.recvs[channel];
  while (!sends.empty() && !recvs.empty()) {
    std::shared_ptr<Op> s = std::move(sends.front()), r = std::move(recvs.front());
    sends.pop_front();
    recvs.pop_front();
    if (s->bytes > r->bytes) {
      std::ostringstream os;
      os << "loopback: a " << channelName(channel) << " message of " << s->bytes << " bytes from rank "
         << s->src << " does not fit the receive of " << r->bytes << " bytes posted by rank " << r->dst;
      s->error = r->error = os.str();
    } else if (s->bytes) {
      copyBytes(r->recvData, s->sendData, s->bytes);
    }
    s->done = r->done = true;
  }
}

void LoopbackFabric::sendControl(int from, int to, ControlTag tag, std::vector<uint8_t> frame) {
  std::lock_guard<std::mutex> lock(controlMutex_);
  if (hook_ && !hook_(from, to, tag, &frame)) return;
  inbox_[(size_t(to) * size_t(size_) + size_t(from)) * kNumControlTags + size_t(tag)].push_back(
      std::move(frame));
}

bool LoopbackFabric::takeControl(int to, int from, ControlTag tag, std::vector<uint8_t>* frame, int* src) {
  std::lock_guard<std::mutex> lock(controlMutex_);
  for (int p = (from < 0 ? 0 : from); p < (from < 0 ? size_ : from + 1); ++p) {
    auto& q = inbox_[(size_t(to) * size_t(size_) + size_t(p)) * kNumControlTags + size_t(tag)];
    if (q.empty()) continue;
    *frame = std::move(q.front());
    q.pop_front();
    *src = p;
    return true;
  }
  return false;
}

LoopbackTransport::LoopbackTransport(std::shared_ptr<LoopbackFabric> fabric, int rank)
    : Transport(rank, fabric->size()),
      fabric_(std::move(fabric)),
      control_(std::make_unique<LoopbackControlChannel>(fabric_, rank)) {}

LoopbackTransport::~LoopbackTransport() = default;

Status LoopbackTransport::doPostSend(int peer, Channel channel, const void* data, size_t bytes,
                                     std::unique_ptr<TransportOp>* out) {
  const int c = channel == Channel::kPayload ? 0 : 1;
  auto op = std::make_shared<LoopbackFabric::Op>();
  op->src = rank();
  op->dst = peer;
  op->channel = c;
  op->sendData = static_cast<const uint8_t*>(data);
  op->bytes = bytes;
  LoopbackFabric::Link& l = fabric_->link(rank(), peer);
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    l.sends[c].push_back(op);
    LoopbackFabric::match(l, c);
  }
  out->reset(new LoopbackOp(fabric_, &l.mutex, &l.sends[c], std::move(op)));
  return Status::ok();
}

Status LoopbackTransport::doPostRecv(int peer, Channel channel, void* data, size_t bytes,
                                     std::unique_ptr<TransportOp>* out) {
  const int c = channel == Channel::kPayload ? 0 : 1;
  auto op = std::make_shared<LoopbackFabric::Op>();
  op->isRecv = true;
  op->src = peer;
  op->dst = rank();
  op->channel = c;
  op->recvData = static_cast<uint8_t*>(data);
  op->bytes = bytes;
  LoopbackFabric::Link& l = fabric_->link(peer, rank());
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    l.recvs[c].push_back(op);
    LoopbackFabric::match(l, c);
  }
  out->reset(new LoopbackOp(fabric_, &l.mutex, &l.recvs[c], std::move(op)));
  return Status::ok();
}

std::vector<std::unique_ptr<Transport>> makeLoopbackTransports(int size,
                                                               std::shared_ptr<LoopbackFabric>* fabric) {
  auto f = std::make_shared<LoopbackFabric>(size);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<LoopbackTransport>(f, r));
  if (fabric != nullptr) *fabric = f;
  return out;
}

}  // namespace ringguard
