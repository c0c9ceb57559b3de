#include "torch/p2p.h"

#include <ATen/ATen.h>

#include <cstring>
#include <string>

#include "ringguard/core/crc32.h"
#include "ringguard/core/fault_injector.h"
#include "ringguard/core/thread_name.h"
#include "ringguard/core/trailer.h"

namespace ringguard {

namespace {

constexpr int kTagHeader = 16;
constexpr int kTagPayload = 17;
constexpr int kTagReply = 18;

// Replies of the receiver: to the header (kGo or kFatal), then to the payload (kOk, kResend or kFatal).
enum : uint32_t { kGo = 1, kOk = 2, kResend = 3, kFatal = 4 };

at::Tensor bytesTensor(void* p, size_t n) { return at::from_blob(p, {int64_t(n)}, at::kByte); }

std::string firstLine(const std::exception& e) {
  std::string what = e.what();
  auto nl = what.find('\n');
  return nl == std::string::npos ? what : what.substr(0, nl);
}

// The header is the ring's trailer: seq = message number of this (peer, direction), column = the user's
// tag, payloadBytes = the size.
SliceId messageId(uint64_t seq, int tag, size_t bytes, int attempt) {
  SliceId id;
  id.seq = seq;
  id.column = uint32_t(tag);
  id.payloadBytes = uint32_t(bytes);
  id.attempt = uint16_t(attempt);
  return id;
}

std::string where(const char* dir, int peer, int tag) {
  return std::string(dir) + " rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
}

}  // namespace

VerifiedP2p::VerifiedP2p(c10::intrusive_ptr<c10d::Backend> gloo, const Options& options)
    : gloo_(std::move(gloo)), options_(options), fault_(options.fault) {}

VerifiedP2p::~VerifiedP2p() {
  std::map<std::pair<int, bool>, std::unique_ptr<Worker>> workers;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    workers.swap(workers_);
  }
  for (auto& kv : workers) {
    {
      std::lock_guard<std::mutex> lock(kv.second->mutex);
      kv.second->stop = true;
    }
    kv.second->cv.notify_all();
    kv.second->thread.join();
  }
}

void VerifiedP2p::send(int peer, int tag, const void* data, size_t bytes,
                       std::function<void(const Status&)> done) {
  enqueue(peer, true, Op{tag, const_cast<void*>(data), bytes, std::move(done)});
}

void VerifiedP2p::recv(int peer, int tag, void* data, size_t bytes, std::function<void(const Status&)> done) {
  enqueue(peer, false, Op{tag, data, bytes, std::move(done)});
}

void VerifiedP2p::setFault(const FaultOptions& fault) {
  std::lock_guard<std::mutex> lock(mutex_);
  fault_ = fault;
}

Counters VerifiedP2p::counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

void VerifiedP2p::enqueue(int peer, bool isSend, Op op) {
  Worker* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& slot = workers_[{peer, isSend}];
    if (!slot) {
      slot = std::make_unique<Worker>();
      Worker* raw = slot.get();
      raw->thread = std::thread([this, peer, isSend, raw] {
        nameThisThread("rg-p2p");
        loop(peer, isSend, raw);
      });
    }
    w = slot.get();
  }
  {
    std::lock_guard<std::mutex> lock(w->mutex);
    w->queue.push_back(std::move(op));
  }
  w->cv.notify_all();
}

void VerifiedP2p::loop(int peer, bool isSend, Worker* w) {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(w->mutex);
      w->cv.wait(lock, [w] { return w->stop || !w->queue.empty(); });
      if (w->queue.empty()) return;
      op = std::move(w->queue.front());
      w->queue.pop_front();
    }
    Status st;
    try {
      st = isSend ? runSend(peer, w, op) : runRecv(peer, w, op);
    } catch (const std::exception& e) {
      st = Status(StatusCode::kTransportError, std::string(isSend ? "send to" : "recv from") + " rank " +
                                                   std::to_string(peer) + ": " + firstLine(e));
    }
    w->messages++;
    op.done(st);
  }
}

// Gloo's wait with a timeout is what bounds a p2p op: it throws when it expires (and closes the context,
// which is fatal for this group anyway, as any timeout is).
Status VerifiedP2p::waitWork(const c10::intrusive_ptr<c10d::Work>& work, const char* what, int peer) {
  try {
    work->wait(options_.timeout);
  } catch (const std::exception& e) {
    return Status(StatusCode::kTimeout,
                  std::string(what) + " rank " + std::to_string(peer) + " did not complete within " +
                      std::to_string(options_.timeout.count()) + " ms: " + firstLine(e));
  }
  return Status::ok();
}

Status VerifiedP2p::runSend(int peer, Worker* w, const Op& op) {
  if (op.bytes > UINT32_MAX) {
    return Status(StatusCode::kInvalidArgument,
                  where("send to", peer, op.tag) + ": more than 4 GiB in one message");
  }
  const uint32_t crc = crc32(op.data, op.bytes);
  for (int attempt = 0;; ++attempt) {
    Trailer h = makeTrailer(messageId(w->messages, op.tag, op.bytes, attempt), crc, 0);
    uint32_t reply = 0;
    std::vector<at::Tensor> header{bytesTensor(&h, sizeof(h))}, r{bytesTensor(&reply, sizeof(reply))};
    RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->send(header, peer, kTagHeader), "header send to", peer));
    RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->recv(r, peer, kTagReply), "reply from", peer));
    if (reply != kGo) {
      return Status(StatusCode::kInvalidArgument,
                    where("send to", peer, op.tag) + " of " + std::to_string(op.bytes) +
                        " bytes was refused by the receiver (size or tag differ; its error says which)");
    }
    if (op.bytes) {
      std::vector<at::Tensor> payload{bytesTensor(op.data, op.bytes)};
      RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->send(payload, peer, kTagPayload), "send to", peer));
    }
    RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->recv(r, peer, kTagReply), "verdict from", peer));
    {
      std::lock_guard<std::mutex> lock(mutex_);
      counters_.slicesSent++;
      counters_.bytesSent += op.bytes;
      if (attempt > 0) counters_.retransmitted++;
    }
    if (reply == kOk) return Status::ok();
    if (reply != kResend) {
      return Status(StatusCode::kCorruption, where("send to", peer, op.tag) + ": still corrupted after " +
                                                 std::to_string(attempt + 1) + " transfers");
    }
  }
}

Status VerifiedP2p::runRecv(int peer, Worker* w, const Op& op) {
  FaultOptions fault;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fault = fault_;
  }
  const FaultInjector injector(fault);
  const int me = gloo_->getRank();
  for (int attempt = 0;; ++attempt) {
    const SliceId expected = messageId(w->messages, op.tag, op.bytes, attempt);
    Trailer h{};
    uint32_t reply = kGo;
    std::vector<at::Tensor> header{bytesTensor(&h, sizeof(h))}, r{bytesTensor(&reply, sizeof(reply))};
    RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->recv(header, peer, kTagHeader), "header from", peer));
    // A well-formed header that disagrees is the caller's error, and fatal; a damaged one is the link's, and
    // is dealt with after the payload (which travels at the size both sides expect).
    const SliceCheck first = checkTrailer(h, expected);
    Status refused;
    if (first == SliceCheck::kSizeMismatch || first == SliceCheck::kStale) {
      refused = Status(StatusCode::kInvalidArgument,
                       where("recv from", peer, op.tag) + " of " + std::to_string(op.bytes) +
                           " bytes: the sender sent " + std::to_string(h.payloadBytes) + " bytes with tag " +
                           std::to_string(h.column) +
                           " (sends and recvs between two ranks must match in order, size and tag)");
      reply = kFatal;
    }
    RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->send(r, peer, kTagReply), "reply to", peer));
    if (!refused.isOk()) return refused;
    if (op.bytes) {
      std::vector<at::Tensor> payload{bytesTensor(op.data, op.bytes)};
      RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->recv(payload, peer, kTagPayload), "recv from", peer));
    }
    bool injected =
        injector.enabled() && injector.corrupts(w->messages, 0, 0, me, attempt) &&
        injector.corrupt(w->messages, 0, 0, me, attempt, static_cast<uint8_t*>(op.data), op.bytes, &h);
    const SliceCheck check = checkSlice(h, expected, crc32(op.data, op.bytes));
    const bool good = check == SliceCheck::kOk;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      counters_.slicesVerified++;
      if (injected) counters_.injected++;
      if (!good) counters_.detected++;
      if (injected && good) counters_.escaped++;
    }
    reply = good ? kOk : attempt < options_.maxRetries ? kResend : kFatal;
    RINGGUARD_RETURN_IF_ERROR(waitWork(gloo_->send(r, peer, kTagReply), "verdict to", peer));
    if (reply == kOk) return Status::ok();
    if (reply == kFatal) {
      return Status(StatusCode::kCorruption, where("recv from", peer, op.tag) + ": " + sliceCheckName(check) +
                                                 ", still failing after " + std::to_string(attempt + 1) +
                                                 " transfers");
    }
  }
}

}  // namespace ringguard
