#pragma once
// The control plane every collective runs beside its payload: what it needs besides its buffers (the
// CollectiveContext: transport, options, fault injector, counters), the waiting discipline every wait shares
// (deadline, peer errors, abort), and the agreements over the control channel, each one dissemination:
// fingerprints before any payload moves, rejected calls in their collective's place, the verdicts of a pass.
// The collectives themselves are one file each (allreduce.cc, ...) on the pipeline (pipeline.h).
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/error_frames.h"
#include "core/fault_injector.h"
#include "core/fingerprint.h"
#include "core/repair.h"
#include "core/ring_schedule.h"
#include "ringguard/core/counters.h"
#include "ringguard/core/options.h"
#include "transport/control/control_channel.h"
#include "transport/transport.h"

namespace ringguard {

struct CollectiveContext {
  Transport* transport = nullptr;
  const Options* options = nullptr;
  const FaultInjector* injector = nullptr;
  Counters* counters = nullptr;  // this collective adds to it
  uint64_t seq = 0;
  // The issue lane of the thread that issued the collective and the lane's number of it (0, 0: none), for
  // its fingerprints (ringguard/core/issue_lane.h).
  uint32_t lane = 0;
  uint32_t laneSeq = 0;
  const char* name = "collective";
  uint32_t track = 0;                          // the communicator's timeline track (core/trace_events.h)
  const std::atomic<bool>* aborted = nullptr;  // set by Communicator::abort: every wait returns kAborted
  // Added to options->timeout by pollUntil. A dissemination round k waits on a rank that may itself wait
  // in an earlier round for a stalled one: its slack lets the rank that waits on the stalled rank directly
  // time out first and name it (see disseminate; a one-round exchange waits only on senders and adds none).
  std::chrono::milliseconds timeoutSlack{0};
  // Set for a collective of every rank (numbered by seq): the error frames of a later collective wait here
  // until this rank reaches it (error_frames.h). Null: every peer error applies at once.
  HeldErrors* held = nullptr;
};

// The collective's place in the issue order, for its fingerprints: (seq, lane, laneSeq).
inline IssueOrder issueOrder(const CollectiveContext& ctx) {
  return IssueOrder{ctx.seq, ctx.lane, ctx.laneSeq};
}

// Polls `test` until it reports done. Fails with kPeerError as soon as a peer broadcasts a fatal error,
// and with kAborted once the communicator is aborted. When nothing completes within the timeout, or a
// peer reports that its own wait timed out, fails with a kTimeout naming the rank that stopped making
// progress ("... waiting for <what>; ...: rank 2 stopped making progress", stall_report.h). `peer`: the
// rank whose message or progress `test` waits for; -1 for this rank's own work.
Status pollUntil(const CollectiveContext& ctx, const std::function<Status(bool* done)>& test,
                 const std::function<std::string()>& what, int peer = -1);

// Waits for one framed request exchanged with `peer`.
Status waitFrame(const CollectiveContext& ctx, FrameRequest* req, const std::function<std::string()>& what,
                 int peer);

// Control exchanges cost O(log N) per rank (docs/design/protocol.md, "Control channel"): a dissemination
// of an idempotent, associative summary in disseminationRounds(N) rounds; in round k each rank sends to
// rank + 2^k and receives from rank - 2^k. Where one round to every peer costs no more frames
// (N - 1 <= ceil(log2 N): N <= 3) the exchange is that one round instead: each rank sends its summary to
// every peer, then receives and merges every peer's. Every rank ends with the summary of all ranks.
// Precedes the summary in every exchange message.
struct DisseminationHeader {
  uint64_t seq;
  uint32_t
      round;   // verdicts: the repair round; fingerprints: 0 (a small collective's resent frame: the attempt)
  uint32_t k;  // dissemination round
};
static_assert(sizeof(DisseminationHeader) == 16, "exchange messages are a fixed wire format");

// Appends the bytes of `v` to a control message being built.
template <typename T>
void appendBytes(std::vector<uint8_t>* out, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out->insert(out->end(), p, p + sizeof(T));
}

int disseminationRounds(int nranks);  // ceil(log2 nranks); 0 for one rank
bool exchangeInOneRound(int nranks);  // 2 <= nranks <= 3
int exchangeRounds(int nranks);       // sequential rounds of an exchange: 1 when exchangeInOneRound, else
                                      // disseminationRounds

// Round k's message is made by `summary()` (called once per round, after the merges of the rounds before;
// once in a one-round exchange) and each one received is handed to `merge(from, body, bytes)`. Every message
// carries (ctx.seq, `round`, k); one that does not match is a kTransportError naming the peer, except that
// the seq is not compared when !checkSeq (fingerprints: ranks at different sequence numbers are a fingerprint
// mismatch, which the summary reports). `what(peer)` names what a timeout was waiting for.
Status disseminate(const CollectiveContext& ctx, ControlTag tag, uint32_t round, bool checkSeq,
                   const std::function<std::vector<uint8_t>()>& summary,
                   const std::function<Status(int from, const uint8_t* body, size_t bytes)>& merge,
                   const std::function<std::string(int peer)>& what);

// Compares every rank's `bytes` at `mine` in one dissemination (tag `tag`). On every rank the same
// outcome: diffRank == -1 when all ranks hold the same bytes, otherwise the lowest rank (lowRank, its bytes
// in low) and the lowest rank whose bytes differ from low (diffRank, diff).
struct Disagreement {
  int lowRank = 0;
  int diffRank = -1;
  std::vector<uint8_t> low, diff;
};
Status findDisagreement(const CollectiveContext& ctx, ControlTag tag, const void* mine, size_t bytes,
                        Disagreement* out);

// Checks `mine` against every rank's fingerprint (before any payload). A mismatch is the same
// kFingerprintMismatch on every rank, naming the lowest rank and the lowest rank whose fingerprint differs
// from it, with both values ("rank 0 has {...}, rank 2 has {...}").
Status exchangeFingerprints(const CollectiveContext& ctx, const Fingerprint& mine);

// A call of `kind` that this rank rejected before it reached the communicator, in that collective's place:
// its fingerprint without arguments (op sum, dtype u8, count 0, no root), flagged invalid-arguments. OK when
// every rank rejected it (their fingerprints are equal); otherwise the kFingerprintMismatch naming this
// rank's flagged fingerprint, on every rank, before any payload moves.
Status exchangeRejected(const CollectiveContext& ctx, CollectiveKind kind);

// Checks one verdict entry received from a peer against the collective's schedule (column, slice and
// step in range, sender and receiver the ranks of that hop): an entry a buggy or hostile peer made up must
// end in an error, never reach the repair plan (which indexes the executor's memory with it).
using FailureValidator = std::function<Status(const SliceFailure&)>;
// The ring schedule's bounds (allreduce, reduce-scatter, all-gather over `schedule`, which must outlive
// the validator).
FailureValidator ringFailureValidator(const RingSchedule& schedule);

// Combines this rank's failures of `round` with every rank's and returns the canonical global list (the
// same on every rank). Every entry received from a peer is checked (ranks in range, reason a link
// failure, then `validate` when given: collectives pass their schedule's bounds) before it is used; a
// rejected entry is a kTransportError naming the peer and the entry.
Status exchangeVerdicts(const CollectiveContext& ctx, int round, const std::vector<SliceFailure>& mine,
                        std::vector<SliceFailure>* global, const FailureValidator& validate = nullptr);

}  // namespace ringguard
