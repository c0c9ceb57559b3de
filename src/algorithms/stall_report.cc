#include "algorithms/stall_report.h"

#include <algorithm>
#include <set>
#include <sstream>
#include <thread>

#include "algorithms/agreement.h"

namespace ringguard {

std::chrono::milliseconds stallGrace(std::chrono::milliseconds timeout) {
  return std::min(timeout / 4, std::chrono::milliseconds(5000));
}

std::string describeStall(int me, const WaitState& mine, const PeerError* trigger,
                          const std::map<int, PeerError>& reports, std::chrono::milliseconds grace,
                          uint32_t timeoutMs, bool* resolved) {
  std::ostringstream os;
  *resolved = true;
  const auto stopped = [&os](int rank) { os << ": rank " << rank << " stopped making progress"; };
  if (mine.stalledMs > 0) {
    // This rank knows it did not run: whatever its peers say, it is the one they waited on.
    os << "rank " << me << " (this rank) made no progress for " << mine.stalledMs
       << " ms (stopped, descheduled or busy) while waiting for " << mine.what;
    if (trigger != nullptr) {
      os << "; rank " << trigger->from << " was waiting " << trigger->waitedMs << " ms for " << trigger->text;
    }
    stopped(me);
    return os.str();
  }
  if (mine.timedOut) {
    os << "timed out after " << timeoutMs << " ms on rank " << me << " waiting for " << mine.what;
  } else {
    os << "rank " << me << " was waiting " << mine.waitedMs << " ms for " << mine.what;
  }
  if (trigger != nullptr && trigger->from != mine.peer) {  // else it is the first hop below
    os << " (told by rank " << trigger->from << ", which was waiting " << trigger->waitedMs << " ms for "
       << trigger->text << ")";
  }
  if (mine.peer < 0) {  // its own work (the executor) did not finish
    stopped(me);
    return os.str();
  }
  // `cur` joined the collective `late` ms after `waiter` began waiting for it (more than half a timeout).
  const auto late = [&](int cur, uint32_t curInCollectiveMs, int waiter, uint32_t waiterWaitedMs) {
    if (uint64_t(curInCollectiveMs) + timeoutMs / 2 >= waiterWaitedMs) return false;
    os << "; rank " << cur << (cur == me ? " (this rank)" : "") << " joined the collective "
       << waiterWaitedMs - curInCollectiveMs << " ms after rank " << waiter << " began waiting for it";
    stopped(cur);
    return true;
  };
  std::set<int> visited{me};
  int waiter = me;
  uint32_t waiterWaitedMs = mine.waitedMs;
  for (int cur = mine.peer;;) {
    if (cur == me && late(me, mine.inCollectiveMs, waiter, waiterWaitedMs)) return os.str();
    if (!visited.insert(cur).second) {
      os << "; the ranks wait on each other; the rank that stopped making progress is unknown (rank "
         << mine.peer << ", or a rank it was waiting on)";
      return os.str();
    }
    auto it = reports.find(cur);
    if (it == reports.end()) {
      os << "; rank " << cur << " reported nothing within " << grace.count() << " ms";
      stopped(cur);
      *resolved = false;  // its report may still come
      return os.str();
    }
    const PeerError& r = it->second;
    if (r.kind == ErrorKind::kReport && late(cur, r.inCollectiveMs, waiter, waiterWaitedMs)) return os.str();
    if (r.kind == ErrorKind::kError) {
      os << "; rank " << cur << " failed: " << r.text;
      return os.str();
    }
    if (r.stalledMs > 0) {
      os << "; rank " << cur << " made no progress for " << r.stalledMs
         << " ms (stopped, descheduled or busy)";
      stopped(cur);
      return os.str();
    }
    os << "; rank " << cur << " was waiting " << r.waitedMs << " ms for " << r.text;
    if (r.waitingOn < 0) {
      stopped(cur);
      return os.str();
    }
    waiter = cur;
    waiterWaitedMs = r.waitedMs;
    cur = r.waitingOn;
  }
}

Status blameStall(const CollectiveContext& ctx, const WaitState& mine, const PeerError* trigger) {
  using Clock = std::chrono::steady_clock;
  PeerError report;
  report.seq = ctx.held != nullptr ? ctx.seq : kNoCollective;
  report.kind = ErrorKind::kReport;
  report.waitingOn = mine.peer;
  report.waitedMs = mine.waitedMs;
  report.stalledMs = mine.stalledMs;
  report.inCollectiveMs = mine.inCollectiveMs;
  report.text = mine.what;
  sendErrorFrame(ctx.transport, report);

  std::map<int, PeerError> reports;
  if (trigger != nullptr) reports.emplace(trigger->from, *trigger);
  const std::chrono::milliseconds grace = stallGrace(ctx.options->timeout);
  const uint32_t timeoutMs = uint32_t((ctx.options->timeout + ctx.timeoutSlack).count());
  const auto deadline = Clock::now() + grace;
  std::string text;
  for (;;) {
    bool resolved = false;
    text = describeStall(ctx.transport->rank(), mine, trigger, reports, grace, timeoutMs, &resolved);
    if (resolved || Clock::now() >= deadline) break;
    if (ctx.aborted != nullptr && ctx.aborted->load(std::memory_order_relaxed)) break;
    // Keep the transport moving: our own report must leave, and the peers' arrive.
    if (!ctx.transport->progress().isOk()) break;
    PeerError e;
    bool got = false;
    if (!takePeerError(ctx, &e, &got).isOk()) break;  // say what is known
    if (got) {
      reports.emplace(e.from, std::move(e));  // a rank's first frame: its report, if it sent one
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  const std::string message = std::string(ctx.name) + " seq " + std::to_string(ctx.seq) + ": " + text;
  // A rank that stopped may not answer a teardown that needs every rank (MPI_Finalize): the transport knows.
  ctx.transport->notePeerStalled("rank " + std::to_string(ctx.transport->rank()) + ": " + message);
  return Status(StatusCode::kTimeout, message);
}

}  // namespace ringguard
