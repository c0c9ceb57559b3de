#include "algorithms/peer_messages.h"

#include <cstring>
#include <sstream>

#include "core/trace_events.h"

namespace ringguard {

namespace {

struct PeerVerdictHeader {
  uint64_t seq;
  uint32_t round;
  uint32_t count;
};

// A verdict list names at most a few slices per repair; anything longer is not a verdict of ours.
constexpr uint32_t kMaxPeerVerdictEntries = 1u << 20;

}  // namespace

// On the timeline (core/trace_events.h, kPeerControl): a span named by the tag, with the exchange's own
// message number.
Status sendToPeer(const CollectiveContext& ctx, int peer, ControlTag tag, const void* data, size_t bytes) {
  trace::Span span(trace::Kind::kPeerControl, controlTagName(tag), ctx.track, ctx.seq);
  span.event().a = peer;
  return ctx.transport->control()->send(peer, tag, data, bytes, ctx.counters);
}

Status receiveFromPeer(const CollectiveContext& ctx, int peer, ControlTag tag, std::vector<uint8_t>* message,
                       const std::function<std::string()>& what) {
  trace::Span span(trace::Kind::kPeerControl, controlTagName(tag), ctx.track, ctx.seq);
  span.event().a = peer;
  span.event().b = 1;
  return pollUntil(
      ctx,
      [&](bool* done) {
        int from = -1;
        return ctx.transport->control()->probe(peer, tag, message, &from, done, ctx.injector, ctx.counters);
      },
      what, peer);
}

Status checkPeerFingerprint(const CollectiveContext& ctx, int peer, const std::vector<uint8_t>& message,
                            const Fingerprint& expected, const char* what) {
  Fingerprint theirs;
  if (message.size() < sizeof(Fingerprint)) {
    return Status(StatusCode::kTransportError, std::string(what) + " fingerprint from rank " +
                                                   std::to_string(peer) + " has " +
                                                   std::to_string(message.size()) + " bytes, fewer than " +
                                                   std::to_string(sizeof(Fingerprint)));
  }
  std::memcpy(&theirs, message.data(), sizeof(theirs));
  if (theirs == expected) return Status::ok();
  std::ostringstream os;
  os << what << " mismatch: rank " << peer << " sends " << describeFingerprint(theirs) << ", rank "
     << ctx.transport->rank() << " expects " << describeFingerprint(expected);
  return Status(StatusCode::kInvalidArgument, os.str());
}

Status receivePeerFingerprint(const CollectiveContext& ctx, int peer, const Fingerprint& expected,
                              const char* what) {
  std::vector<uint8_t> msg;
  RINGGUARD_RETURN_IF_ERROR(receiveFromPeer(ctx, peer, ControlTag::kFingerprint, &msg, [&] {
    return std::string("the ") + what + " fingerprint from rank " + std::to_string(peer);
  }));
  return checkPeerFingerprintMessage(ctx, peer, msg, expected, what);
}

Status checkPeerFingerprintMessage(const CollectiveContext& ctx, int peer, const std::vector<uint8_t>& msg,
                                   const Fingerprint& expected, const char* what) {
  // The fingerprint first: a peer that sends a payload with it (a small send/recv) where this rank expects
  // none has another count, and that mismatch is what to report.
  RINGGUARD_RETURN_IF_ERROR(checkPeerFingerprint(ctx, peer, msg, expected, what));
  if (msg.size() != sizeof(Fingerprint)) {
    return Status(StatusCode::kTransportError,
                  std::string(what) + " fingerprint from rank " + std::to_string(peer) + " has " +
                      std::to_string(msg.size()) + " bytes, not " + std::to_string(sizeof(Fingerprint)));
  }
  return Status::ok();
}

Status sendPeerVerdict(const CollectiveContext& ctx, int peer, uint64_t seq, int round,
                       const std::vector<SliceFailure>& failures) {
  std::vector<uint8_t> out(sizeof(PeerVerdictHeader) + failures.size() * sizeof(SliceFailure));
  const PeerVerdictHeader h{seq, uint32_t(round), uint32_t(failures.size())};
  std::memcpy(out.data(), &h, sizeof(h));
  if (!failures.empty())
    std::memcpy(out.data() + sizeof(h), failures.data(), failures.size() * sizeof(SliceFailure));
  return sendToPeer(ctx, peer, ControlTag::kVerdict, out.data(), out.size());
}

Status receivePeerVerdict(const CollectiveContext& ctx, int peer, uint64_t seq, int round,
                          std::vector<SliceFailure>* failures) {
  std::vector<uint8_t> msg;
  RINGGUARD_RETURN_IF_ERROR(receiveFromPeer(ctx, peer, ControlTag::kVerdict, &msg, [&] {
    return "the verdict of round " + std::to_string(round) + " from rank " + std::to_string(peer);
  }));
  PeerVerdictHeader h{};
  if (msg.size() >= sizeof(h)) std::memcpy(&h, msg.data(), sizeof(h));
  if (msg.size() < sizeof(h) || h.seq != seq || h.round != uint32_t(round) ||
      h.count > kMaxPeerVerdictEntries || msg.size() != sizeof(h) + size_t(h.count) * sizeof(SliceFailure)) {
    std::ostringstream os;
    os << "malformed verdict from rank " << peer << " (" << msg.size() << " bytes, seq " << h.seq << " round "
       << h.round << "; expected seq " << seq << " round " << round << ")";
    return Status(StatusCode::kTransportError, os.str());
  }
  failures->resize(h.count);
  if (h.count) std::memcpy(failures->data(), msg.data() + sizeof(h), size_t(h.count) * sizeof(SliceFailure));
  return Status::ok();
}

}  // namespace ringguard
