#include "ringguard/algorithms/collective.h"

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

namespace ringguard {

namespace {

using Clock = std::chrono::steady_clock;

struct VerdictHeader {
  uint64_t seq;
  uint32_t round;
  uint32_t count;
};

Status peerErrorIfAny(const CollectiveContext& ctx) {
  std::vector<uint8_t> msg;
  int from = -1;
  bool got = false;
  RINGGUARD_RETURN_IF_ERROR(ctx.transport->probeControl(-1, ControlTag::kError, &msg, &from, &got));
  if (!got) return Status::ok();
  std::string text(msg.begin(), msg.end());
  return Status(StatusCode::kPeerError, "rank " + std::to_string(from) + " reported: " + text);
}

}  // namespace

Status pollUntil(const CollectiveContext& ctx, const std::function<Status(bool* done)>& test,
                 const std::function<std::string()>& what) {
  const auto start = Clock::now();
  auto lastErrorCheck = start;
  RINGGUARD_RETURN_IF_ERROR(ctx.transport->flush());
  for (uint64_t spin = 0;; ++spin) {
    RINGGUARD_RETURN_IF_ERROR(ctx.transport->progress());
    bool done = false;
    RINGGUARD_RETURN_IF_ERROR(test(&done));
    if (done) return Status::ok();
    if (ctx.aborted != nullptr && ctx.aborted->load(std::memory_order_relaxed)) {
      std::ostringstream os;
      os << ctx.name << " seq " << ctx.seq << ": aborted on rank " << ctx.transport->rank()
         << " while waiting for " << what();
      return Status(StatusCode::kAborted, os.str());
    }
    auto now = Clock::now();
    if (now - lastErrorCheck > std::chrono::microseconds(500)) {
      RINGGUARD_RETURN_IF_ERROR(peerErrorIfAny(ctx));
      lastErrorCheck = now;
    }
    if (now - start > ctx.options->timeout) {
      std::ostringstream os;
      os << ctx.name << " seq " << ctx.seq << ": timed out after " << ctx.options->timeout.count()
         << " ms on rank " << ctx.transport->rank() << " waiting for " << what();
      return Status(StatusCode::kTimeout, os.str());
    }
    // Ranks may share cores (oversubscribed tests): give the peer a chance to run. A wait that has lasted
    // over a millisecond is not a transfer about to finish: poll it every 50 us instead of burning a core
    // (bounded added latency: 50 us on waits of 1 ms and more).
    if (now - start > std::chrono::milliseconds(1)) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else if (spin > 64) {
      std::this_thread::yield();
    }
  }
}

Status waitFrame(const CollectiveContext& ctx, FrameRequest* req, const std::function<std::string()>& what) {
  if (!req->active()) return Status::ok();
  return pollUntil(
      ctx, [req](bool* done) { return req->test(done); }, what);
}

// Sends `bytes` to every peer on the control channel and receives one message with `tag` from each
// (messages[p], empty for this rank). `what(p)` names what a timeout was waiting for.
static Status exchangeControl(const CollectiveContext& ctx, ControlTag tag, const void* data, size_t bytes,
                              const std::function<std::string(int)>& what,
                              std::vector<std::vector<uint8_t>>* messages) {
  Transport* t = ctx.transport;
  const int n = t->size(), me = t->rank();
  for (int p = 0; p < n; ++p) {
    if (p != me) RINGGUARD_RETURN_IF_ERROR(t->sendControl(p, tag, data, bytes));
  }
  messages->assign(size_t(n), {});
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    std::vector<uint8_t>& msg = (*messages)[size_t(p)];
    RINGGUARD_RETURN_IF_ERROR(pollUntil(
        ctx,
        [&](bool* done) {
          int from = -1;
          return t->probeControl(p, tag, &msg, &from, done);
        },
        [&what, p] { return what(p); }));
  }
  return Status::ok();
}

Status exchangeFingerprints(const CollectiveContext& ctx, const Fingerprint& mine) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  std::vector<std::vector<uint8_t>> msgs;
  RINGGUARD_RETURN_IF_ERROR(exchangeControl(
      ctx, ControlTag::kFingerprint, &mine, sizeof(mine),
      [](int p) { return "the collective fingerprint from rank " + std::to_string(p); }, &msgs));
  std::vector<Fingerprint> theirs(n);
  theirs[me] = mine;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const std::vector<uint8_t>& msg = msgs[size_t(p)];
    if (msg.size() != sizeof(Fingerprint)) {
      return Status(StatusCode::kTransportError, "fingerprint from rank " + std::to_string(p) + " has " +
                                                     std::to_string(msg.size()) + " bytes");
    }
    std::memcpy(&theirs[p], msg.data(), sizeof(Fingerprint));
  }
  // Every rank holds all fingerprints and reports the same first mismatch (lowest rank pair).
  for (int p = 1; p < n; ++p) {
    RINGGUARD_RETURN_IF_ERROR(compareFingerprints(0, theirs[0], p, theirs[p]));
  }
  // A peer that already failed (e.g. timed out waiting for this rank) must stop us before payload moves.
  return peerErrorIfAny(ctx);
}

Status exchangeVerdicts(const CollectiveContext& ctx, int round, const std::vector<SliceFailure>& mine,
                        std::vector<SliceFailure>* global) {
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  std::vector<uint8_t> out(sizeof(VerdictHeader) + mine.size() * sizeof(SliceFailure));
  VerdictHeader h{ctx.seq, uint32_t(round), uint32_t(mine.size())};
  std::memcpy(out.data(), &h, sizeof(h));
  if (!mine.empty()) std::memcpy(out.data() + sizeof(h), mine.data(), mine.size() * sizeof(SliceFailure));
  std::vector<std::vector<uint8_t>> msgs;
  RINGGUARD_RETURN_IF_ERROR(exchangeControl(
      ctx, ControlTag::kVerdict, out.data(), out.size(),
      [round](int p) {
        return "the verdict of round " + std::to_string(round) + " from rank " + std::to_string(p);
      },
      &msgs));
  std::vector<SliceFailure> all = mine;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const std::vector<uint8_t>& msg = msgs[size_t(p)];
    VerdictHeader ph{};
    if (msg.size() >= sizeof(ph)) std::memcpy(&ph, msg.data(), sizeof(ph));
    if (msg.size() < sizeof(ph) || ph.seq != ctx.seq || ph.round != uint32_t(round) ||
        msg.size() != sizeof(ph) + size_t(ph.count) * sizeof(SliceFailure)) {
      std::ostringstream os;
      os << "malformed verdict from rank " << p << " (" << msg.size() << " bytes, seq " << ph.seq << " round "
         << ph.round << "; expected seq " << ctx.seq << " round " << round << ")";
      return Status(StatusCode::kTransportError, os.str());
    }
    size_t base = all.size();
    all.resize(base + ph.count);
    if (ph.count) std::memcpy(all.data() + base, msg.data() + sizeof(ph), ph.count * sizeof(SliceFailure));
  }
  *global = canonicalFailures(std::move(all));
  return Status::ok();
}

void broadcastError(Transport* transport, const Status& error) {
  std::string text = "rank " + std::to_string(transport->rank()) + ": " + error.toString();
  for (int p = 0; p < transport->size(); ++p) {
    if (p == transport->rank()) continue;
    (void)transport->sendControl(p, ControlTag::kError, text.data(), text.size());
  }
}

}  // namespace ringguard
