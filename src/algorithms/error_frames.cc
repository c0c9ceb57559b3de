#include "algorithms/error_frames.h"

#include <cstring>
#include <sstream>

#include "algorithms/agreement.h"

namespace ringguard {

void HeldErrors::hold(PeerError e) {
  std::lock_guard<std::mutex> lock(mutex_);
  held_.push_back(std::move(e));
}

bool HeldErrors::takeDue(uint64_t seq, PeerError* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (it->seq > seq) continue;
    *out = std::move(*it);
    held_.erase(it);
    return true;
  }
  return false;
}

void sendErrorFrame(Transport* transport, const PeerError& frame) {
  ErrorFrameHeader h{};
  h.seq = frame.seq;
  h.kind = uint8_t(frame.kind);
  h.waitingOn = frame.waitingOn;
  h.waitedMs = frame.waitedMs;
  h.stalledMs = frame.stalledMs;
  h.inCollectiveMs = frame.inCollectiveMs;
  std::vector<uint8_t> body(sizeof(h));
  std::memcpy(body.data(), &h, sizeof(h));
  body.insert(body.end(), frame.text.begin(), frame.text.end());
  for (int p = 0; p < transport->size(); ++p) {
    if (p == transport->rank()) continue;
    (void)transport->control()->send(p, ControlTag::kError, body.data(), body.size());
  }
}

void broadcastError(Transport* transport, const Status& error, uint64_t seq) {
  PeerError e;
  e.seq = seq;
  e.text = "rank " + std::to_string(transport->rank()) + ": " + error.toString();
  sendErrorFrame(transport, e);
}

namespace {

// Decodes one error frame's body; anything that is not one of this format is a kTransportError.
Status decode(const CollectiveContext& ctx, int from, const std::vector<uint8_t>& body, PeerError* out) {
  ErrorFrameHeader h{};
  if (body.size() >= sizeof(h)) std::memcpy(&h, body.data(), sizeof(h));
  const int n = ctx.transport->size();
  if (body.size() < sizeof(h) || h.kind > uint8_t(ErrorKind::kReport) || h.waitingOn < -1 ||
      h.waitingOn >= n) {
    std::ostringstream os;
    os << ctx.name << " seq " << ctx.seq << ": malformed error frame from rank " << from << " ("
       << body.size() << " bytes, kind " << int(h.kind) << ", waiting on " << h.waitingOn << ")";
    return Status(StatusCode::kTransportError, os.str());
  }
  out->from = from;
  out->seq = h.seq;
  out->kind = ErrorKind(h.kind);
  out->waitingOn = h.waitingOn;
  out->waitedMs = h.waitedMs;
  out->stalledMs = h.stalledMs;
  out->inCollectiveMs = h.inCollectiveMs;
  out->text.assign(body.begin() + sizeof(h), body.end());
  return Status::ok();
}

}  // namespace

Status takePeerError(const CollectiveContext& ctx, PeerError* out, bool* got) {
  *got = false;
  if (ctx.held != nullptr && ctx.held->takeDue(ctx.seq, out)) return *got = true, Status::ok();
  for (;;) {
    std::vector<uint8_t> msg;
    int from = -1;
    bool any = false;
    RINGGUARD_RETURN_IF_ERROR(ctx.transport->control()->probe(-1, ControlTag::kError, &msg, &from, &any,
                                                              ctx.injector, ctx.counters));
    if (!any) return Status::ok();
    PeerError e;
    RINGGUARD_RETURN_IF_ERROR(decode(ctx, from, msg, &e));
    // A peer that finished this collective and failed a later one: this collective can still complete
    // (the peer sent everything of it), so its error waits for the collective it belongs to.
    if (ctx.held != nullptr && e.seq != kNoCollective && e.seq > ctx.seq) {
      ctx.held->hold(std::move(e));
      continue;
    }
    *out = std::move(e);
    *got = true;
    return Status::ok();
  }
}

Status peerErrorStatus(const PeerError& e) {
  std::string text = e.text;
  if (e.kind == ErrorKind::kReport) {
    text = "timed out waiting " + std::to_string(e.waitedMs) + " ms for " + e.text;
  }
  return Status(StatusCode::kPeerError, "rank " + std::to_string(e.from) + " reported: " + text);
}

}  // namespace ringguard
