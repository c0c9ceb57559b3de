#include "algorithms/eager.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <thread>

#include "core/copy_bytes.h"
#include "core/corruption_plan.h"
#include "core/logging.h"
#include "core/trace_events.h"
#include "core/trailer.h"
#include "ringguard/core/crc32.h"

namespace ringguard {

namespace {

// The fingerprint summary of one rank as findDisagreement sends it in a one-round exchange: (this rank,
// no differing rank, its fingerprint, an empty one).
constexpr size_t kSummaryBytes = 8 + 2 * sizeof(Fingerprint);
constexpr size_t kPlainBytes = sizeof(DisseminationHeader) + kSummaryBytes;  // a frame without payload
constexpr size_t kPayloadAt = kPlainBytes + sizeof(EagerHeader) + sizeof(Trailer);

// One collective's exchange on one rank.
class Exchange {
 public:
  Exchange(const CollectiveContext& ctx, const Fingerprint& mine, const std::vector<EagerPayload>& out,
           const std::vector<size_t>& inBytes)
      : ctx_(ctx),
        n_(ctx.transport->size()),
        me_(ctx.transport->rank()),
        mine_(mine),
        out_(out),
        inBytes_(inBytes),
        peers_(size_t(n_)) {
    peers_[size_t(me_)].known = true;
    peers_[size_t(me_)].fp = mine;
    peers_[size_t(me_)].good = true;
  }

  Status run(std::vector<std::vector<uint8_t>>* in);

 private:
  // What this rank knows of one peer's frame.
  struct Peer {
    bool known = false;  // its fingerprint arrived intact
    Fingerprint fp{};
    bool good = false;  // its payload (or its lack of one) was checked and is intact
    std::vector<uint8_t> message;
    EagerView payload;  // in message
    bool hasPayload = false;
    int attempt = 0;
  };

  SliceId idOf(int sender, size_t bytes, int attempt) const {
    return SliceId{ctx_.seq, 0, 0, uint32_t(sender), uint32_t(bytes), uint16_t(attempt)};
  }
  std::string prefix() const { return std::string(ctx_.name) + " seq " + std::to_string(ctx_.seq) + ": "; }
  Status send(int peer, int attempt);
  Status receive(int peer, int attempt);
  Status parse(int peer, int attempt);
  Status checkFingerprints() const;
  Status verify(int peer);
  void fail(int peer, SliceCheck why);

  const CollectiveContext& ctx_;
  const int n_, me_;
  const Fingerprint mine_;
  const std::vector<EagerPayload>& out_;
  const std::vector<size_t>& inBytes_;
  std::vector<Peer> peers_;
  std::vector<SliceFailure> failures_;  // this rank's, current round
  Counters local_;
};

Status Exchange::send(int peer, int attempt) {
  const EagerPayload& p = out_[size_t(peer)];
  std::vector<uint8_t> body;
  body.reserve(kPayloadAt + p.bytes);
  appendBytes(&body, DisseminationHeader{ctx_.seq, uint32_t(attempt), 0});
  appendBytes(&body, int32_t(me_));
  appendBytes(&body, int32_t(-1));
  appendBytes(&body, mine_);
  appendBytes(&body, Fingerprint{});
  if (p.bytes > 0) appendEagerPayload(&body, idOf(me_, p.bytes, attempt), p.data, p.bytes, &local_);
  if (attempt > 0) {
    local_.retransmitted++;
    trace::instant(trace::Kind::kRetransmit, "retransmit", ctx_.track, ctx_.seq, peer, 0, 0, attempt);
  }
  if (const FaultInjector* inj = ctx_.injector) {
    if (int ms = inj->delayMs(ctx_.seq, 0, 0, peer, attempt)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      local_.delayed++;
    }
  }
  return ctx_.transport->control()->send(peer, ControlTag::kFingerprint, body.data(), body.size(), &local_);
}

// A frame whose CRC failed is a link failure of this peer's payload (repaired); any other fault in it is
// an error naming the peer.
Status Exchange::receive(int peer, int attempt) {
  ControlChannel* control = ctx_.transport->control();
  Peer& p = peers_[size_t(peer)];
  bool damaged = false;
  RINGGUARD_RETURN_IF_ERROR(pollUntil(
      ctx_,
      [&](bool* done) {
        int from = -1;
        return control->probeRepairable(peer, ControlTag::kFingerprint, &p.message, &from, done, &damaged,
                                        ctx_.injector, &local_);
      },
      [&] {
        return attempt == 0 ? "the fingerprint summary from rank " + std::to_string(peer)
                            : "the fingerprint frame from rank " + std::to_string(peer) + " again (attempt " +
                                  std::to_string(attempt) + ")";
      },
      peer));
  if (damaged) {
    fail(peer, SliceCheck::kCorrupt);  // counted as detected by the channel
    return Status::ok();
  }
  return parse(peer, attempt);
}

Status Exchange::parse(int peer, int attempt) {
  Peer& p = peers_[size_t(peer)];
  const std::vector<uint8_t>& m = p.message;
  auto malformed = [&](const std::string& why) {
    std::ostringstream os;
    os << prefix() << "malformed fingerprint frame from rank " << peer << " (" << m.size()
       << " bytes): " << why;
    return Status(StatusCode::kTransportError, os.str());
  };
  if (m.size() < kPlainBytes) return malformed("shorter than a fingerprint summary");
  DisseminationHeader h;
  std::memcpy(&h, m.data(), sizeof(h));
  if (h.round != uint32_t(attempt) || h.k != 0) {
    std::ostringstream os;
    os << prefix() << "unexpected fingerprint message from rank " << peer << " (attempt " << h.round
       << " exchange round " << h.k << "; expected attempt " << attempt << " exchange round 0)";
    return Status(StatusCode::kTransportError, os.str());
  }
  int32_t low = -1, diff = 0;
  std::memcpy(&low, m.data() + sizeof(h), 4);
  std::memcpy(&diff, m.data() + sizeof(h) + 4, 4);
  if (low != peer || diff != -1)
    return malformed("not the summary of rank " + std::to_string(peer) + " alone");
  std::memcpy(&p.fp, m.data() + sizeof(h) + 8, sizeof(Fingerprint));
  p.known = true;
  p.good = false;
  p.attempt = attempt;
  p.hasPayload = m.size() > kPlainBytes;
  p.payload = EagerView{};
  if (p.hasPayload && !parseEagerExtension(&p.message, kPlainBytes, &p.payload))
    return malformed("the payload's header does not match the frame");
  return Status::ok();
}

// Once every fingerprint is in: the same outcome as exchangeFingerprints on every rank (the lowest rank and
// the lowest rank whose fingerprint differs from it). A fingerprint that differs from this rank's while
// another is still missing is a mismatch too, named by the two ranks this rank can see.
Status Exchange::checkFingerprints() const {
  const bool all = std::all_of(peers_.begin(), peers_.end(), [](const Peer& p) { return p.known; });
  auto same = [](const Fingerprint& a, const Fingerprint& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; };
  if (all) {
    for (int r = 1; r < n_; ++r) {
      if (!same(peers_[size_t(r)].fp, peers_[0].fp))
        return compareFingerprints(0, peers_[0].fp, r, peers_[size_t(r)].fp);
    }
    return Status::ok();
  }
  for (int r = 0; r < n_; ++r) {
    const Peer& p = peers_[size_t(r)];
    if (p.known && !same(p.fp, mine_)) {
      return r < me_ ? compareFingerprints(r, p.fp, me_, mine_) : compareFingerprints(me_, mine_, r, p.fp);
    }
  }
  return Status::ok();
}

// Checks the payload of a peer whose fingerprint agrees with this rank's, as a ring slice.
Status Exchange::verify(int peer) {
  Peer& p = peers_[size_t(peer)];
  const size_t expected = inBytes_[size_t(peer)];
  if (p.payload.bytes != expected || (expected > 0) != p.hasPayload) {
    std::ostringstream os;
    os << prefix() << "rank " << peer << " sent " << p.payload.bytes
       << " payload bytes in its fingerprint frame, " << expected << " expected";
    return Status(StatusCode::kTransportError, os.str());
  }
  if (expected == 0) {
    p.good = true;
    return Status::ok();
  }
  const SliceCheck check = verifyEagerPayload(ctx_, idOf(peer, expected, p.attempt), p.payload, &local_);
  if (check == SliceCheck::kPoisoned) {
    return Status(StatusCode::kTransportError, prefix() + "rank " + std::to_string(peer) +
                                                   " sent a poisoned payload in its fingerprint frame");
  }
  if (isLinkFailure(check)) {
    fail(peer, check);
    return Status::ok();
  }
  p.good = true;
  return Status::ok();
}

void Exchange::fail(int peer, SliceCheck why) {
  SliceFailure f;
  f.column = uint32_t(peer);
  f.sender = peer;
  f.receiver = me_;
  f.reason = uint8_t(why);
  failures_.push_back(f);
  trace::instant(trace::Kind::kDetect, "detected", ctx_.track, ctx_.seq, peer, me_, 0, 0,
                 sliceCheckName(why));
  logDebug(Subsys::kRing, "{} seq {}: detected {}", ctx_.name, ctx_.seq, describeFailure(f));
}

Status Exchange::run(std::vector<std::vector<uint8_t>>* in) {
  Status st = [&]() -> Status {
    {
      trace::Span span(trace::Kind::kControl, controlTagName(ControlTag::kFingerprint), ctx_.track, ctx_.seq);
      span.event().a = 1;
      for (int d = 1; d < n_; ++d) RINGGUARD_RETURN_IF_ERROR(send((me_ + d) % n_, 0));
      for (int d = 1; d < n_; ++d) RINGGUARD_RETURN_IF_ERROR(receive((me_ - d + n_) % n_, 0));
    }
    // A verdict entry a peer sends must name a frame of this exchange: column = sender, step 0, slice 0.
    const FailureValidator shape = [](const SliceFailure& f) {
      if (f.column == uint32_t(f.sender) && f.step == 0 && f.slice == 0 && f.sender != f.receiver)
        return Status::ok();
      return Status(StatusCode::kTransportError,
                    "not a fingerprint frame's payload (column = sender, step 0, slice 0)");
    };
    std::vector<SliceFailure> global;
    for (int attempt = 0;; ++attempt) {
      RINGGUARD_RETURN_IF_ERROR(checkFingerprints());
      for (int r = 0; r < n_; ++r) {
        Peer& p = peers_[size_t(r)];
        if (p.known && !p.good && !p.message.empty()) RINGGUARD_RETURN_IF_ERROR(verify(r));
        p.message.resize(p.good ? p.message.size() : 0);  // a failed frame is sent again
      }
      RINGGUARD_RETURN_IF_ERROR(exchangeVerdicts(ctx_, attempt, failures_, &global, shape));
      if (global.empty()) break;
      if (attempt == ctx_.options->maxRetries) {
        std::ostringstream os;
        os << prefix() << "slice still failing verification after " << attempt
           << " retransmission(s): " << describeFailure(global.front());
        if (global.size() > 1) os << " (and " << global.size() - 1 << " more)";
        return Status(StatusCode::kCorruption, os.str());
      }
      failures_.clear();
      local_.repairRounds++;
      trace::Span span(trace::Kind::kRepair, "repair round", ctx_.track, ctx_.seq);
      span.event().a = attempt + 1;
      span.event().b = int32_t(global.size());
      for (const SliceFailure& f : global) {
        if (f.sender == me_) RINGGUARD_RETURN_IF_ERROR(send(f.receiver, attempt + 1));
      }
      for (const SliceFailure& f : global) {
        if (f.receiver == me_) RINGGUARD_RETURN_IF_ERROR(receive(f.sender, attempt + 1));
      }
    }
    in->assign(size_t(n_), {});
    for (int r = 0; r < n_; ++r) {
      const Peer& p = peers_[size_t(r)];
      if (!p.known || !p.good) {
        return Status(StatusCode::kInternal, prefix() + "the frame of rank " + std::to_string(r) +
                                                 " is missing after every rank reported none failed");
      }
      if (r != me_ && p.hasPayload)
        (*in)[size_t(r)].assign(p.payload.payload, p.payload.payload + p.payload.bytes);
    }
    return Status::ok();
  }();
  *ctx_.counters += local_;
  return st;
}

}  // namespace

bool fitsEager(const CollectiveContext& ctx, const Executor& exec, size_t bytes) {
  return exec.memory() == MemoryKind::kHost && bytes > 0 && bytes <= ctx.options->sliceBytes &&
         bytes <= ctx.transport->eagerBytes();
}

bool runsEager(const CollectiveContext& ctx, const Executor& exec, size_t maxPayload) {
  return exchangeInOneRound(ctx.transport->size()) && fitsEager(ctx, exec, maxPayload);
}

void appendEagerPayload(std::vector<uint8_t>* body, const SliceId& id, const void* data, size_t bytes,
                        Counters* counters) {
  appendBytes(body, EagerHeader{kEagerMagic, uint32_t(bytes)});
  appendBytes(body, makeTrailer(id, crc32(data, bytes), 0));
  // Not insert: its memmove would take memcpy's slow case (core/copy_bytes.h).
  const size_t at = body->size();
  body->resize(at + bytes);
  copyBytes(body->data() + at, data, bytes);
  counters->slicesSent++;
  counters->bytesSent += bytes;
}

bool parseEagerExtension(std::vector<uint8_t>* frame, size_t at, EagerView* view) {
  EagerHeader e{};
  const size_t payloadAt = at + sizeof(EagerHeader) + sizeof(Trailer);
  if (frame->size() < payloadAt) return false;
  std::memcpy(&e, frame->data() + at, sizeof(e));
  if (e.magic != kEagerMagic || frame->size() != payloadAt + size_t(e.payloadBytes)) return false;
  std::memcpy(&view->trailer, frame->data() + at + sizeof(EagerHeader), sizeof(Trailer));
  view->payload = frame->data() + payloadAt;
  view->bytes = e.payloadBytes;
  return true;
}

SliceCheck verifyEagerPayload(const CollectiveContext& ctx, const SliceId& expected, const EagerView& view,
                              Counters* counters, int attempt) {
  if (attempt < 0) attempt = expected.attempt;
  const int me = ctx.transport->rank();
  trace::Span span(trace::Kind::kSlice, "slice", ctx.track, expected.seq);
  if (trace::on()) {
    trace::Event& e = span.event();
    e.a = 0;
    e.b = 0;
    e.c = int32_t(expected.column);
    e.d = attempt;
    e.value = view.bytes;
  }
  // Fault injection after the sender's CRC, before this rank's check, keyed as a ring slice.
  Trailer trailer = view.trailer;
  bool injected = false;
  const int step = int(expected.step), slice = int(expected.slice);
  if (ctx.injector && ctx.injector->corrupts(expected.seq, step, slice, me, attempt)) {
    const CorruptionPlan damage = ctx.injector->plan(expected.seq, step, slice, me, attempt, view.bytes);
    if (damage.damages()) injected = applyCorruptionPlan(damage, view.payload, &trailer);
    if (injected) counters->injected++;
  }
  counters->slicesVerified++;
  const SliceCheck check = checkSlice(trailer, expected, crc32(view.payload, view.bytes));
  if (isLinkFailure(check)) {
    counters->detected++;
  } else if (injected && check != SliceCheck::kPoisoned) {
    counters->escaped++;
    logError(Subsys::kRing,
             "{} seq {}: an injected corruption of the payload from rank {} passed verification", ctx.name,
             expected.seq, expected.column);
  }
  return check;
}

Status eagerExchange(const CollectiveContext& ctx, const Fingerprint& mine,
                     const std::vector<EagerPayload>& out, const std::vector<size_t>& inBytes,
                     std::vector<std::vector<uint8_t>>* in) {
  Exchange x(ctx, mine, out, inBytes);
  return x.run(in);
}

}  // namespace ringguard
