#include "algorithms/agreement.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "algorithms/eager.h"
#include "algorithms/stall_report.h"
#include "core/trace_events.h"

namespace ringguard {

namespace {

using Clock = std::chrono::steady_clock;

// pollUntil on a transport that can block (Transport::waitForEvent): polls this many times first (a
// completion already under way costs no sleep), and for as long as the transport asks
// (Transport::pollBeforeBlocking), then blocks for at most kBlockedWait at a time. Peers'
// errors arrive as control frames, which wake the wait; the bound is for the deadline and abort(), and a
// short one costs a waiting rank a share of a core in wake-ups (docs/PERFORMANCE.md, "The bound of a blocked
// wait").
constexpr uint64_t kSpinsBeforeBlocking = 16;
constexpr std::chrono::milliseconds kBlockedWait(10);

// The last poll of this thread, to tell a wait from a rank that did not run (stopped, descheduled): a gap
// between two polls of one collective longer than the timeout means the peers waiting on this rank timed
// out for that reason.
struct LastPoll {
  const Transport* transport = nullptr;
  uint64_t seq = 0;
  const char* name = nullptr;
  Clock::time_point since;  // the first poll of this collective
  Clock::time_point at;
  Clock::duration stalled{0};  // the longest gap so far in this collective
};
thread_local LastPoll lastPoll;

uint32_t millis(Clock::duration d) {
  return uint32_t(
      std::min<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count(), UINT32_MAX));
}

// Whether this thread's last poll was in `ctx`'s collective.
bool pollsOf(const CollectiveContext& ctx) {
  return lastPoll.transport == ctx.transport && lastPoll.seq == ctx.seq && lastPoll.name == ctx.name;
}

// Fills w's stall fields from this thread's polls of `ctx`'s collective, as of `now`.
void noteStall(const CollectiveContext& ctx, Clock::time_point now, WaitState* w) {
  if (!pollsOf(ctx)) return;
  const Clock::duration stalled = std::max(lastPoll.stalled, now - lastPoll.at);
  w->stalledMs = stalled > ctx.options->timeout ? millis(stalled) : 0;
  w->inCollectiveMs = millis(now - lastPoll.since);
}

}  // namespace

Status pollUntil(const CollectiveContext& ctx, const std::function<Status(bool* done)>& test,
                 const std::function<std::string()>& what, int peer) {
  const auto start = Clock::now();
  auto lastErrorCheck = start;
  if (!pollsOf(ctx)) lastPoll = LastPoll{ctx.transport, ctx.seq, ctx.name, start, start, Clock::duration(0)};
  // Counted before `test`: a wait that completes at once after a stall must not hide it.
  auto notePoll = [](Clock::time_point now) {
    lastPoll.stalled = std::max(lastPoll.stalled, now - lastPoll.at);
    lastPoll.at = now;
  };
  auto waitState = [&](Clock::time_point now, bool timedOut) {
    WaitState w;
    w.peer = peer;
    w.what = what();
    w.waitedMs = millis(now - start);
    w.timedOut = timedOut;
    noteStall(ctx, now, &w);
    return w;
  };
  RINGGUARD_RETURN_IF_ERROR(ctx.transport->flush());
  for (uint64_t spin = 0;; ++spin) {
    const uint64_t events = ctx.transport->eventCount();  // before the test: a later completion wakes us
    notePoll(Clock::now());
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
    notePoll(now);
    if (now - lastErrorCheck > std::chrono::microseconds(500)) {
      PeerError e;
      bool got = false;
      RINGGUARD_RETURN_IF_ERROR(takePeerError(ctx, &e, &got));
      // A peer's wait timed out: this rank is stuck too (the communicator fails); say what it waits for.
      if (got && e.kind == ErrorKind::kReport) return blameStall(ctx, waitState(now, false), &e);
      if (got) return peerErrorStatus(e);
      lastErrorCheck = now;
    }
    if (now - start > ctx.options->timeout + ctx.timeoutSlack) {
      return blameStall(ctx, waitState(now, true), nullptr);
    }
    // A transport that completes on threads of its own is waited on without spinning: the spin would take
    // the core from the very threads that complete the wait (ranks sharing cores). Woken at the next
    // completion, at least every kBlockedWait to check the deadline and the peers' errors.
    if (spin >= kSpinsBeforeBlocking && now - start >= ctx.transport->pollBeforeBlocking() &&
        ctx.transport->waitForEvent(events, kBlockedWait)) {
      continue;
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

Status waitFrame(const CollectiveContext& ctx, FrameRequest* req, const std::function<std::string()>& what,
                 int peer) {
  if (!req->active()) return Status::ok();
  return pollUntil(
      ctx, [req](bool* done) { return req->test(done); }, what, peer);
}

int disseminationRounds(int nranks) {
  int k = 0;
  while ((int64_t(1) << k) < int64_t(nranks)) ++k;
  return k;
}

bool exchangeInOneRound(int nranks) { return nranks >= 2 && nranks - 1 <= disseminationRounds(nranks); }

int exchangeRounds(int nranks) { return exchangeInOneRound(nranks) ? 1 : disseminationRounds(nranks); }

namespace {

// Checks the header of a message received in exchange round k and hands its body to `merge`.
Status mergeMessage(const CollectiveContext& ctx, ControlTag tag, uint32_t round, bool checkSeq, int k,
                    int from, const std::vector<uint8_t>& msg,
                    const std::function<Status(int from, const uint8_t* body, size_t bytes)>& merge) {
  DisseminationHeader h{};
  if (msg.size() >= sizeof(h)) std::memcpy(&h, msg.data(), sizeof(h));
  if (msg.size() < sizeof(h) || (checkSeq && h.seq != ctx.seq) || h.round != round || h.k != uint32_t(k)) {
    std::ostringstream os;
    os << ctx.name << " seq " << ctx.seq << ": unexpected " << controlTagName(tag) << " message from rank "
       << from << " (" << msg.size() << " bytes, seq " << h.seq << " round " << h.round << " exchange round "
       << h.k << "; expected seq " << ctx.seq << " round " << round << " exchange round " << k << ")";
    return Status(StatusCode::kTransportError, os.str());
  }
  return merge(from, msg.data() + sizeof(h), msg.size() - sizeof(h));
}

}  // namespace

Status disseminate(const CollectiveContext& ctx, ControlTag tag, uint32_t round, bool checkSeq,
                   const std::function<std::vector<uint8_t>()>& summary,
                   const std::function<Status(int from, const uint8_t* body, size_t bytes)>& merge,
                   const std::function<std::string(int peer)>& what) {
  ControlChannel* control = ctx.transport->control();
  const int n = ctx.transport->size(), me = ctx.transport->rank();
  const int rounds = exchangeRounds(n);
  trace::Span span(trace::Kind::kControl, controlTagName(tag), ctx.track, ctx.seq);
  span.event().a = rounds;
  span.event().b = int32_t(round);
  // This rank's current summary as the message of exchange round k.
  auto message = [&](uint32_t k) {
    std::vector<uint8_t> out;
    appendBytes(&out, DisseminationHeader{ctx.seq, round, k});
    const std::vector<uint8_t> body = summary();
    out.insert(out.end(), body.begin(), body.end());
    return out;
  };
  // Waits for `from`'s message of exchange round k and merges it.
  std::vector<uint8_t> msg;
  auto receive = [&](const CollectiveContext& waitCtx, uint32_t k, int from) {
    RINGGUARD_RETURN_IF_ERROR(pollUntil(
        waitCtx,
        [&](bool* done) {
          int src = -1;
          return control->probe(from, tag, &msg, &src, done, ctx.injector, ctx.counters);
        },
        [&] { return what(from); }, from));
    return mergeMessage(ctx, tag, round, checkSeq, int(k), from, msg, merge);
  };
  if (exchangeInOneRound(n)) {
    // N <= 3: one round to every peer costs no more frames than the dissemination (N - 1 <= ceil(log2 N))
    // and one sequential latency instead of ceil(log2 N). Every message carries only its sender's own
    // summary and exchange round 0; each (sender, receiver, tag) still carries one frame per exchange.
    // Every wait is on the sender itself (no relay), so no slack: the rank that waits on a stalled one
    // times out and names it directly.
    const std::vector<uint8_t> out = message(0);
    for (int d = 1; d < n; ++d) {
      RINGGUARD_RETURN_IF_ERROR(control->send((me + d) % n, tag, out.data(), out.size(), ctx.counters));
    }
    for (int d = 1; d < n; ++d) RINGGUARD_RETURN_IF_ERROR(receive(ctx, 0, (me - d + n) % n));
    return Status::ok();
  }
  // Round k's sender sends only after its own rounds < k: a chain of waits on a stalled rank has strictly
  // decreasing rounds and ends at a rank that waits on the stalled one itself. A quarter of the timeout of
  // slack per round lets that rank time out first and broadcast the stalled rank's name, so every rank
  // reports the real culprit rather than the healthy rank it was relayed through.
  CollectiveContext waitCtx = ctx;
  for (int k = 0; k < rounds; ++k) {
    waitCtx.timeoutSlack = ctx.timeoutSlack + k * (ctx.options->timeout / 4);
    const int dist = 1 << k;
    const std::vector<uint8_t> out = message(uint32_t(k));
    RINGGUARD_RETURN_IF_ERROR(control->send((me + dist) % n, tag, out.data(), out.size(), ctx.counters));
    RINGGUARD_RETURN_IF_ERROR(receive(waitCtx, uint32_t(k), (me - dist % n + n) % n));
  }
  return Status::ok();
}

Status findDisagreement(const CollectiveContext& ctx, ControlTag tag, const void* mine, size_t bytes,
                        Disagreement* out) {
  const int n = ctx.transport->size();
  // Summary: (lowest rank seen, its bytes), (lowest rank seen whose bytes differ from those, its bytes).
  // The summary of a union is a function of the two summaries, so merging overlapping ranges (as the
  // dissemination does when N is not a power of two) changes nothing.
  Disagreement sum;
  sum.lowRank = ctx.transport->rank();
  sum.diffRank = -1;
  sum.low.assign(static_cast<const uint8_t*>(mine), static_cast<const uint8_t*>(mine) + bytes);
  sum.diff.assign(bytes, 0);
  auto summary = [&] {
    std::vector<uint8_t> out;
    appendBytes(&out, int32_t(sum.lowRank));
    appendBytes(&out, int32_t(sum.diffRank));
    out.insert(out.end(), sum.low.begin(), sum.low.end());
    out.insert(out.end(), sum.diff.begin(), sum.diff.end());
    return out;
  };
  auto merge = [&](int from, const uint8_t* body, size_t size) {
    int32_t low = -1, diff = -1;
    // A small collective's fingerprint frame carries its payload after the summary (eager.h): a rank that
    // takes the pipeline reads the fingerprint and leaves the rest (the fingerprints then differ).
    const bool eager = tag == ControlTag::kFingerprint && isEagerExtension(body, size, 8 + 2 * bytes);
    const bool sized = size == 8 + 2 * bytes || eager;
    if (sized) {
      std::memcpy(&low, body, 4);
      std::memcpy(&diff, body + 4, 4);
    }
    if (!sized || low < 0 || low >= n || (diff != -1 && (diff <= low || diff >= n))) {
      std::ostringstream os;
      os << ctx.name << " seq " << ctx.seq << ": malformed " << controlTagName(tag) << " summary from rank "
         << from << " (" << size << " bytes, ranks " << low << " and " << diff << ")";
      return Status(StatusCode::kTransportError, os.str());
    }
    Disagreement t;
    t.lowRank = low;
    t.diffRank = diff;
    t.low.assign(body + 8, body + 8 + bytes);
    t.diff.assign(body + 8 + bytes, body + 8 + 2 * bytes);
    Disagreement& a = sum.lowRank <= t.lowRank ? sum : t;  // holds the lowest rank
    Disagreement& b = sum.lowRank <= t.lowRank ? t : sum;
    // The lowest rank of b's set whose bytes differ from a.low: b's lowest when that differs, else b's
    // first differing one (b.low == a.low, so b.diff differs from a.low too).
    int cand = -1;
    const std::vector<uint8_t>* candBytes = nullptr;
    if (b.low != a.low) {
      if (b.lowRank != a.lowRank) cand = b.lowRank, candBytes = &b.low;
    } else if (b.diffRank != -1) {
      cand = b.diffRank, candBytes = &b.diff;
    }
    if (cand != -1 && (a.diffRank == -1 || cand < a.diffRank)) {
      a.diffRank = cand;
      a.diff = *candBytes;
    }
    if (&a != &sum) sum = std::move(a);
    return Status::ok();
  };
  RINGGUARD_RETURN_IF_ERROR(disseminate(ctx, tag, 0, /*checkSeq=*/false, summary, merge, [tag](int p) {
    return std::string("the ") + controlTagName(tag) + " summary from rank " + std::to_string(p);
  }));
  *out = std::move(sum);
  return Status::ok();
}

Status exchangeFingerprints(const CollectiveContext& ctx, const Fingerprint& mine) {
  Disagreement d;
  RINGGUARD_RETURN_IF_ERROR(findDisagreement(ctx, ControlTag::kFingerprint, &mine, sizeof(mine), &d));
  if (d.diffRank != -1) {
    Fingerprint a, b;
    std::memcpy(&a, d.low.data(), sizeof(a));
    std::memcpy(&b, d.diff.data(), sizeof(b));
    RINGGUARD_RETURN_IF_ERROR(compareFingerprints(d.lowRank, a, d.diffRank, b));
  }
  // A peer that already failed must stop us before payload moves. A peer whose wait timed out (a report)
  // was waiting on a rank of this exchange, maybe on this one, which then joined late: it had every
  // summary when it came (always the case in a one-round exchange, whose messages are all sent first).
  // Follow the reports as a wait would, so that this rank names the rank that stopped (itself when it was
  // late: "rank 2 (this rank) joined the collective ...") and its own report lets the waiting ranks name it.
  PeerError e;
  bool got = false;
  RINGGUARD_RETURN_IF_ERROR(takePeerError(ctx, &e, &got));
  if (!got) return Status::ok();
  if (e.kind != ErrorKind::kReport) return peerErrorStatus(e);
  WaitState w;
  w.peer = e.from;
  w.what = "rank " + std::to_string(e.from) + " to finish the fingerprint exchange";
  noteStall(ctx, Clock::now(), &w);
  return blameStall(ctx, w, &e);
}

Status exchangeRejected(const CollectiveContext& ctx, CollectiveKind kind) {
  Fingerprint fp = makeFingerprint(kind, ReduceOp::kSum, DataType::kUint8, 0, kNoRoot, issueOrder(ctx));
  fp.flags |= kFingerprintInvalidInput;
  return exchangeFingerprints(ctx, fp);
}

FailureValidator ringFailureValidator(const RingSchedule& schedule) {
  return [&schedule](const SliceFailure& f) {
    const bool ok =
        f.column < uint32_t(schedule.nranks()) && f.slice < uint32_t(schedule.slicesPerColumn()) &&
        f.step < uint32_t(schedule.numSteps()) && f.sender == schedule.sender(int(f.column), int(f.step)) &&
        f.receiver == schedule.receiver(int(f.column), int(f.step));
    if (ok) return Status::ok();
    std::ostringstream os;
    os << "outside the ring schedule (" << schedule.nranks() << " columns, " << schedule.slicesPerColumn()
       << " slices, " << schedule.numSteps() << " steps)";
    return Status(StatusCode::kTransportError, os.str());
  };
}

Status exchangeVerdicts(const CollectiveContext& ctx, int round, const std::vector<SliceFailure>& mine,
                        std::vector<SliceFailure>* global, const FailureValidator& validate) {
  const int n = ctx.transport->size();
  std::vector<SliceFailure> all = canonicalFailures(mine);
  auto summary = [&] {
    std::vector<uint8_t> out;
    appendBytes(&out, uint32_t(all.size()));
    appendBytes(&out, uint32_t(0));
    const auto* p = reinterpret_cast<const uint8_t*>(all.data());
    out.insert(out.end(), p, p + all.size() * sizeof(SliceFailure));
    return out;
  };
  auto merge = [&](int from, const uint8_t* body, size_t bytes) {
    uint32_t count = 0;
    if (bytes >= 8) std::memcpy(&count, body, sizeof(count));
    if (bytes < 8 || bytes != 8 + size_t(count) * sizeof(SliceFailure)) {
      std::ostringstream os;
      os << ctx.name << " seq " << ctx.seq << ": malformed verdict of round " << round << " from rank "
         << from << " (" << bytes << " bytes for " << count << " entries)";
      return Status(StatusCode::kTransportError, os.str());
    }
    for (uint32_t i = 0; i < count; ++i) {
      SliceFailure f;
      std::memcpy(&f, body + 8 + size_t(i) * sizeof(f), sizeof(f));
      const auto reason = static_cast<SliceCheck>(f.reason);
      Status st;
      if (f.sender < 0 || f.sender >= n || f.receiver < 0 || f.receiver >= n) {
        st = Status(StatusCode::kTransportError, "ranks outside [0, " + std::to_string(n) + ")");
      } else if (f.reason > uint8_t(kLastSliceCheck) || !isLinkFailure(reason)) {
        st = Status(StatusCode::kTransportError,
                    "reason " + std::to_string(f.reason) + " is not a link failure");
      } else if (validate) {
        st = validate(f);
      }
      if (!st.isOk()) {
        std::ostringstream os;
        os << ctx.name << " seq " << ctx.seq << ": verdict entry from rank " << from << " rejected (link "
           << f.sender << " -> " << f.receiver << ", step " << f.step << ", slice " << f.slice << ", column "
           << f.column << "): " << st.message();
        return Status(StatusCode::kTransportError, os.str());
      }
      all.push_back(f);
    }
    // Sorted and deduplicated after each merge: overlapping ranges add nothing, and the list stays
    // bounded by the distinct failures the schedule allows.
    all = canonicalFailures(std::move(all));
    return Status::ok();
  };
  RINGGUARD_RETURN_IF_ERROR(disseminate(
      ctx, ControlTag::kVerdict, uint32_t(round), /*checkSeq=*/true, summary, merge, [round](int p) {
        return "the verdict of round " + std::to_string(round) + " from rank " + std::to_string(p);
      }));
  *global = std::move(all);
  return Status::ok();
}

}  // namespace ringguard
