#pragma once
// Naming the rank that stopped making progress (docs/design/protocol.md, "Errors, timeouts, poisoning").
// A rank whose wait on peer p times out does not know whether p stopped or is itself waiting on a rank
// that did. So it announces "waiting for <what> from p" (an error frame of kind kReport), and so does every
// rank that receives such a report while it waits; each then collects the reports that arrive within a
// grace and follows them from its own wait: p was waiting on q, q on s, s reported nothing, so s stopped.
// A rank that joined the collective more than half a timeout after a rank began waiting for it was late:
// it stopped making progress (outside the collective), even though it waits now too. Any other chain that
// comes back to a rank already on it (the ranks wait on each other: a lost message) names no one: the
// culprit is unknown.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "algorithms/error_frames.h"
#include "ringguard/core/status.h"

namespace ringguard {

struct CollectiveContext;

// This rank's wait when it timed out, or when a peer's report arrived during it.
struct WaitState {
  int peer = -1;     // the rank waited on; -1 for this rank's own work (the executor)
  std::string what;  // "slice 3 of step 2 from rank 0"
  uint32_t waitedMs = 0;
  uint32_t stalledMs = 0;       // this rank made no progress for this long (0 unless it exceeded the timeout)
  uint32_t inCollectiveMs = 0;  // since this rank's first wait of the collective
  bool timedOut = false;        // this rank's own wait timed out (else `trigger` told it)
};

// How long a rank collects reports after announcing its own: a quarter of the timeout, at most 5 s.
std::chrono::milliseconds stallGrace(std::chrono::milliseconds timeout);

// The message for what is known so far (after "<name> seq <seq>: "). *resolved once no further report can
// change it (the chain ends at a rank that reported why it stopped, or comes back on itself); a chain that
// ends at a rank with no report yet is not resolved until the grace is over. `trigger`: the report that
// told this rank, or null when its own wait timed out. Pure: tested alone.
std::string describeStall(int me, const WaitState& mine, const PeerError* trigger,
                          const std::map<int, PeerError>& reports, std::chrono::milliseconds grace,
                          uint32_t timeoutMs, bool* resolved);

// Announces `mine`, collects the peers' reports for stallGrace(timeout) (less once resolved) and returns
// the kTimeout that names the rank that stopped, or says it is unknown.
Status blameStall(const CollectiveContext& ctx, const WaitState& mine, const PeerError* trigger);

}  // namespace ringguard
